"""provision is recommend's model solved for the storage: inverse and monotonicity checks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckplan import catalog
from ckplan.planning.policy import Policy
from ckplan.planning.provision import provision_one, provisioned_profile
from ckplan.planning.recommend import recommend
from ckplan.sizing.plan import build_plan
from tests.conftest import assert_one_line_error, run_cli, run_json

DATA = catalog.planning_data()

ARCH = catalog.model("llama-3.1-70b")


def plan(gpus, framework="megatron"):
    return build_plan(arch=ARCH, model_name="llama-3.1-70b", gpus=gpus, tp=8, zero=1, framework=framework)


@pytest.mark.parametrize("mode,goodput", [("sync", None), ("sync", 0.85), ("async", None), ("async", 0.9)])
def test_recommend_meets_the_target_with_the_provisioned_storage(mode, goodput):
    policy = Policy(mode="async" if mode == "async" else "sync")
    p = plan(1024)
    row = provision_one(p, policy, mode, goodput, keep=2, data=DATA)
    assert row.feasible
    # give recommend exactly the provisioned figures: it must meet the targets, within rounding
    storage = provisioned_profile(
        row.node_bandwidth_bytes_per_s * 1.001,
        row.burst_bandwidth_bytes_per_s * 1.001,
        row.files_per_s * 1.001,
        row.files_per_s * 1.001,
    )
    rec = recommend(p, storage, policy)
    assert rec.verdict != "infeasible"
    assert rec.save_seconds == pytest.approx(row.save_seconds, rel=0.01)
    assert rec.stall_seconds / rec.recommended_interval_s <= policy.max_overhead * 1.001
    if goodput is not None:
        assert rec.ettr >= goodput - 1e-3
    # and 20% less bandwidth misses a target
    short = provisioned_profile(
        row.node_bandwidth_bytes_per_s * 0.8, row.burst_bandwidth_bytes_per_s * 0.8, row.files_per_s, row.files_per_s
    )
    worse = recommend(p, short, policy)
    missed = (
        worse.verdict == "infeasible"
        or (goodput is not None and worse.ettr < goodput)
        or worse.stall_seconds / policy.max_overhead > min(worse.optimal_interval_s, worse.longest_interval_s)
    )
    assert missed


@settings(max_examples=25, deadline=None)
@given(
    small=st.sampled_from([64, 128, 256, 512]),
    factor=st.sampled_from([2, 4, 8]),
    rate=st.floats(1.0, 20.0),
    mode=st.sampled_from(["sync", "async"]),
)
def test_more_gpus_never_need_less_bandwidth(small, factor, rate, mode):
    """Holds for the storage's part only: with a serialiser, fewer GPUs give each rank more bytes to serialise, which
    leaves less of the persist time for writing (a real effect), so the serialisers are made as fast as a Policy
    takes (1 PB/s), free next to any storage."""
    from ckplan.units import MAX_RATE_BYTES_PER_S

    free = {fmt: float(MAX_RATE_BYTES_PER_S) for fmt in ("torch.save", "dcp", "safetensors")}
    policy = Policy(
        node_failures_per_1000_days=rate, mode="async" if mode == "async" else "sync", serialize_bytes_per_s=free
    )
    a = provision_one(plan(small), policy, mode, None, 2, DATA)
    b = provision_one(plan(small * factor), policy, mode, None, 2, DATA)
    if a.feasible and b.feasible:
        assert b.burst_bandwidth_bytes_per_s >= a.burst_bandwidth_bytes_per_s * (1 - 1e-6)
    assert a.feasible or not b.feasible


@settings(max_examples=25, deadline=None)
@given(overhead=st.floats(0.01, 0.1), laxer=st.floats(1.0, 3.0), goodput=st.floats(0.5, 0.9))
def test_laxer_target_never_needs_more(overhead, laxer, goodput):
    p = plan(4096)
    strict = provision_one(p, Policy(max_overhead=overhead), "sync", goodput, 2, DATA)
    lax = provision_one(p, Policy(max_overhead=min(overhead * laxer, 0.5)), "sync", goodput * 0.95, 2, DATA)
    if strict.feasible:
        assert lax.feasible and lax.burst_bandwidth_bytes_per_s <= strict.burst_bandwidth_bytes_per_s * (1 + 1e-6)


def test_restart_cost_makes_a_goodput_target_impossible():
    row = provision_one(plan(65536), Policy(restart_s=3600), "sync", 0.99, 2, DATA)
    assert not row.feasible and "restart cost" in row.dominant_term


def test_capacity_and_staging():
    p = plan(1024)
    row = provision_one(p, Policy(mode="async"), "async", None, keep=3, data=DATA)
    assert row.capacity_bytes == 4 * p.total_bytes
    assert row.staging_bytes_per_node == max(n.bytes for n in p.nodes)


def test_cli_sweep_json_chart_and_headroom(tmp_path):
    chart = tmp_path / "sweep.png"
    data = run_json(
        "provision",
        "--model",
        "llama-3.1-405b",
        "--gpus",
        "1024,16384",
        "--tp",
        "8",
        "--pp",
        "16",
        "--storage",
        "lustre",
        "--chart",
        str(chart),
    )
    assert [r["gpus"] for r in data["rows"]] == [1024, 16384]
    assert data["rows"][1]["burst_bandwidth_bytes_per_s"] > data["rows"][0]["burst_bandwidth_bytes_per_s"]
    assert all(r["headroom"] > 0 for r in data["rows"])
    assert chart.read_bytes()[:4] == b"\x89PNG"
    out = run_cli("provision", "--params", "1T", "--gpus", "2048", "--mode", "staged", check=True).stdout
    assert "Provisioning by cluster size" in out


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--gpus", "10,abc"], "whole numbers"),
        (["--mode", "fast"], "sync"),
        (["--keep", "0"], "--keep"),
        (["--target-goodput", "120%"], "between"),
    ],
)
def test_provision_bad_input(args, fragment):
    assert_one_line_error(run_cli("provision", *args), fragment)


def test_headroom_uses_the_measured_curve_over_hosts():
    """A worked example: measured 5 GB/s on 1 host and 100 GB/s on 256; a 70B plan on 128 nodes.

    The storage gives 5 + (128 − 1)/(256 − 1) × 95 = 52.31 GB/s to 128 nodes at once (the save-time model's
    aggregate), not 5 GB/s × 128 = 640 GB/s.

    Deliberate break this catches: the headroom without × nodes (aggregate over 1 node: 5 GB/s).
    """
    from ckplan.profile_store import resolve

    hosts = resolve("tests/golden/profile-lustre-hosts.json")
    p = build_plan(
        arch=catalog.model("llama-3.1-70b"),
        model_name="llama-3.1-70b",
        optimizer="adam",
        precision="bf16-mixed",
        framework="megatron",
        gpus=1024,
        gpus_per_node=8,
        tp=8,
        pp=4,
        zero=1,
    )
    assert p.nodes_writing == 128
    row = provision_one(p, Policy(), "sync", None, 2, DATA, hosts)
    have = 5e9 + 127 / 255 * 95e9
    assert row.headroom * row.burst_bandwidth_bytes_per_s == pytest.approx(have, rel=1e-9)
    assert have == pytest.approx(52.31e9, rel=1e-3)


def test_async_provision_without_a_goodput_target_is_refused():
    """Async sized only to the loss window reported ETTR 64.9% against sync's 83.8% at 16k GPUs."""
    proc = run_cli("provision", "--model", "llama-3.1-70b", "--gpus", "16384", "--mode", "async")
    assert_one_line_error(proc, "async provision needs --target-goodput")


