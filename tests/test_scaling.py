"""The aggregate of N nodes on a profile (planning/scaling.py), pinned to figures worked out by hand.

The Universal Scalability Law used throughout: λ = 1 GB/s, σ = 0.1, κ = 0.01, X(N) = λN ÷ (1 + σ(N−1) + κN(N−1)):
  X(1)  = 1e9 ÷ 1                          = 1.000000000 GB/s
  X(2)  = 2e9 ÷ (1 + 0.1 + 0.02)   = 2e9 ÷ 1.12   = 1.785714286 GB/s
  X(4)  = 4e9 ÷ (1 + 0.3 + 0.12)   = 4e9 ÷ 1.42   = 2.816901408 GB/s
  X(8)  = 8e9 ÷ (1 + 0.7 + 0.56)   = 8e9 ÷ 2.26   = 3.539823009 GB/s
  X(16) = 16e9 ÷ (1 + 1.5 + 2.4)   = 16e9 ÷ 4.9   = 3.265306122 GB/s   (past the peak at √((1 − σ)/κ) = 9.49 hosts)
  X(32) = 32e9 ÷ (1 + 3.1 + 9.92)  = 32e9 ÷ 14.02 = 2.282453638 GB/s

Deliberate breaks each test was seen to catch, made one at a time and reverted:
- beyond the measured hosts, the old per-host share × nodes instead of the flat hold: test_flat_hold_with_two_points,
  test_a_2_host_profile_never_gives_16_nodes_over_1_5x_its_best, test_cli_labels_the_extrapolated_aggregate;
- the single-host shared profile scaled by the nodes: test_flat_hold_with_one_point;
- σ and κ left negative (no refit with a coefficient pinned at 0): test_a_negative_coefficient_is_pinned_at_zero;
- the limit ignored beyond the range (the fit used instead): test_a_limit_replaces_the_fit;
- node-local targets treated as shared: test_node_local_scales_per_node;
- the replay used as the whole save whatever the nodes: test_replay_covers_only_the_nodes_it_wrote.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckplan.planning.savetime import predict_save
from ckplan.planning.scaling import UslFit, aggregate_estimate, fit_usl
from ckplan.profile import BandwidthPoint, Replay
from ckplan.units import fmt_duration
from tests.conftest import assert_one_line_error, run_cli, run_json
from tests.handmade import hand_plan, hand_profile

GB = 10**9
LAM, SIGMA, KAPPA = 1e9, 0.1, 0.01
X = {1: 1.0e9, 2: 2e9 / 1.12, 4: 4e9 / 1.42, 8: 8e9 / 2.26, 16: 16e9 / 4.9, 32: 32e9 / 14.02}


def shared(hosts_curve: dict[int, float] | None, per_node: float = 1e9, **kw):
    """A measured shared target with this curve over hosts (None: probed from one host only)."""
    return hand_profile({1: per_node}, shared=True, hosts_curve=hosts_curve, **kw).model_copy(
        update={"source": "measured"}
    )


def test_usl_against_hand_computed_figures():
    law = UslFit(lambda_bytes_per_s=LAM, sigma=SIGMA, kappa=KAPPA, hosts=[1, 2, 4])
    assert X[2] == pytest.approx(1.785714286e9) and X[16] == pytest.approx(3.265306122e9)
    for n, x in X.items():
        assert law.at(n) == pytest.approx(x, rel=1e-12)


@pytest.mark.parametrize("hosts", [(1, 2, 4), (2, 4, 8), (1, 2, 4, 8, 16, 32)])
def test_fit_recovers_the_law_from_exact_points(hosts):
    """Three exact points fix the three parameters; no point at one host is needed (the (2, 4, 8) case)."""
    fit = fit_usl([(n, X[n]) for n in hosts])
    assert (fit.lambda_bytes_per_s, fit.sigma, fit.kappa) == pytest.approx((LAM, SIGMA, KAPPA), rel=1e-9)
    assert fit.hosts == list(hosts)


def test_fit_from_noisy_points_within_the_stated_tolerance():
    """±2% alternating noise on 1 … 32 hosts. Tolerance: λ within 5%, σ within ±0.03 absolute (σ, the smallest
    term at few hosts, moves most: the fit gives 0.082), κ within 10%, and X(64) within 10% of the law's
    64e9 ÷ (1 + 6.3 + 40.32) = 1.343973 GB/s. This fit gives λ 0.978 GB/s, κ 0.01051, X(64) 1.289 GB/s (−4.1%)."""
    noisy = [(n, X[n] * (1.02 if i % 2 == 0 else 0.98)) for i, n in enumerate(sorted(X))]
    fit = fit_usl(noisy)
    assert fit.lambda_bytes_per_s == pytest.approx(LAM, rel=0.05)
    assert fit.sigma == pytest.approx(SIGMA, abs=0.03)
    assert fit.kappa == pytest.approx(KAPPA, rel=0.10)
    assert fit.at(64) == pytest.approx(64e9 / 47.32, rel=0.10)


def test_a_negative_coefficient_is_pinned_at_zero():
    """Points on N ÷ X = 1 + 0.5(N−1) − 0.01N(N−1) (in GB/s): X(1) = 1, X(2) = 2 ÷ 1.48, X(4) = 4 ÷ 2.38. The free fit
    gives κ = −0.01, so it is refitted with κ = 0: least squares of y = N ÷ X on x = N − 1 over x = 0, 1, 3 and
    y = 1, 1.48, 2.38: x̄ = 4/3, ȳ = 1.62, Sxx = 42/9, Sxy = 2.14, b = 2.14 ÷ 4.6667 = 0.458571,
    a = 1.62 − b × 4/3 = 1.008571; λ = 1 GB/s ÷ a = 0.991501 GB/s, σ = b ÷ a = 0.454674."""
    fit = fit_usl([(1, 1e9), (2, 2e9 / 1.48), (4, 4e9 / 2.38)])
    assert fit.kappa == 0.0
    assert fit.sigma == pytest.approx(0.458571 / 1.008571, rel=1e-5)
    assert fit.lambda_bytes_per_s == pytest.approx(1e9 / 1.008571, rel=1e-5)
    # superlinear points (N ÷ X falls): σ = κ = 0, λ = 1 ÷ mean(N ÷ X) = 1 ÷ (1 + 0.8 + 0.6667)/3 GB/s = 1.216216 GB/s,
    # and never more than λN
    up = fit_usl([(1, 1e9), (2, 2.5e9), (4, 6e9)])
    assert (up.sigma, up.kappa) == (0.0, 0.0)
    assert up.lambda_bytes_per_s == pytest.approx(3e9 / (1 + 0.8 + 4 / 6))
    assert up.at(16) == pytest.approx(16 * up.lambda_bytes_per_s)


def test_within_the_measured_hosts_the_curve_is_interpolated():
    profile = shared({1: X[1], 2: X[2], 4: X[4]})
    at_four = aggregate_estimate(profile, 1e9, 4)
    assert (at_four.bytes_per_s, at_four.model, at_four.extrapolated, at_four.label) == (
        X[4],
        "measured",
        False,
        "measured at 4 hosts",
    )
    # 3 hosts: halfway between X(2) and X(4) = (1.785714 + 2.816901)/2 = 2.301308 GB/s
    three = aggregate_estimate(profile, 1e9, 3)
    assert three.bytes_per_s == pytest.approx((X[2] + X[4]) / 2)
    assert (three.model, three.extrapolated) == ("interpolated", False)


def test_beyond_three_measured_host_counts_the_law_is_fitted():
    """Exact points at 2, 4, 8 hosts: the last step gains (3.539823 − 2.816901) ÷ 4 = 0.180730 GB/s per host, below
    half the 0.704225 GB/s each host gave at 4, so the curve has stopped growing. A 16-node plan gets
    X(16) = 3.265306 GB/s, where the per-host share at 8 hosts times 16 would have given 7.08 GB/s."""
    est = aggregate_estimate(shared({2: X[2], 4: X[4], 8: X[8]}), 1e9, 16)
    assert est.bytes_per_s == pytest.approx(3.265306122e9)
    assert (est.model, est.extrapolated, est.measured_hosts_max, est.nodes) == ("usl", True, 8, 16)
    assert est.usl is not None and est.usl.sigma == pytest.approx(SIGMA)
    assert est.unsaturated_bytes_per_s is None
    assert (
        est.label
        == "extrapolated (Universal Scalability Law fitted to 2, 4 and 8 hosts; 16 nodes, measured up to 8 hosts)"
    )


def test_a_curve_still_growing_gives_a_range_not_a_fit():
    """Exact points at 1, 2, 4 hosts: the last step gains (2.816901 − 1.785714) ÷ 2 = 0.515594 GB/s per host, more
    than half the 0.892857 GB/s each gave at 2: no knee seen, so no law is fitted. 16 nodes: the best measured,
    X(4) = 2.816901 GB/s held flat, to 1 GB/s per node × 16 = 16 GB/s."""
    est = aggregate_estimate(shared({1: X[1], 2: X[2], 4: X[4]}), 1e9, 16)
    assert (est.bytes_per_s, est.model, est.usl, est.unsaturated_bytes_per_s) == (X[4], "flat", None, 16e9)
    assert est.label.endswith(
        "the probe did not reach saturation: probe with more hosts, or give --aggregate-limit: 2.82 GB/s to 16.00 GB/s"
    )
    # the save time is the range between them: 16 one-GB torch.save files, one per node, on a profile of 100 files/s.
    # Long end: 16 GB ÷ 2.816901 GB/s = 5.680 s; short end: the aggregate's 16 GB ÷ 16 GB/s = 1 s is below the
    # busiest writer's 1 GB ÷ 1.16 GB/s (the default serialiser) + 1 GB ÷ 1 GB/s = 1.862 s; each + 0.01 s of files
    plan = hand_plan([(f"n{i}.bin", GB, i, i) for i in range(16)])
    t = predict_save(plan, shared({1: X[1], 2: X[2], 4: X[4]}))
    assert t.seconds == pytest.approx(16 / 2.816901408 + 0.01, rel=1e-6)
    assert t.shortest_seconds == pytest.approx(1 / 1.16 + 1 + 0.01, rel=1e-6)
    assert t.span() == "1.9 s to 5.7 s"


def test_flat_hold_with_one_point():
    """A shared target probed from one host: its per-node figure (0.96 GB/s at 2 writers) at 1 host, held flat. One
    host count shows no curve, so it is the long end of a range whose short end is 0.96 GB/s × 16 = 15.36 GB/s."""
    est = aggregate_estimate(shared(None, per_node=0.96e9), 0.96e9, 16)
    assert (est.bytes_per_s, est.model, est.extrapolated, est.measured_hosts_max) == (0.96e9, "flat", True, 1)
    assert est.unsaturated_bytes_per_s == pytest.approx(15.36e9)
    assert "16 nodes, measured up to 1 host" in est.label and "did not reach saturation" in est.label
    # one measured host count on the curve: the same
    two = aggregate_estimate(shared({2: 1.5e9}), 1e9, 16)
    assert (two.bytes_per_s, two.unsaturated_bytes_per_s) == (1.5e9, 16e9)


def test_flat_hold_with_two_points():
    """A disk measured here: 0.96 GB/s at 1 host, 0.70 GB/s at 2 (already saturated at one host). 16 nodes: 0.96 GB/s,
    the best measured, where the per-host share at 2 hosts times 16 gave 5.6 GB/s."""
    est = aggregate_estimate(shared({1: 0.96e9, 2: 0.70e9}, per_node=0.96e9), 0.96e9, 16)
    assert (est.bytes_per_s, est.model, est.extrapolated, est.unsaturated_bytes_per_s) == (0.96e9, "flat", True, None)
    assert est.label == (
        "extrapolated (the best measured aggregate, 960.0 MB/s at 1 host, held flat; 16 nodes, measured up to 2 hosts)"
    )


def test_a_limit_replaces_the_fit():
    """Beyond the measured hosts, a known limit gives min(per node × nodes, limit), whatever the fit would say."""
    points = {1: X[1], 2: X[2], 4: X[4]}
    profile_limit = aggregate_estimate(shared(points, limit=10e9), 1e9, 16)
    # 1 GB/s per node × 16 = 16 GB/s, at most 10 GB/s
    assert (profile_limit.bytes_per_s, profile_limit.model, profile_limit.usl) == (10e9, "profile limit", None)
    assert "the profile's limit" in profile_limit.label and profile_limit.extrapolated
    given = aggregate_estimate(shared(points, limit=10e9), 1e9, 16, limit=40e9)
    assert (given.bytes_per_s, given.model) == (16e9, "given limit")  # the given limit replaces the profile's
    assert "the given system limit" in given.label
    assert aggregate_estimate(shared(points), 1e9, 16, limit=2e9).bytes_per_s == 2e9
    # within the measured hosts the measurement stands
    assert aggregate_estimate(shared(points), 1e9, 4, limit=2e9).bytes_per_s == X[4]


def test_node_local_scales_per_node():
    """Each node writes its own device: 2 GB/s × 16 nodes, no limit, not extrapolated."""
    local = hand_profile({1: 2e9}, shared=False, limit=5e9)
    est = aggregate_estimate(local, 2e9, 16, limit=1e9)
    assert (est.bytes_per_s, est.model, est.extrapolated) == (32e9, "node-local", False)
    assert est.label.startswith("node-local: 2.00 GB/s per node × 16 nodes")
    assert "extrapolated" not in est.label and "does not apply" in est.label


@settings(max_examples=200, deadline=None)
@given(
    one=st.floats(1e6, 1e12),
    two=st.floats(1e6, 1e12),
    per_node=st.floats(1e6, 1e12),
    with_one_host=st.booleans(),
)
def test_a_2_host_profile_never_gives_16_nodes_over_1_5x_its_best(one, two, per_node, with_one_host):
    """The aggregate a 16-node plan's save uses, from a profile measured up to 2 hosts, is at most 1.5× the best
    measured aggregate when no limit is given (here it is the best measured, held flat)."""
    curve = {1: one, 2: two} if with_one_host else {2: two}
    plan = hand_plan([(f"n{i}.bin", GB, i, i) for i in range(16)])
    t = predict_save(plan, shared(curve, per_node=per_node))
    assert t.aggregate_bandwidth_bytes_per_s <= 1.5 * max(curve.values())
    assert t.aggregate.extrapolated and "16 nodes, measured up to 2 hosts" in t.aggregate.label


def _replay(plan, nodes: int, full_scale_seconds: float) -> Replay:
    return Replay(
        method="raw bytes",
        seconds=0.1,
        bytes=GB // 100,
        files=nodes,
        writers=1,
        nodes=nodes,
        scale=0.01,
        plan_fingerprint=plan.fingerprint,
        full_scale_seconds=full_scale_seconds,
    )


def test_replay_covers_only_the_nodes_it_wrote():
    """Four nodes of 1 GB each on a shared target measured at 1.0 and 1.5 GB/s on 1 and 2 hosts (held flat beyond).
    All nodes' bytes at the aggregate: 4 GB ÷ 1.5 GB/s = 2.6667 s, + 1 file ÷ 100 files/s per node = 0.01 s
    (no fsync tail, no coordination) = 2.6767 s."""
    plan = hand_plan([(f"n{i}.bin", GB, i, i) for i in range(4)])
    profile = shared({1: 1e9, 2: 1.5e9})
    t_all = 4 / 1.5 + 0.01
    # a 2-node replay of 1.0 s: the other two nodes' bytes reach the same system, so the aggregate binds
    t = predict_save(plan, profile.model_copy(update={"replay": _replay(plan, 2, 1.0)}))
    assert t.seconds == pytest.approx(t_all)
    assert (t.limited_by, t.source, t.replay_seconds, t.replay_nodes) == ("aggregate bandwidth", "model", 1.0, 2)
    assert "the replay wrote 2 of the plan's 4 nodes" in t.notes[-1] and t.notes[-1].endswith("the aggregate binds")
    # a 2-node replay of 5.0 s: longer than all nodes at the aggregate, so the replay binds
    t = predict_save(plan, profile.model_copy(update={"replay": _replay(plan, 2, 5.0)}))
    assert (t.seconds, t.limited_by, t.source) == (5.0, "replay", "replay")
    assert t.notes[-1].endswith("the replay binds")
    # a replay of all 4 nodes is the whole save, even when shorter than the model: 3.0 s is 1.33 GB/s, within
    # 1.2 × the aggregate's 1.5 GB/s; 1.0 s (4 GB/s) is faster than the aggregate allows, and the model stands
    t = predict_save(plan, profile.model_copy(update={"replay": _replay(plan, 4, 3.0)}))
    assert (t.seconds, t.limited_by, t.replay_nodes, t.notes) == (3.0, "replay", 4, [])
    t = predict_save(plan, profile.model_copy(update={"replay": _replay(plan, 4, 1.0)}))
    assert (t.seconds, t.source) == (pytest.approx(t_all), "model") and "would move 4000 MB/s" in t.notes[-1]
    # a replay without the field (older profiles, single-host replays) wrote one node
    old = _replay(plan, 1, 1.0).model_dump()
    del old["nodes"]
    assert Replay.model_validate(old).nodes == 1


def _files(tmp_path):
    """A plan of 16 nodes (1e9 parameters, ZeRO-3, 2 GPUs per node) and a profile measured up to 2 hosts."""
    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli(
            "size",
            *("--params", "1e9", "--optimizer", "adam", "--framework", "deepspeed", "--zero", "3"),
            *("--gpus", "32", "--gpus-per-node", "2", "--json"),
            check=True,
        ).stdout
    )
    profile = hand_profile(
        {1: 0.96e9, 2: 0.96e9}, name="shared-disk", shared=True, hosts_curve={1: 0.96e9, 2: 0.70e9}, files_per_s=1e6
    ).model_copy(update={"source": "measured", "target_kind": "hosts", "hosts": 2})
    path = tmp_path / "shared-disk.json"
    path.write_text(profile.model_dump_json())
    return plan, path


WHERE = "16 nodes, measured up to 2 hosts"


def cell(table: str, figure: str, column: int) -> str:
    """The text of one table cell, whose row starts with `figure`, joined across the lines rich folded it onto."""
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")]
    start = next(i for i, r in enumerate(rows) if r[0].startswith(figure))
    parts = [rows[start][column]]
    for r in rows[start + 1 :]:
        if r[0]:
            break
        parts.append(r[column])
    return " ".join(p for p in parts if p)


def flat(text: str) -> str:
    """Console text with its line wrapping undone."""
    return " ".join(text.split())


def test_cli_labels_the_extrapolated_aggregate(tmp_path):
    plan, profile = _files(tmp_path)
    total = json.loads(plan.read_text())["total_bytes"]
    rec = run_json("recommend", "--plan", str(plan), "--storage", str(profile))
    m = rec["save_model"]
    # all bytes at the best measured aggregate, 0.96 GB/s, held flat; + the busiest node's files at 1e6 files/s
    assert m["aggregate_bandwidth_bytes_per_s"] == 0.96e9
    assert m["bandwidth_seconds"] == pytest.approx(total / 0.96e9)
    assert m["limited_by"] == "aggregate bandwidth"
    a = m["aggregate"]
    assert (a["model"], a["extrapolated"], a["nodes"], a["measured_hosts_max"]) == ("flat", True, 16, 2)
    assert a["label"].startswith("extrapolated (") and WHERE in a["label"]
    assert any("extrapolated" in line and WHERE in line for line in rec["assumptions"])
    assert WHERE in rec["summary"]
    table = run_cli("recommend", "--plan", str(plan), "--storage", str(profile), check=True).stdout
    why = cell(table, "save (persist) time", 2)
    assert "(agg 960.0 MB/s, extrapolated (the best measured aggregate" in why and WHERE in why
    # a limit given for the system replaces the flat hold: 0.96 GB/s per node × 16 = 15.36 GB/s, at most 4 GB/s
    limited = run_json("recommend", "--plan", str(plan), "--storage", str(profile), "--aggregate-limit", "4GB/s")
    a = limited["save_model"]["aggregate"]
    assert (a["bytes_per_s"], a["model"], a["limit_bytes_per_s"]) == (4e9, "given limit", 4e9)
    assert "the given system limit, 4.00 GB/s" in a["label"] and WHERE in a["label"]


def test_report_and_provision_label_the_extrapolated_aggregate(tmp_path):
    plan, profile = _files(tmp_path)
    out = tmp_path / "review"
    run_cli("report", "--plan", str(plan), "--storage", str(profile), "--out", str(out), check=True)
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        assert "aggregate bandwidth, 16 nodes" in text and "extrapolated (the best measured aggregate" in text
        assert WHERE in text
    args = ("provision", "--params", "1e9", "--tp", "1", "--gpus", "32", "--gpus-per-node", "2")
    sweep = run_json(*args, "--storage", str(profile))
    row = sweep["rows"][0]
    assert row["storage_aggregate"]["model"] == "flat" and WHERE in row["storage_aggregate"]["label"]
    assert row["headroom"] * row["burst_bandwidth_bytes_per_s"] == pytest.approx(0.96e9)
    assert any(WHERE in line for line in sweep["assumptions"])
    table = run_cli(*args, "--storage", str(profile), check=True).stdout
    assert cell(table, "32", 12).endswith("× extrapolated")  # the headroom column
    assert (
        f"gives 960.0 MB/s to 16 nodes (extrapolated (the best measured aggregate, 960.0 MB/s at 1 host, held flat; {WHERE}))"
        in flat(table)
    )


def test_a_probe_below_the_knee_gives_the_save_time_as_a_range(tmp_path):
    """A shared target whose aggregate doubled from 1 to 2 hosts (0.5 → 1.0 GB/s, 0.5 GB/s per host at 2 writers):
    no knee seen. The 16-node plan's save then runs from the short end, 0.5 GB/s × 16 = 8 GB/s, where the busiest
    node's 2 writers share its 0.5 GB/s, to the long end, all bytes at 1.0 GB/s held flat; every output says so."""
    plan, _ = _files(tmp_path)
    doc = json.loads(plan.read_text())
    total, node = doc["total_bytes"], max(n["bytes"] for n in doc["nodes"])
    profile = tmp_path / "below-knee.json"
    profile.write_text(
        hand_profile(
            {1: 0.5e9, 2: 0.5e9}, name="below-knee", shared=True, hosts_curve={1: 0.5e9, 2: 1.0e9}, files_per_s=1e6
        )
        .model_copy(update={"source": "measured", "target_kind": "hosts", "hosts": 2})
        .model_dump_json()
    )
    rec = run_json("recommend", "--plan", str(plan), "--storage", str(profile))
    m = rec["save_model"]
    assert (m["aggregate"]["bytes_per_s"], m["aggregate"]["unsaturated_bytes_per_s"]) == (1.0e9, 8e9)
    rest = m["metadata_seconds"] + m["fsync_tail_seconds"]
    assert m["seconds"] == pytest.approx(total / 1.0e9 + rest)
    # short end: the node binds once the aggregate is 8 GB/s, its heaviest writer's half serialised first (default
    # 1.16 GB/s, no page-cache figure in this profile), then the node's bytes at its 0.5 GB/s (the writers' shares
    # differ by a few kB: rel 1e-4)
    assert m["shortest_seconds"] == pytest.approx(node / 2 / 1.16e9 + node / 0.5e9 + rest, rel=1e-4)
    assert rec["save_seconds"] == m["seconds"]  # the intervals use the long end
    label = "the probe did not reach saturation: probe with more hosts, or give --aggregate-limit"
    assert label in m["aggregate"]["label"] and any(label in w for w in rec["warnings"])
    table = flat(run_cli("recommend", "--plan", str(plan), "--storage", str(profile), check=True).stdout)
    assert f"{fmt_duration(m['shortest_seconds'])} to {fmt_duration(m['seconds'])}" in table and label in table
    out = tmp_path / "review"
    run_cli("report", "--plan", str(plan), "--storage", str(profile), "--out", str(out), check=True)
    assert label in (out / "report.md").read_text()
    args = ("provision", "--params", "1e9", "--tp", "1", "--gpus", "32", "--gpus-per-node", "2", "--storage")
    row = run_json(*args, str(profile))["rows"][0]
    assert row["headroom_unsaturated"] == pytest.approx(8 * row["headroom"])
    assert f"{row['headroom']:.2f}×…{row['headroom_unsaturated']:.2f}×" in flat(
        run_cli(*args, str(profile), check=True).stdout
    )
    # a known system limit is the answer the probe could not give: one figure again
    limited = run_json("recommend", "--plan", str(plan), "--storage", str(profile), "--aggregate-limit", "2GB/s")
    assert limited["save_model"]["shortest_seconds"] is None and not any(label in w for w in limited["warnings"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("recommend", "--aggregate-limit", "0"), "--aggregate-limit must be > 0"),
        (("recommend", "--aggregate-limit", "2PB/s", "--storage", "lustre"), "--aggregate-limit is too large"),
        (("recommend", "--aggregate-limit", "fast", "--storage", "lustre"), "not a valid --aggregate-limit"),
        (("recommend", "--aggregate-limit", "40GB/s"), "--aggregate-limit is the limit of one storage system"),
        (("provision", "--aggregate-limit", "40GB/s"), "give it with --storage"),
    ],
)
def test_aggregate_limit_bad_input(args, fragment):
    assert_one_line_error(run_cli(*args), fragment)


