"""predict_save, term by term, on hand-built plans and profiles with round figures (tests/handmade.py).

Every expected value is worked out in the comment above it from the formula in planning/savetime.py's docstring:
  T_save = T_coord + T_bw + T_meta + T_tail
  T_bw   = max(S_r + b_r ÷ B(1), S_r + node bytes ÷ B_node(w), total ÷ B_agg)      (no page-cache figure, or direct)
  T_bw   = max(S_r + b_r ÷ C, b_r ÷ B(1), node bytes ÷ B_node(w), total ÷ B_agg)   (buffered, page-cache copy rate C)

Deliberate breaks each of these catches, made one at a time and reverted:
- the node term made 2× faster (`node_bytes / (2 * node_bw)`): test_node_term_binds,
  test_required_bandwidth_inverts_the_model;
- the aggregate term made 2× faster (`total_bytes / (2 * agg_bw)`): test_aggregate_term_binds_with_the_shared_limit,
  test_aggregate_from_the_measured_curve_over_hosts;
- the serialisation dropped (`rates = {}`: S_r = 0): test_single_writer_serialises_then_writes, test_node_term_binds,
  test_page_cache_overlap_cpu_bound and five more.
"""

from __future__ import annotations

import math

import pytest

from ckplan.planning.policy import DEFAULT_DCP_FIXED_S, DEFAULT_SERIALIZE_BYTES_PER_S
from ckplan.planning.savetime import (
    machine_figures,
    predict_save,
    required_bandwidth,
    required_bandwidth_on,
    writer_loads,
)
from ckplan.planning.scaling import aggregate_estimate
from ckplan.profile import Replay, StorageProfile
from tests.handmade import hand_calibration, hand_plan, hand_profile

GB = 10**9
TORCH_1GB = {"torch.save": 1e9}  # serialiser: 1 GB/s per writer, given as with --serialize-bandwidth


def test_single_writer_serialises_then_writes():
    """One writer, 4 GB in one torch.save file, no page-cache figure: serialise, then write."""
    plan = hand_plan([("a.pt", 4 * GB, 0, 0)])
    profile = hand_profile({1: 2e9}, files_per_s=100, p99_s=0.05)
    t = predict_save(plan, profile, given_serializers=TORCH_1GB)
    # S_r = 4 GB ÷ 1 GB/s = 4 s; single = 4 + 4 GB ÷ 2 GB/s = 6 s; node = 4 + 4 GB ÷ B_node(1) = 6 s;
    # aggregate: node-local, one node → 2 GB/s → 2 s. T_bw = 6 s, bound by the single writer (ties go to it).
    assert t.serialize_seconds == pytest.approx(4.0)
    assert t.bandwidth_seconds == pytest.approx(6.0)
    assert t.limited_by == "single writer"
    # T_meta = 1 file ÷ 100 files/s = 0.01 s; T_tail = p99 0.05 s; no coordination (not a collective save)
    assert (t.metadata_seconds, t.fsync_tail_seconds, t.coordination_seconds) == pytest.approx((0.01, 0.05, 0.0))
    assert t.seconds == pytest.approx(6.06)
    assert (t.node_bandwidth_bytes_per_s, t.aggregate_bandwidth_bytes_per_s) == (2e9, 2e9)
    assert (t.source, t.write_path, t.writers_per_node, t.nodes) == ("model", "buffered", 1, 1)


def test_node_term_binds():
    """Two writers on one node, 2 GB each; the node's bandwidth does not grow past one writer."""
    plan = hand_plan([("r0.pt", 2 * GB, 0, 0), ("r1.pt", 2 * GB, 1, 0)])
    profile = hand_profile({1: 2e9, 2: 2e9})
    t = predict_save(plan, profile, given_serializers={"torch.save": 10e9})
    # S_r = 2 GB ÷ 10 GB/s = 0.2 s. single = 0.2 + 2 GB ÷ 2 GB/s = 1.2 s; node = 0.2 + 4 GB ÷ B_node(2) 2 GB/s = 2.2 s;
    # aggregate = 4 GB ÷ (2 GB/s × 1 node) = 2.0 s → T_bw = 2.2 s, the node's bandwidth binds
    assert t.bandwidth_seconds == pytest.approx(2.2)
    assert t.limited_by == "node bandwidth"
    assert t.serialize_seconds == pytest.approx(0.2)
    # T_meta = 2 files ÷ 100 files/s
    assert t.seconds == pytest.approx(2.2 + 0.02)


