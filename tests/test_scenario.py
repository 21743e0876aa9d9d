"""planning/scenario.py: each rule's bound and inverse, evaluate, R′, and the scenarios, against hand-computed values.

Deliberate break caught here, made and reverted: the overhead-budget bound halved
(OVERHEAD.interval = stall ÷ budget ÷ 2) fails test_overhead_budget_bound_and_inverse,
test_evaluate_where_the_overhead_budget_binds and test_evaluate_where_the_optimum_is_used_and_where_nothing_fits.
"""

from __future__ import annotations

import math

import pytest

from ckplan.planning.policy import Policy
from ckplan.planning.scenario import (
    LOSS_WINDOW,
    ONE_IN_FLIGHT,
    OVERHEAD,
    RULES,
    Scenario,
    async_scenario,
    evaluate,
    longest_feasible_persist,
    restart_with_persist,
    snapshot_seconds,
    staged_scenario,
    sync_scenario,
)
from tests.handmade import hand_plan, hand_profile

GB = 10**9


def sync(seconds: float) -> Scenario:
    return Scenario(name="s", mode="sync", save_seconds=seconds, stall_seconds=seconds)


def test_overhead_budget_bound_and_inverse():
    # a 30 s stall within a 5% budget needs τ ≥ 30 ÷ 0.05 = 600 s; a 600 s interval allows a 0.05 × 600 = 30 s stall
    p = Policy(max_overhead=0.05)
    assert OVERHEAD.interval(sync(30), p) == pytest.approx(600)
    assert OVERHEAD.inverse(600, p) == pytest.approx(30)
    assert OVERHEAD.evaluate(sync(30), p).model_dump() == {
        "name": "overhead budget",
        "bound": "min",
        "seconds": pytest.approx(600),
        "explanation": "stall 30 s ÷ budget 5.0%",
    }


def test_one_in_flight_and_loss_window_bounds_and_inverses():
    p = Policy(max_loss_s=3600)
    s = Scenario(name="a", mode="async", save_seconds=100, stall_seconds=1)
    # one persist in flight: τ ≥ 100 s; loss window: τ ≤ 3600 − 100 = 3500 s
    assert ONE_IN_FLIGHT.interval(s, p) == 100 and ONE_IN_FLIGHT.inverse(250, p) == 250
    assert LOSS_WINDOW.interval(s, p) == 3500 and LOSS_WINDOW.inverse(3000, p) == 600
    assert [r.name for r in RULES if r.applies(s)] == ["overhead budget", "one persist in flight", "loss window"]
    assert [r.name for r in RULES if r.applies(sync(10))] == ["overhead budget", "loss window"]


def test_evaluate_where_the_overhead_budget_binds():
    """A 30 s synchronous save, 5% budget, 1 h window, MTBF 3,000 s, restart 600 s."""
    p = Policy(max_overhead=0.05, max_loss_s=3600, restart_s=600)
    ev, constraints = evaluate(sync(30), 3000, p)
    # Daly: x = 30 / 6,000 = 0.005; √(2 × 30 × 3,000) = 424.26; τ = 424.26 × (1 + √0.005/3 + 0.005/9) − 30 = 404.5 s
    daly = math.sqrt(180_000) * (1 + math.sqrt(0.005) / 3 + 0.005 / 9) - 30
    assert ev.optimal_interval_s == pytest.approx(daly) and daly == pytest.approx(404.5, abs=0.1)
    # the budget needs 600 s, longer than the optimum and shorter than the window's 3,570 s: 600 s, at exactly 5%
    assert (ev.shortest_safe_interval_s, ev.binding_constraint) == (pytest.approx(600), "overhead budget")
    assert ev.longest_interval_s == 3570
    assert ev.recommended_interval_s == pytest.approx(600)
    assert ev.overhead_at_recommended == pytest.approx(0.05)
    assert ev.verdict == "tight"  # above 80% of the budget
    assert not ev.follows_reliability
    # a lower bound of 404 s fits under the 404.5 s optimum (and the 3,570 s window); 405 s and 600 s do not
    assert ev.fits_reliability(404) and not ev.fits_reliability(405) and not ev.fits_reliability(600)
    assert [c.name for c in constraints] == ["overhead budget", "loss window"]
    # Daly's wall time per useful second at τ 600, δ 30, M 3,000, R 600: e^0.2 × 3,000 × (e^(630/3,000) − 1) / 600
    # = 1.22140 × 3,000 × 0.233678 / 600 = 1.42707; waste = 1 − 1/1.42707 = 0.29927
    assert ev.expected_waste_fraction == pytest.approx(0.29927, abs=1e-5)