def test_sustained_bandwidth_is_one_checkpoint_per_interval():
    """Sustained bandwidth = one checkpoint per interval, in two cases worked out by hand.

    Deliberate break this catches: the sustained bandwidth changed (total ÷ persist: 20× too much in the sync
    case; ×2)."""
    p = plan(1024)
    assert p.total_bytes == 988_492_259_156
    # sync, MTBF 1 day (Daly's optimum for a few minutes' save is over an hour): the 1 h loss window binds. The budget
    # needs τ ≥ S/0.05 and the window τ ≤ 3,600 − S; the largest S meets both at S = 3,600 × 0.05/1.05 = 171.43 s,
    # τ = 3,600 − 171.43 = 3,428.57 s (20 S)
    row = provision_one(p, Policy(mtbf_s=86400), "sync", None, keep=2, data=DATA)
    assert (row.save_seconds, row.interval_s) == (pytest.approx(171.428571), pytest.approx(3428.571429))
    # 988,492,259,156 bytes every 3,428.57 s = 288.31 MB/s
    assert row.sustained_bandwidth_bytes_per_s == pytest.approx(988_492_259_156 / 3428.571429)
    assert row.sustained_bandwidth_bytes_per_s == pytest.approx(288.31e6, rel=1e-4)
    # async: the snapshot (1.7 GB per GPU ÷ 20 GB/s = 0.085 s) fits any budget, so the largest persist meets
    # one-in-flight and the loss window at S = L − S → S = L/2 = 1,800 s, and τ is pinned there: 549.16 MB/s
    row = provision_one(p, Policy(mode="async"), "async", None, keep=2, data=DATA)
    # the fullest rank, rank 0: its 964,601,456-byte shard, the 740,352,000-byte .metadata and 16,212 bytes of small
    # files = 1,704,969,668 bytes ÷ 20 GB/s = 0.0852485 s
    assert row.stall_seconds == pytest.approx(0.0852485, abs=1e-7)
    assert (row.save_seconds, row.interval_s) == (pytest.approx(1800), pytest.approx(1800))
    assert row.sustained_bandwidth_bytes_per_s == pytest.approx(549.16e6, rel=1e-5)