def test_a_curve_flat_at_its_top_is_held_flat_not_bent_down():
    """The testbed's knee-at-4 probe from 8 hosts: 12.0, 23.2, 47.9 and 48.2 MB/s at 1, 2, 4 and 8 hosts. The last
    step gains (48.2 − 47.9) ÷ 4 = 0.075 MB/s per host, far below half of 47.9 ÷ 4: saturated. Its last two points
    lie within PLATEAU (10%) of each other, so 16 nodes get 48.2 MB/s, the level measured, where the fitted law's
    coherency term bent the curve down to about 36 MB/s, and the real 16-node save ran at 46 MB/s."""
    curve = {1: 12.0e6, 2: 23.2e6, 4: 47.9e6, 8: 48.2e6}
    est = aggregate_estimate(shared(curve, per_node=12.0e6), 12.0e6, 16)
    assert (est.bytes_per_s, est.model, est.usl, est.unsaturated_bytes_per_s) == (48.2e6, "flat", None, None)
    assert fit_usl(list(curve.items())).at(16) < 40e6  # what the fit alone would have said
    # a measured fall, 48.2 → 40 MB/s (17%), is a turn the law may follow past the last point
    falling = aggregate_estimate(shared({**curve, 8: 40e6}, per_node=12.0e6), 12.0e6, 16)
    assert falling.model == "usl" and falling.bytes_per_s < 40e6