def test_evaluate_where_the_optimum_is_used_and_where_nothing_fits():
    p = Policy(max_overhead=0.05, max_loss_s=3600)
    ev, _ = evaluate(sync(5), 86400, p)
    # Daly for δ = 5 s, M = 1 day: √864,000 = 929.5 → ×(1 + √(5/172,800)/3 + …) − 5 = 926.2 s; budget needs 100 s
    assert ev.recommended_interval_s == pytest.approx(ev.optimal_interval_s) and ev.verdict == "ok"
    assert ev.recommended_interval_s == pytest.approx(926.2, abs=0.1)
    assert ev.follows_reliability
    # a 200 s save needs τ ≥ 4,000 s but the window allows 3,400 s
    bad, _ = evaluate(sync(200), 86400, p)
    assert bad.verdict == "infeasible" and bad.shortest_safe_interval_s == pytest.approx(4000)
    never, _ = evaluate(Scenario(name="x", mode="async", save_seconds=math.inf, stall_seconds=math.inf), 86400, p)
    assert (never.verdict, never.ettr) == ("infeasible", 0.0)


def test_restart_with_persist():
    # R′ = R + (persist − stall): 600 + (100 − 1) = 699 s; a synchronous save adds nothing
    assert restart_with_persist(600, 100, 1) == 699
    assert Scenario(name="a", mode="async", save_seconds=100, stall_seconds=1).rework_s(600) == 699
    assert sync(100).rework_s(600) == 600


def test_longest_feasible_persist():
    p = Policy(max_overhead=0.05, max_loss_s=3600)
    # sync: S ≤ L·b/(1 + b) = 3600 × 0.05 / 1.05 = 171.43 s
    assert longest_feasible_persist("sync", 0, p) == pytest.approx(171.428571)
    # async with a 10 s stall: min(L/2, L − stall/b) = min(1800, 3400) = 1800; with 100 s: min(1800, 1600) = 1600
    assert longest_feasible_persist("async", 10, p) == 1800
    assert longest_feasible_persist("async", 100, p) == 1600


def test_scenarios_from_the_save_model():
    """Two nodes, one writer each, 10 GB torch.save file each; target 1 GB/s per node (2 GB/s measured on two hosts),
    100 files/s."""
    plan = hand_plan([("n0.pt", 10 * GB, 0, 0), ("n1.pt", 10 * GB, 1, 1)])
    target = hand_profile({1: 1e9}, shared=True, hosts_curve={1: 1e9, 2: 2e9})
    p = Policy(serialize_bytes_per_s={"torch.save": 10e9})
    # sync: 1 s serialise + 10 GB ÷ 1 GB/s + 1 file ÷ 100 = 11.01 s
    assert sync_scenario(plan, target, p).save_seconds == pytest.approx(11.01)
    # async: stall = the busiest GPU's 10 GB ÷ 20 GB/s snapshot = 0.5 s; persist as sync
    a = async_scenario(plan, target, p)
    assert (a.stall_seconds, a.save_seconds) == (pytest.approx(0.5), pytest.approx(11.01))
    assert snapshot_seconds(plan, p) == pytest.approx(0.5)
    # staged on a 5 GB/s tier: 1 + 2 s + 0.01 blocking; the drain copies files: 10 s + 0.01
    tier = hand_profile({1: 5e9})
    st = staged_scenario(plan, target, tier, p, capacity_bytes=1e12, name="staged")
    assert (st.stall_seconds, st.save_seconds) == (pytest.approx(3.01), pytest.approx(3.01 + 10.01))
    full = staged_scenario(plan, target, tier, p, capacity_bytes=5e9, name="staged")
    assert math.isinf(full.stall_seconds) and "does not fit" in full.notes[0]
    # given save time: the model is skipped
    given = sync_scenario(plan, target, p.model_copy(update={"save_time_s": 42.0}))
    assert (given.save_seconds, given.save_model) == (42.0, None)
    # async, the snapshot larger than host memory
    no_room = async_scenario(plan, target, p.model_copy(update={"host_memory_bytes": 5e9}))
    assert math.isinf(no_room.stall_seconds) and "host memory" in no_room.notes[0]