def test_headroom_without_a_curve_over_hosts_is_held_flat_or_per_node_times_nodes_capped():
    """No curve over hosts: a shared target measured from one host is one point, its per-host figure at 8 writers
    (2 GB/s) at 1 host, held flat for the plan's 128 nodes; where the shared system's limit is known, the per-node
    figure times the nodes, capped by it; a node-local target, per node × nodes.

    Deliberate breaks this catches: the headroom without × nodes (aggregate over 1 node instead of
    plan.nodes_writing: the capped and node-local cases), and the single-host shared profile scaled by the nodes
    (256 GB/s, the optimism this rule removes)."""
    from tests.handmade import hand_profile

    p = plan(1024)
    assert (p.nodes_writing, p.max_writers_per_node) == (128, 8)
    free = provision_one(p, Policy(), "sync", None, 2, DATA, hand_profile({8: 2e9}, shared=True))
    assert free.headroom * free.burst_bandwidth_bytes_per_s == pytest.approx(2e9)
    assert (free.storage_aggregate.model, free.storage_aggregate.extrapolated) == ("flat", True)
    capped = provision_one(p, Policy(), "sync", None, 2, DATA, hand_profile({8: 2e9}, shared=True, limit=100e9))
    assert capped.headroom * capped.burst_bandwidth_bytes_per_s == pytest.approx(100e9)
    given = provision_one(
        p,
        Policy(aggregate_limit_bytes_per_s=40e9),
        "sync",
        None,
        2,
        DATA,
        hand_profile({8: 2e9}, shared=True, limit=100e9),
    )
    assert given.headroom * given.burst_bandwidth_bytes_per_s == pytest.approx(
        40e9
    )  # the given limit replaces the profile's
    assert given.storage_aggregate.model == "given limit"
    local = provision_one(p, Policy(), "sync", None, 2, DATA, hand_profile({8: 2e9}, shared=False))
    assert local.headroom * local.burst_bandwidth_bytes_per_s == pytest.approx(2e9 * 128)  # 256 GB/s
    assert (local.storage_aggregate.model, local.storage_aggregate.extrapolated) == ("node-local", False)