def test_aggregate_term_binds_with_the_shared_limit():
    """Four nodes of one 1 GB writer each on a shared target that sustains 2 GB/s in all."""
    plan = hand_plan([(f"n{i}.pt", GB, i, i) for i in range(4)])
    profile = hand_profile({1: 1e9}, shared=True, limit=2e9)
    t = predict_save(plan, profile, given_serializers={"torch.save": 10e9})
    # single = node = 0.1 + 1 GB ÷ 1 GB/s = 1.1 s; aggregate = 4 GB ÷ min(1 GB/s × 4, 2 GB/s) = 2.0 s
    assert t.aggregate_bandwidth_bytes_per_s == 2e9
    assert t.bandwidth_seconds == pytest.approx(2.0)
    assert t.limited_by == "aggregate bandwidth"
    assert t.serialize_seconds == 0.0  # the aggregate term is the flush of all nodes: no writer's serialiser in it
    assert t.seconds == pytest.approx(2.0 + 1 / 100)


def test_aggregate_from_the_measured_curve_over_hosts():
    """The probe's curve over hosts: 1 GB/s on 1 host, 4 GB/s on 8, read between and beyond its points."""
    plan = hand_plan([(f"n{i}.pt", GB, i, i) for i in range(4)])
    profile = hand_profile({1: 1e9}, shared=True, hosts_curve={1: 1e9, 8: 4e9})
    t = predict_save(plan, profile, given_serializers={"torch.save": math.inf})
    # 4 hosts: 1 + (4 − 1)/(8 − 1) × (4 − 1) GB/s = 16/7 GB/s = 2.2857 GB/s; 4 GB at that rate = 1.75 s
    assert t.aggregate_bandwidth_bytes_per_s == pytest.approx(16 / 7 * 1e9)
    assert t.bandwidth_seconds == pytest.approx(1.75)
    assert t.limited_by == "aggregate bandwidth"
    assert (t.aggregate.model, t.aggregate.extrapolated) == ("interpolated", False)
    # beyond the last point, two host counts measured: the best measured aggregate (4 GB/s at 8 hosts) held flat,
    # not its per-host share times the hosts (8 GB/s); with the system's limit known, per node × nodes up to it
    assert aggregate_estimate(profile, 1e9, 16).bytes_per_s == 4e9
    assert (
        aggregate_estimate(profile.model_copy(update={"aggregate_limit_bytes_per_s": 6e9}), 1e9, 16).bytes_per_s == 6e9
    )
    # node-local targets: each node writes its own disk, so the limit of a shared system does not apply
    local = hand_profile({1: 1e9}, shared=False, limit=2e9)
    assert aggregate_estimate(local, 1e9, 4).bytes_per_s == 4e9


def test_page_cache_overlap_flush_bound():
    """Buffered writes with a page-cache copy rate: the flush runs beside the serialiser instead of after it."""
    plan = hand_plan([("a.pt", 4 * GB, 0, 0)])
    with_copy = hand_profile({1: 1e9}, page_cache=4e9)
    t = predict_save(plan, with_copy, given_serializers={"torch.save": 2e9})
    # S_r = 2 s; CPU part = 2 + 4 GB ÷ C 4 GB/s = 3 s; flush = 4 GB ÷ 1 GB/s = 4 s → max = 4 s (not 2 + 4 = 6 s)
    assert t.bandwidth_seconds == pytest.approx(4.0)
    assert t.limited_by == "single writer" and t.serialize_seconds == pytest.approx(2.0)
    without = predict_save(plan, hand_profile({1: 1e9}), given_serializers={"torch.save": 2e9})
    assert without.bandwidth_seconds == pytest.approx(6.0)  # serialise, then write: 2 + 4 s


