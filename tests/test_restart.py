"""The restart cost R = a fixed part + the checkpoint's predicted load (planning/savetime.predict_load,
planning/scenario.restart_cost), its use by recommend and provision, and the collective-timeout warning. Every
expected figure is worked out by hand from the numbers in the test."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from ckplan.cli.app import app
from ckplan.errors import InputError
from ckplan.planning import interval
from ckplan.planning.defaults import DEFAULT_DESERIALIZE_BYTES_PER_S, DEFAULT_RESTART_FIXED_S
from ckplan.planning.policy import Policy
from ckplan.planning.provision import provision_one
from ckplan.planning.savetime import predict_load, required_read_bandwidth
from ckplan.planning.scenario import collective_timeout_warning, restart_cost
from ckplan.profile import BandwidthPoint, ReadReplay
from ckplan.sizing.restore import RestoreFile, RestoreManifest
from tests.handmade import DATA, FILES, PLAN, hand_calibration, hand_plan, hand_profile

GB = 10**9


def manifest(**over) -> RestoreManifest:
    """Two nodes of four readers; every rank of a node reads one shared 8 GB torch.save file and its own 1 GB
    safetensors file: per rank 9 GB, per node 8 + 4 = 12 GB distinct of 4 × 9 = 36 GB requested."""
    fields = dict(
        files=[
            RestoreFile(path="shared.pt", bytes=8 * GB, format="torch.save", readers=8, nodes=2),
        ],
        own_files=8,  # each rank's own 1 GB safetensors file
        own_bytes=8 * GB,
        rank_bytes=9 * GB,
        rank_distinct_bytes=9 * GB,
        rank_bytes_by_format={"torch.save": 8 * GB, "safetensors": 1 * GB},
        node_requested_bytes=36 * GB,
        node_bytes=12 * GB,
        node_files=5,
        requested_bytes=72 * GB,
        storage_bytes=24 * GB,
        read_amplification=24 / 20,
        nodes=2,
        readers_per_node=4,
        page_cache="by hand",
        notes=[],
    )
    fields.update(over)
    return RestoreManifest(**fields)


PLAN_R = PLAN.model_copy(update={"restore": manifest()})
CAL = hand_calibration({"torch.save": 10e9}).model_copy(
    update={"deserialize_bytes_per_s": {"torch.save": 4e9, "safetensors": 2e9}}
)


def reading(read: dict[int, float], agg: dict[int, float] | None = None, **kw):
    return hand_profile({1: 0.1e9}, calibration=CAL, shared=True, **kw).model_copy(
        update={
            "read_bandwidth": [BandwidthPoint(writers=w, bytes_per_s=b) for w, b in read.items()],
            "aggregate_read_bandwidth": [
                BandwidthPoint(writers=1, hosts=h, bytes_per_s=b) for h, b in (agg or {}).items()
            ],
        }
    )


# deserialise the busiest rank: 8 GB ÷ 4 GB/s + 1 GB ÷ 2 GB/s = 2.5 s
# streams per node: the node's 12 GB ÷ the rank's 9 GB = 4/3
DESERIALIZE = 2.5


def test_load_is_bound_by_the_node_on_its_read_curve():
    # read curve 1 GB/s at 1, 2 GB/s at 2 readers: at 4/3 streams 1 + (1/3) × 1 = 4/3 GB/s
    # single reader: 9 ÷ 1 = 9 s; node: 12 ÷ (4/3) = 9 s (a tie); all nodes: measured at 2 hosts 10 GB/s → 24 ÷ 10 =
    # 2.4 s; deserialising (2.5 s) runs beside the reads
    load = predict_load(PLAN_R, reading({1: 1e9, 2: 2e9}, {1: 5e9, 2: 10e9}))
    assert load.streams_per_node == pytest.approx(4 / 3)
    assert load.node_read_bandwidth_bytes_per_s == pytest.approx(4 / 3 * GB)
    assert load.deserialize_seconds == pytest.approx(DESERIALIZE)
    assert load.seconds == pytest.approx(9.0) and load.read_seconds == pytest.approx(9.0)
    assert load.read_curve == "read" and load.source == "model"
    assert load.aggregate_read_bandwidth_bytes_per_s == pytest.approx(10e9)


def test_load_single_reader_binds_when_one_stream_is_slow():
    # one stream 0.5 GB/s, two 4 GB/s: single 9 ÷ 0.5 = 18 s; node at 4/3 streams 0.5 + (1/3) × 3.5 = 1.6667 GB/s
    # → 12 ÷ 1.6667 = 7.2 s
    load = predict_load(PLAN_R, reading({1: 0.5e9, 2: 4e9}, {2: 100e9}))
    assert load.limited_by == "single reader"
    assert load.seconds == pytest.approx(18.0)


def test_load_aggregate_binds_on_a_slow_shared_system():
    # all nodes at once: 24 GB ÷ 1 GB/s (measured at 2 hosts) = 24 s, longer than the node's 9 s
    load = predict_load(PLAN_R, reading({1: 1e9, 2: 2e9}, {1: 0.6e9, 2: 1e9}))
    assert load.limited_by == "aggregate bandwidth"
    assert load.seconds == pytest.approx(24.0)
    assert load.deserialize_seconds == pytest.approx(DESERIALIZE)


def test_load_without_a_read_curve_uses_the_write_curve_and_says_so():
    profile = hand_profile({1: 1e9, 2: 2e9}, calibration=CAL, shared=False)
    load = predict_load(PLAN_R, profile)
    assert load.read_curve == "write"
    assert any("no read curve" in n for n in load.notes)
    # node-local: aggregate = per node × nodes, so the node term binds: 9 s as above
    assert load.seconds == pytest.approx(9.0)


def test_a_file_read_twice_costs_its_deserialisation_twice_and_its_read_once():
    """DeepSpeed's check loads the first model-states file a second time: the page cache serves the read, the CPU
    deserialises it again. Rank: shared.pt (8 GB) twice + own 1 GB: 17 GB of reads, 9 GB from storage; one reader
    per node (4 ranks, but 12 GB ÷ 9 GB = 4/3 streams as before)."""
    twice = PLAN.model_copy(
        update={
            "restore": manifest(
                rank_bytes=17 * GB,
                rank_bytes_by_format={"torch.save": 16 * GB, "safetensors": GB},
                node_requested_bytes=68 * GB,
            )
        }
    )
    # deserialise 16 ÷ 4 + 1 ÷ 2 = 4.5 s; on a fast target (10 GB/s at 1, 20 at 2 readers) the reads are single
    # 9 ÷ 10 = 0.9 s, node 12 ÷ 13.33 = 0.9 s: the deserialiser binds, its second pass counted
    load = predict_load(twice, reading({1: 10e9, 2: 20e9}, {1: 50e9, 2: 100e9}))
    assert load.deserialize_seconds == pytest.approx(4.5)
    assert load.limited_by == "deserialiser" and load.seconds == pytest.approx(4.5)
    assert load.read_seconds == pytest.approx(0.9)
    assert load.rank_bytes == 9 * GB


def test_a_collective_load_pays_the_saves_fixed_cost_first():
    """A DCP plan loads collectively (plan, gather, scatter), as it saves: the calibrated fixed cost, 0.25 s here,
    comes before the overlapped reads and deserialisation (9 s, as in the first test)."""
    dcp = hand_plan(FILES, coordinated=True).model_copy(update={"restore": manifest()})
    cal = CAL.model_copy(update={"dcp_fixed_seconds": 0.25, "dcp_ranks": 2})
    load = predict_load(dcp, reading({1: 1e9, 2: 2e9}, {1: 5e9, 2: 10e9}).model_copy(update={"calibration": cal}))
    assert load.coordination_seconds == 0.25
    assert load.seconds == pytest.approx(9.25)


def test_load_uses_default_deserialisers_without_a_calibration():
    profile = reading({1: 1e9, 2: 2e9}, {2: 100e9}).model_copy(update={"calibration": None})
    load = predict_load(PLAN_R, profile)
    d = 8 * GB / DEFAULT_DESERIALIZE_BYTES_PER_S["torch.save"] + GB / DEFAULT_DESERIALIZE_BYTES_PER_S["safetensors"]
    assert load.deserialize_seconds == pytest.approx(d)
    assert {f.source for f in load.deserializers.values()} == {"default"}


def test_a_matching_read_replay_replaces_the_model():
    replay = ReadReplay(
        seconds=3,
        bytes=GB,
        files=2,
        readers=4,
        scale=0.1,
        plan_fingerprint=PLAN_R.fingerprint,
        full_scale_seconds=30.0,
        nodes=2,
    )
    load = predict_load(PLAN_R, reading({1: 1e9, 2: 2e9}, {2: 10e9}).model_copy(update={"read_replay": replay}))
    assert load.source == "replay" and load.seconds == 30.0
    # a replay of one of the two nodes, shorter than all nodes at the aggregate (24 GB ÷ 1 GB/s = 24 s): aggregate binds
    partial = replay.model_copy(update={"nodes": 1, "full_scale_seconds": 5.0})
    load = predict_load(PLAN_R, reading({1: 1e9, 2: 2e9}, {2: 1e9}).model_copy(update={"read_replay": partial}))
    assert load.limited_by == "aggregate bandwidth" and load.seconds == pytest.approx(24.0)


def test_restart_cost_is_fixed_plus_load_or_the_given_whole():
    profile = reading({1: 1e9, 2: 2e9}, {1: 5e9, 2: 10e9})
    cost = restart_cost(PLAN_R, profile, Policy())
    assert cost.fixed_seconds == DEFAULT_RESTART_FIXED_S
    assert cost.seconds == pytest.approx(DEFAULT_RESTART_FIXED_S + 9.0)
    assert restart_cost(PLAN_R, profile, Policy(restart_fixed_s=60)).seconds == pytest.approx(69.0)
    given = restart_cost(PLAN_R, profile, Policy(restart_s=900))
    assert given.seconds == 900 and given.load is None and "given" in given.source
    no_manifest = restart_cost(PLAN, profile, Policy(restart_fixed_s=60))
    assert no_manifest.seconds == 60 and "no restore manifest" in no_manifest.source


def test_required_read_bandwidth_inverts_the_load():
    # in 10 s: aggregate 24 GB ÷ 10 s = 2.4 GB/s; node max(9, 12) GB ÷ 10 s = 1.2 GB/s (deserialising, 2.5 s, fits
    # beside the reads)
    agg, node = required_read_bandwidth(PLAN_R, 10.0, CAL)
    assert agg == pytest.approx(2.4e9) and node == pytest.approx(1.2e9)
    assert required_read_bandwidth(PLAN_R, 2.0, CAL) is None  # deserialising alone takes 2.5 s
    # forward check: a node-local storage at exactly 1.2 GB/s per node at any reader count loads in 10 s
    check = predict_load(PLAN_R, hand_profile({1: 1.2e9}, calibration=CAL).model_copy(update={"read_bandwidth": []}))
    assert check.seconds == pytest.approx(10.0)


def test_provision_max_restore_gives_the_read_bandwidth():
    row = provision_one(PLAN_R, Policy(mtbf_s=36000, restart_fixed_s=50), "sync", None, 2, DATA, None, 60.0)
    # the load gets 60 − 50 = 10 s; default deserialisers (no storage given, so no calibration)
    assert row.read_bandwidth_bytes_per_s == pytest.approx(2.4e9)
    assert row.node_read_bandwidth_bytes_per_s == pytest.approx(1.2e9)
    assert row.restart is not None and row.restart.seconds == 60.0
    with pytest.raises(InputError, match="no time for the load"):
        provision_one(PLAN_R, Policy(mtbf_s=36000, restart_fixed_s=50), "sync", None, 2, DATA, None, 40.0)


def test_collective_timeout_warning_threshold():
    assert collective_timeout_warning(300.0, 600, "a save") is None  # half of it: not past it
    assert "a save takes 301 s, 50% of the process group's timeout (600 s, torch.distributed's NCCL default; " in (
        collective_timeout_warning(301.0, 600, "a save") or ""
    )
    assert "takes 700 s, 58% of the process group's timeout (1200 s; warned past 50%" in (
        collective_timeout_warning(700.0, 1200, "a save") or ""
    )


def _cli(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_recommend_70b_on_nfs_counts_the_load_in_daly_waste():
    """70B, Adam, DeepSpeed ZeRO-1 on 64 GPUs (8 nodes of 8) against the built-in NFS class (no read curve: its
    write curve stands in; 0.9 GB/s at 1 writer, 1.6 at 2, 8 GB/s server limit). Restore manifest (checked in the
    sizing tests): each rank reads the 140 GB bf16 model states and its 840/64 = 13.125 GB optimizer shard; a node
    reads 140 + 8 × 13.125 = 245 GB from storage, of 8 × 153.125 = 1,225 GB requested."""
    rec = _cli("recommend", "--params", "70e9", "--optimizer", "adam", "--gpus", "64", "--storage", "nfs")
    load = rec["restart"]["load"]
    # each rank torch.loads mp_rank_00 (140,000,220,996 B) twice (DeepSpeed's check_ckpt_list, then its load) and
    # its 13,125,005,296 B shard; from storage each file once (+ `latest`, 16 B): 153.125 GB per rank; a node reads
    # the model states once and its 8 shards: 245 GB
    node_bytes, rank_storage = 140_000_220_996 + 8 * 13_125_005_296 + 16, 140_000_220_996 + 13_125_005_296 + 16
    rank_torch = 2 * 140_000_220_996 + 13_125_005_296
    streams = node_bytes / rank_storage  # 1.6
    node_bw = 0.9e9 + (streams - 1) * 0.7e9  # 1.32 GB/s on the write curve between 1 and 2 writers
    deserialize = rank_torch / DEFAULT_DESERIALIZE_BYTES_PER_S["torch.save"]
    t_node = node_bytes / node_bw
    t_agg = 8 * node_bytes / 8e9  # all 8 nodes at the server's 8 GB/s limit (1.32 × 8 = 10.6 GB/s is more)
    t_single = rank_storage / 0.9e9
    hand_load = max(deserialize, t_node, t_agg, t_single)
    assert load["streams_per_node"] == pytest.approx(streams, rel=1e-6)
    assert load["seconds"] == pytest.approx(hand_load, rel=1e-6)
    hand_r = DEFAULT_RESTART_FIXED_S + hand_load
    assert rec["restart_s"] == pytest.approx(hand_r, rel=1e-6)
    assert rec["restart_s"] > DEFAULT_RESTART_FIXED_S
    # Daly's expected wall time with this R (interval.py, Daly 2006): waste = 1 − τ ÷ T_w(τ) at the recommended τ
    tau, delta, m = rec["recommended_interval_s"], rec["stall_seconds"], rec["mtbf_s"]
    t_w = m * math.exp(hand_r / m) * math.expm1((tau + delta) / m) / tau
    assert rec["expected_waste_fraction"] == pytest.approx(1 - 1 / t_w, rel=1e-9)
    # R multiplies T_w by e^{R/M} and so does not move Daly's optimum (intervals.md): the interval is the same with
    # the fixed part alone, while the waste grows with the load
    fixed_only = _cli(
        "recommend", "--params", "70e9", "--optimizer", "adam", "--gpus", "64", "--storage", "nfs",
        "--restart", f"{DEFAULT_RESTART_FIXED_S:g}s",
    )  # fmt: skip
    assert fixed_only["optimal_interval_s"] == pytest.approx(rec["optimal_interval_s"])
    assert rec["optimal_interval_s"] == pytest.approx(interval.daly_interval(delta, m))
    assert rec["expected_waste_fraction"] > fixed_only["expected_waste_fraction"]
    # the sync save (δ = 302 s) is past half the 10-minute NCCL timeout: warned, once
    assert (
        len(rec["warnings"]) == 1
        and "blocking part takes 302 s, 50% of the process group's timeout (600 s, " in (rec["warnings"][0])
    )