def test_a_multi_host_profiles_per_node_term_is_the_node_alone():
    """A multi-host probe's per-host curve is each host's share with all 8 probed hosts writing at once (3.33 and 4.27
    MB/s at 1 and 2 writers on the testbed's server-bound regime), while its host-scaling run at one host measured the
    node alone (48.1 MB/s at 2 writers): the factor is 48.1 ÷ 4.27 = 11.26, and one writer alone gets 3.33 × 11.26 =
    37.5 MB/s. A 4-node plan of one 180 MB file per node: per node 180 MB ÷ 37.5 MB/s = 4.8 s, so the aggregate
    binds, 720 MB ÷ 48.1 MB/s = 14.97 s, + 1 file ÷ 100 files/s; the share alone gave 180 MB ÷ 3.33 MB/s = 54 s,
    where the real save took 15.2 s."""
    profile = hand_profile(
        {1: 3.33e6, 2: 4.27e6}, shared=True, hosts_curve={1: 48.1e6, 2: 48.1e6, 4: 48.1e6, 8: 48.8e6}
    )
    profile = profile.model_copy(
        update={"aggregate_bandwidth": [p.model_copy(update={"writers": 2}) for p in profile.aggregate_bandwidth]}
    )
    assert profile.alone_factor() == pytest.approx(48.1 / 4.27)
    assert profile.bandwidth_at(2) == pytest.approx(48.1e6)
    assert profile.bandwidth_at(1) == pytest.approx(3.33e6 * 48.1 / 4.27)
    plan = hand_plan([(f"n{i}.bin", 180 * 10**6, i, i) for i in range(4)])
    t = predict_save(plan, profile, framework_costs=False)
    assert t.limited_by == "aggregate bandwidth"
    assert t.seconds == pytest.approx(720e6 / 48.1e6 + 1 / 100, rel=1e-6)
    # reads the same, from the read curves: 6 MB/s per host at 2 readers with all hosts reading, 24 MB/s alone
    reading = profile.model_copy(
        update={
            "read_bandwidth": [BandwidthPoint(writers=2, bytes_per_s=6e6)],
            "aggregate_read_bandwidth": [BandwidthPoint(writers=2, hosts=1, bytes_per_s=24e6)],
        }
    )
    assert reading.alone_factor(reads=True) == pytest.approx(4.0)
    # one host: its curve is the node alone already
    assert hand_profile({2: 4.27e6}, shared=True).alone_factor() == 1.0