def test_page_cache_overlap_cpu_bound():
    plan = hand_plan([("a.pt", 4 * GB, 0, 0)])
    t = predict_save(plan, hand_profile({1: 2e9}, page_cache=1e9), given_serializers={"torch.save": 2e9})
    # CPU part = 2 s + 4 GB ÷ C 1 GB/s = 6 s; flush = 4 GB ÷ 2 GB/s = 2 s → 6 s
    assert t.bandwidth_seconds == pytest.approx(6.0)


def test_direct_writes_do_not_overlap_and_use_their_own_curve():
    """O_DIRECT (FastPersist): the writer's thread waits for the device, so the page-cache figure does not apply."""
    plan = hand_plan([("a.pt", 4 * GB, 0, 0)], write_path="direct")
    profile = hand_profile({1: 1e9}, direct={1: 4e9}, page_cache=8e9)
    t = predict_save(plan, profile, given_serializers={"torch.save": 2e9})
    # direct curve B(1) = 4 GB/s: S_r 2 s + 4 GB ÷ 4 GB/s = 3 s
    assert (t.write_path, t.bandwidth_seconds, t.notes) == ("direct", pytest.approx(3.0), [])
    # no direct curve measured: the buffered curve is used, and said so; on it the page-cache overlap applies:
    # max(2 + 4 GB ÷ 8 GB/s, 4 GB ÷ 1 GB/s) = 4 s
    fallback = predict_save(plan, hand_profile({1: 1e9}, page_cache=8e9), given_serializers={"torch.save": 2e9})
    assert fallback.write_path == "buffered" and fallback.bandwidth_seconds == pytest.approx(4.0)
    assert "did not measure" in fallback.notes[0]


def test_metadata_per_node_and_the_shared_metadata_limit():
    """Four nodes of 10 files each: 1 torch.save file and 9 empty raw files (no bytes, no serialiser)."""
    files = [(f"n{i}.pt", GB, i, i) for i in range(4)] + [
        (f"n{i}-{k}.json", 0, i, i) for i in range(4) for k in range(9)
    ]
    plan = hand_plan(files)
    local = predict_save(plan, hand_profile({1: 1e9}, files_per_s=100), given_serializers=TORCH_1GB)
    # node-local: 10 files ÷ 100 files/s = 0.1 s (each node creates its own)
    assert local.metadata_seconds == pytest.approx(0.1)
    shared = predict_save(
        plan, hand_profile({1: 1e9}, files_per_s=100, shared=True, files_limit=200), given_serializers=TORCH_1GB
    )
    # shared, metadata service at 200 files/s: max(10 ÷ 100, 40 ÷ 200) = 0.2 s
    assert shared.metadata_seconds == pytest.approx(0.2)
    # merged what-if: one file per writer → 1 ÷ 100 and 4 ÷ 200
    merged = predict_save(
        plan,
        hand_profile({1: 1e9}, files_per_s=100, shared=True, files_limit=200),
        given_serializers=TORCH_1GB,
        node_files=1,
        total_files=4,
    )
    assert merged.metadata_seconds == pytest.approx(0.02)


def test_fsync_tail_is_the_p99():
    plan = hand_plan([("a.pt", GB, 0, 0)])
    t = predict_save(plan, hand_profile({1: 1e9}, p99_s=0.25), given_serializers={"torch.save": math.inf})
    # 1 GB ÷ 1 GB/s + 1 ÷ 100 + 0.25 s
    assert t.fsync_tail_seconds == 0.25 and t.seconds == pytest.approx(1.0 + 0.01 + 0.25)