def test_an_async_snapshot_or_staged_copy_that_does_not_fit_is_infeasible():
    """Two nodes, one writer each, 10 GB per node. Host memory 5 GB: the snapshot cannot be taken, so no interval
    exists (it used to report feasible with an infinite interval and ETTR 0). Local disk 5 GB: the staged copy does
    not fit the local NVMe, as staged_scenario says for recommend's what-ifs."""
    from tests.handmade import hand_plan

    p = hand_plan([("n0.pt", 10 * 10**9, 0, 0), ("n1.pt", 10 * 10**9, 1, 1)])
    row = provision_one(p, Policy(mode="async", host_memory_bytes=5e9), "async", 0.8, 2, DATA)
    assert (row.feasible, row.interval_s, row.expected_ettr) == (False, None, None)
    assert row.dominant_term == (
        "the snapshot (10 GB per node) does not fit in host memory (5 GB): async save is not possible"
    )
    row = provision_one(p, Policy(local_disk_bytes=5e9), "staged", None, 2, DATA)
    assert not row.feasible
    assert row.dominant_term == "the staged copy (10 GB per node) does not fit on local-nvme (5 GB)"


def test_loss_window_as_the_dominant_term():
    """Two nodes, one 10 GB torch.save file each at 10 GB/s: the serialiser alone takes 1 s, so the fastest persist is
    1 ÷ 0.9 = 1.111 s (10% is left for per-file costs). The 5% budget needs τ ≥ 1.111 ÷ 0.05 = 22.2 s; a 20 s window
    allows τ ≤ 20 − 1.111 = 18.9 s."""
    from tests.handmade import hand_plan

    p = hand_plan([("n0.pt", 10 * 10**9, 0, 0), ("n1.pt", 10 * 10**9, 1, 1)])
    policy = Policy(max_loss_s=20, mtbf_s=86400, serialize_bytes_per_s={"torch.save": 10e9})
    row = provision_one(p, policy, "sync", None, 2, DATA)
    assert not row.feasible
    assert row.dominant_term == (
        "loss window: the busiest writer's serialisation (1.11 s) needs τ ≥ 22.2 s for the overhead budget, "
        "longer than the 20 s window allows"
    )


def test_assumptions_name_the_failure_rates_only_when_used():
    """--mtbf replaces the failure rates: the rates are not an assumption then. Defaults are labelled as such:
    2.46 per 1,000 node-days + 2.72 per job-day, the restart's fixed part 300 s; the staged local disk 8 × 3.84 TB =
    30.72 TB."""
    rates = run_json("provision", "--model", "llama-3.1-70b", "--gpus", "1024")["assumptions"]
    assert (
        "failures: 2.46 per 1,000 node-days (default; --node-failure-rate) + 2.72 per job-day "
        "(default; --job-failure-rate)"
    ) in rates
    restart = [a for a in rates if a.startswith("restart cost ")]
    assert len(restart) == 1 and "= fixed 300 s (default; --restart-fixed) + predicted load " in restart[0]
    given = run_json("provision", "--model", "llama-3.1-70b", "--gpus", "1024", "--mtbf", "24h")["assumptions"]
    assert "job MTBF 86400 s (given (--mtbf))" in given
    assert not any("node-days" in a for a in given)
    staged = run_json("provision", "--model", "llama-3.1-70b", "--gpus", "1024", "--mode", "staged")["assumptions"]
    assert (
        "staged: the local write uses the built-in local-nvme class, 30.72 TB (27.94 TiB) per node (default)" in staged
    )
