"""Interval maths: Young, Daly, waste and ETTR; monotonicity of the recommendation."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckplan import catalog
from ckplan.errors import InputError
from ckplan.planning import interval
from ckplan.planning.policy import Policy
from ckplan.planning.recommend import recommend
from ckplan.sizing.plan import build_plan

MIN = 60.0
HOUR = 3600.0


def test_young_hand_computed():
    # √(2 × 300 s × 86,400 s) = √51,840,000 = 7,200 s
    assert interval.young_interval(300, 86400) == pytest.approx(7200)


def test_daly_hand_computed():
    # x = 300 / 172,800; τ = 7,200 × (1 + √x/3 + x/9) − 300
    x = 300 / 172800
    assert interval.daly_interval(300, 86400) == pytest.approx(7200 * (1 + math.sqrt(x) / 3 + x / 9) - 300)


@pytest.mark.parametrize("mtbf_min,expected_min,tol", [(24 * 60, 117, 0.5), (6 * 60, 57, 0.5), (15, 9.1, 0.05)])
def test_daly_against_the_papers_figures(mtbf_min, expected_min, tol):
    """Daly (2006) Figs. 3-5: δ = 5 min, R = 10 min; the model predicts τ_opt = 117, 57 and 9.1 min."""
    assert interval.daly_interval(5 * MIN, mtbf_min * MIN) / MIN == pytest.approx(expected_min, abs=tol)


def test_daly_beyond_two_mtbf_is_mtbf():
    assert interval.daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR


def test_daly_optimum_minimises_the_exact_wall_time():
    delta, m, r = 5 * MIN, 6 * HOUR, 10 * MIN
    best = interval.daly_interval(delta, m)
    w = lambda t: interval.expected_wall_time(t, delta, m, r)
    assert w(best) <= w(best * 0.9) and w(best) <= w(best * 1.1)
    grid = min((w(t), t) for t in [best * (0.5 + i / 1000) for i in range(1000)])[1]
    assert grid == pytest.approx(best, rel=0.01)


def test_waste_and_ettr():
    # Without failures the waste tends to δ/(τ+δ); here it is computed exactly.
    tau, delta, m, r = HOUR, 60, 1e12, 0
    assert interval.waste_fraction(tau, delta, m, r) == pytest.approx(delta / (tau + delta), rel=1e-6)
    assert interval.ettr(tau, delta, m, r) == pytest.approx(tau / (tau + delta), rel=1e-6)
    # first-order check against Young's waste formula δ/τ + (τ + δ)/(2M) + R/M for small rates
    tau, delta, m, r = HOUR, 60, 1000 * HOUR, 600
    first_order = delta / tau + (tau + delta) / (2 * m) + r / m
    assert 1 / (1 - interval.waste_fraction(tau, delta, m, r)) - 1 == pytest.approx(first_order, rel=0.01)


def test_job_mtbf_from_rates():
    # 2,048 nodes × 3.8 per 1,000 node-days (Llama 3 405B) ≈ 7.8 per day → ~3.1 h
    assert interval.job_mtbf(2048, 3.8, 0) / HOUR == pytest.approx(24 / (2048 * 3.8 / 1000), rel=1e-9)


@pytest.mark.parametrize(
    "fn,args", [(interval.daly_interval, (10, 0)), (interval.young_interval, (10, -5)), (interval.job_mtbf, (1, 0, 0))]
)
def test_bad_failure_inputs(fn, args):
    with pytest.raises(InputError):
        fn(*args)


PLAN = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", gpus=16, zero=1)
LUSTRE = catalog.storage_classes()["lustre"]


def scaled(profile, factor):
    return profile.model_copy(
        update={
            "buffered_bandwidth": [
                b.model_copy(update={"bytes_per_s": b.bytes_per_s * factor}) for b in profile.buffered_bandwidth
            ],
            "aggregate_limit_bytes_per_s": profile.aggregate_limit_bytes_per_s * factor,
            "small_files": profile.small_files.model_copy(
                update={"files_per_s": profile.small_files.files_per_s * factor}
            ),
        }
    )


@settings(max_examples=60, deadline=None)
@given(factor=st.floats(1.0, 100.0), slower=st.floats(0.01, 1.0), mode=st.sampled_from(["sync", "async"]))
def test_faster_storage_never_lengthens_shortest_safe_interval(factor, slower, mode):
    policy = Policy(mode=mode)
    base = recommend(PLAN, scaled(LUSTRE, slower), policy)
    fast = recommend(PLAN, scaled(LUSTRE, slower * factor), policy)
    assert fast.shortest_safe_interval_s <= base.shortest_safe_interval_s * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(0.1, 50.0), more=st.floats(1.0, 20.0), mode=st.sampled_from(["sync", "async"]))
def test_higher_failure_rate_never_lengthens_optimum(rate, more, mode):
    low = recommend(PLAN, LUSTRE, Policy(mode=mode, node_failures_per_1000_days=rate))
    high = recommend(PLAN, LUSTRE, Policy(mode=mode, node_failures_per_1000_days=rate * more))
    assert high.optimal_interval_s <= low.optimal_interval_s * (1 + 1e-9)
    assert high.mtbf_s <= low.mtbf_s


def test_recommendation_is_clamped_and_verdicts():
    ok = recommend(PLAN, LUSTRE, Policy(max_loss_s=4 * HOUR))
    assert ok.verdict == "ok" and ok.recommended_interval_s == pytest.approx(ok.optimal_interval_s)
    clamp = recommend(PLAN, LUSTRE, Policy(max_loss_s=15 * MIN))
    assert clamp.shortest_safe_interval_s < clamp.optimal_interval_s
    assert clamp.recommended_interval_s == pytest.approx(15 * MIN - clamp.save_seconds)
    # DCP writes raw tensor bytes (no serialiser term), so bandwidth alone can fix it
    dcp = build_plan(arch=catalog.model("llama-3.1-8b"), model_name="llama-3.1-8b", framework="dcp", gpus=16, zero=3)
    bad = recommend(dcp, catalog.storage_classes()["s3"], Policy(max_loss_s=5 * MIN))
    assert bad.verdict == "infeasible" and bad.needed["aggregate_bandwidth_bytes_per_s"] > 0
    # the needed bandwidth, given to the model, meets the window
    s3 = catalog.storage_classes()["s3"]
    node_bw = s3.bandwidth_at(8)
    factor = max(
        bad.needed["aggregate_bandwidth_bytes_per_s"] / (node_bw * dcp.nodes_writing),
        bad.needed["node_bandwidth_bytes_per_s"] / node_bw,
    )
    # a system whose limit is no lower than its nodes' sum (planning/scaling.py: per node × nodes, at most the limit)
    faster = factor * 1.01 * node_bw
    fixed = recommend(
        dcp,
        scaled(s3, factor * 1.01).model_copy(update={"aggregate_limit_bytes_per_s": faster * dcp.nodes_writing}),
        Policy(max_loss_s=5 * MIN),
    )
    assert fixed.verdict != "infeasible"


def test_async_binds_on_persist_and_snapshot_too_big():
    rec = recommend(PLAN, catalog.storage_classes()["nfs"], Policy(mode="async", max_overhead=0.2))
    assert rec.stall_seconds == pytest.approx(PLAN.bytes_per_rank_max / 20e9)
    assert rec.binding_constraint == "one persist in flight" and rec.shortest_safe_interval_s == pytest.approx(
        rec.save_seconds
    )
    tiny = recommend(PLAN, LUSTRE, Policy(mode="async", host_memory_bytes=1e9))
    assert tiny.verdict == "infeasible" and "host memory" in tiny.verdict_reason


def test_save_time_shortcut_and_what_ifs():
    rec = recommend(PLAN, LUSTRE, Policy(save_time_s=300), catalog.planning_data())
    assert rec.save_seconds == 300 and rec.save_model is None
    names = [w.mitigation for w in rec.what_if]
    assert names[0] == "async save" and any(n.startswith("best combination") for n in names)
    assert any("staging" in n for n in names) and any(n.startswith("faster storage") for n in names)
    async_row = next(w for w in rec.what_if if w.mitigation == "async save")
    assert async_row.stall_seconds < rec.stall_seconds


@pytest.mark.parametrize("gpus,published_h", [(1024, 7.9), (16384, 54 * 24 / 419)])
def test_default_failure_rates_reproduce_the_published_job_mtbfs(gpus, published_h):
    """The default rates are fitted through the two published observed job MTBFs (policy.py; shared reference
    intervals.md): Meta research clusters, HPCA 2025, 7.9 h at 1,024 GPUs; Llama 3 405B, 419 unexpected
    interruptions in 54 days on 16,384 GPUs = 3.09 h. 8 GPUs per node."""
    mtbf_h = interval.job_mtbf(gpus // 8, Policy().node_failures_per_1000_days, Policy().job_failures_per_day) / HOUR
    assert mtbf_h == pytest.approx(published_h, rel=0.005)


def test_ettr_ceiling_is_the_restart_cost_alone():
    # R = 600 s, M = 6,000 s: e^{−0.1} = 0.904837; Daly's ETTR approaches it as the save and the interval vanish
    assert interval.ettr_ceiling(600, 6000) == pytest.approx(0.9048374180)
    assert interval.ettr(1e-3, 0, 6000, 600) == pytest.approx(0.9048374180, rel=1e-6)
    assert interval.ettr_ceiling(0, 6000) == 1.0