def test_coordination_and_machine_figures_sources():
    """A collective save (DCP) pays its fixed cost: the default, this machine's calibration, or nothing when copying files."""
    plan = hand_plan([("__0_0.distcp", GB, 0, 0), (".metadata", 0, 0, 0)], coordinated=True, framework="dcp")
    default = predict_save(plan, hand_profile({1: 1e9}))
    # default: DCP 1.0 GB/s → 1 s serialise + 1 s write; 2 files ÷ 100; fixed cost 0.010 s
    assert default.coordination_seconds == DEFAULT_DCP_FIXED_S == 0.010
    assert default.seconds == pytest.approx(0.010 + 2.0 + 0.02)
    assert default.machine.coordination_seconds.source == "default"
    assert default.machine.serialize_bytes_per_s["dcp"].value == DEFAULT_SERIALIZE_BYTES_PER_S["dcp"] == 1e9
    calibrated = hand_profile({1: 1e9}, calibration=hand_calibration({"dcp": 2e9}, dcp_fixed_s=0.5))
    c = predict_save(plan, calibrated)
    # measured here: 0.5 s fixed + (0.5 s serialise + 1 s write) + 0.02 s
    assert c.seconds == pytest.approx(0.5 + 1.5 + 0.02)
    assert (c.machine.coordination_seconds.source, c.machine.serialize_bytes_per_s["dcp"].source) == (
        "measured here",
    ) * 2
    given = predict_save(plan, calibrated, given_serializers={"dcp": 4e9})
    assert given.machine.serialize_bytes_per_s["dcp"].source == "given"
    assert given.serialize_seconds == pytest.approx(0.25)
    # copying finished files (a staging drain): no serialiser, no coordination
    copy = predict_save(plan, calibrated, framework_costs=False)
    assert (copy.coordination_seconds, copy.serialize_seconds, copy.machine) == (0.0, 0.0, None)
    assert copy.seconds == pytest.approx(1.0 + 0.02)
    m = machine_figures(None, {"torch.save": 3e9})
    assert m.rates()["torch.save"] == 3e9 and m.rates()["safetensors"] == DEFAULT_SERIALIZE_BYTES_PER_S["safetensors"]


def test_overrides_scale_the_busiest_writers():
    """What-ifs pass other bytes (compression, incremental): each writer's bytes and serialisation scale with the node's."""
    plan = hand_plan([("r0.pt", 2 * GB, 0, 0), ("r1.pt", 2 * GB, 1, 0)])
    profile = hand_profile({1: 1e9, 2: 2e9})
    t = predict_save(plan, profile, given_serializers=TORCH_1GB, total_bytes=GB, node_bytes=GB)
    # scale 1 GB ÷ 4 GB = ¼: each writer 0.5 GB, 0.5 s serialise; single = 0.5 + 0.5 = 1.0 s;
    # node = 0.5 + 1 GB ÷ 2 GB/s = 1.0 s; aggregate = 1 GB ÷ 2 GB/s = 0.5 s
    assert t.bandwidth_seconds == pytest.approx(1.0)
    assert writer_loads(plan, 0, TORCH_1GB) == {0: (2e9, 2.0), 1: (2e9, 2.0)}


def _replay(plan, **kw) -> Replay:
    base = dict(
        method="framework saver",
        write_path="buffered",
        seconds=0.5,
        bytes=GB // 100,
        files=1,
        writers=1,
        scale=0.01,
        plan_fingerprint=plan.fingerprint,
        full_scale_seconds=42.0,
    )
    return Replay(**{**base, **kw})


def test_replay_of_the_same_plan_replaces_the_model():
    plan = hand_plan([("a.pt", GB, 0, 0)])
    t = predict_save(plan, hand_profile({1: 1e9}, replay=_replay(plan)))
    assert (t.seconds, t.source, t.limited_by) == (42.0, "replay", "replay")
    assert t.machine is None  # a framework saver's replay measured the serialiser itself
    # not used: another plan, another write path, or a what-if that changes the save
    other = hand_plan([("a.pt", GB + 1, 0, 0)])
    assert predict_save(plan, hand_profile({1: 1e9}, replay=_replay(other))).source == "model"
    assert predict_save(plan, hand_profile({1: 1e9}, replay=_replay(plan, write_path="direct"))).source == "model"
    assert predict_save(plan, hand_profile({1: 1e9}, replay=_replay(plan)), total_bytes=GB / 2).source == "model"
    assert predict_save(plan, hand_profile({1: 1e9}, replay=_replay(plan)), framework_costs=False).source == "model"


def test_a_replay_faster_than_the_aggregate_bandwidth_is_not_used():
    """Two nodes of 1 GB each on a system that takes 1 GB/s in all: 2 s at the least. A replay of both nodes in
    1.5 s (1.33 GB/s, past 1.2 × 1 GB/s) missed a cost, and the model stands, saying why; one in 1.8 s (1.11 GB/s,
    within the aggregate's noise) is used."""
    plan = hand_plan([("a.pt", GB, 0, 0), ("b.pt", GB, 1, 1)])

    def on(replay: Replay | None = None) -> StorageProfile:
        return hand_profile({1: 1e9}, shared=True, hosts_curve={1: 1e9, 2: 1e9}, replay=replay)

    model = predict_save(plan, on())
    assert model.source == "model" and model.bandwidth_seconds == pytest.approx(2.0)
    fast = predict_save(plan, on(_replay(plan, nodes=2, full_scale_seconds=1.5)))
    assert (fast.source, fast.seconds) == ("model", pytest.approx(model.seconds))
    assert "would move 1333 MB/s" in fast.notes[-1] and "the model is used instead" in fast.notes[-1]
    steady = predict_save(plan, on(_replay(plan, nodes=2, full_scale_seconds=1.8)))
    assert (steady.source, steady.seconds) == ("replay", 1.8)


def test_one_hosts_replay_faster_than_the_probes_bandwidth_is_the_save():
    """One node of 1 GB on a disk the bandwidth phase measured at 0.5 GB/s (2 s); its replay, timed by the wall
    clock on that host minutes later, took 1.2 s (0.83 GB/s, past 1.2 × 0.5 GB/s): the disk's rate moved, no cost
    went untimed, and the replay is the save."""
    plan = hand_plan([("a.pt", GB, 0, 0)])
    fast = predict_save(plan, hand_profile({1: 0.5e9}, replay=_replay(plan, full_scale_seconds=1.2)))
    assert (fast.source, fast.seconds, fast.notes) == ("replay", 1.2, [])


def test_required_bandwidth_inverts_the_model():
    """Solved for bandwidth: the figures that make the forward model give exactly the target time."""
    plan = hand_plan([("r0.pt", 2 * GB, 0, 0), ("r1.pt", 2 * GB, 1, 0)])
    # 10 s, of which 1 s fixed and 1 s of CPU before the bytes: 4 GB in 8 s
    assert required_bandwidth(plan, 10, fixed_seconds=1, writer_cpu_seconds=1, overlap=False) == (0.5e9, 0.5e9)
    # overlapped: the flush gets the 9 s left beside the CPU part
    assert required_bandwidth(plan, 10, fixed_seconds=1, writer_cpu_seconds=1, overlap=True) == pytest.approx(
        (4e9 / 9, 4e9 / 9)
    )
    assert required_bandwidth(plan, 10, fixed_seconds=1, writer_cpu_seconds=9, overlap=True) is None
    # against a profile: 2 files ÷ 100 files/s = 0.02 s fixed, 2 s of torch.save per writer → 4 GB in 7.98 s
    profile = hand_profile({1: 1e9})
    agg, node = required_bandwidth_on(plan, profile, 10, TORCH_1GB)
    assert agg == pytest.approx(4e9 / 7.98)
    faster = hand_profile({1: node, 2: node}, files_per_s=100)
    assert predict_save(plan, faster, given_serializers=TORCH_1GB).seconds == pytest.approx(10)
