"""A save → its constraints → an interval: the one owner of the planner's rules.

Scenario = how one save behaves: its blocking time (stall, δ) and its persist
time (how long until the checkpoint is durable on the target, δ_p).
- sync: stall = persist = the save time.
- async: stall = the device-to-host snapshot of the busiest GPU's share;
  persist = the save time, in the background (CheckFreq, DCP async_save).
- staged: stall = the write to a node-local tier (/dev/shm or NVMe);
  persist = that plus the drain to the shared target.
Constraints on the compute interval τ (RULES, each with its inverse):
- overhead budget: stall/τ ≤ b  →  τ ≥ stall / b;        inverse: stall ≤ b·τ
- one persist in flight (async, staged): τ ≥ persist;    inverse: persist ≤ τ
- loss window: a crash just before a save becomes durable loses τ + persist,
  so τ ≤ L − persist;                                    inverse: persist ≤ L − τ
The optimum is Daly's τ with δ = stall; restart and the background persist
both add to the work redone after a failure, so R′ = R + (persist − stall)
(`Scenario.rework_s`). `recommend`, `mitigations`, `provision` and `report` call
these and restate none of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Unpack

from pydantic import Field

from ckplan.errors import InputError
from ckplan.planning import interval
from ckplan.planning.defaults import COLLECTIVE_TIMEOUT_S, COLLECTIVE_TIMEOUT_WARN_FRACTION
from ckplan.planning.policy import DEFAULT_RESTART_FIXED_S, TIGHT_FRACTION, Policy, provenance
from ckplan.planning.savetime import LoadTime, SaveOverrides, SaveTime, predict_load, predict_save
from ckplan.profile import Calibration, StorageProfile
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan

Mode = Literal["sync", "async", "staged"]


class Scenario(Model):
    name: str
    mode: Mode
    save_seconds: float  # persist time: until durable on the target
    stall_seconds: float  # blocking time per save
    save_model: SaveTime | None = None
    notes: list[str] = Field(default_factory=list)

    def rework_s(self, restart_s: float) -> float:
        """R′: the restart, plus the background persist a failure falls back over (Daly's R, extended)."""
        return restart_with_persist(restart_s, self.save_seconds, self.stall_seconds)


class RestartCost(Model):
    """R: what a restart costs before training goes on. Given whole (--restart), or a fixed part (detect,
    reschedule, initialise: a named default, --restart-fixed) plus the checkpoint's predicted load (predict_load)."""

    seconds: float
    fixed_seconds: float | None = None  # None when R was given whole
    fixed_source: str | None = None
    load: LoadTime | None = None  # the predicted load, where the plan's restore manifest and a profile allow one
    source: str

    def describe(self) -> str:
        if self.fixed_seconds is None:
            return f"restart cost {self.seconds:g} s ({self.source})"
        load = (
            f" + predicted load {self.load.seconds:.3g} s ({self.load.limited_by}, {self.load.read_curve} curve)"
            if self.load
            else ""
        )
        return f"restart cost {self.seconds:.4g} s = fixed {self.fixed_seconds:g} s ({self.fixed_source}){load}" + (
            "" if self.load else f" ({self.source})"
        )


def restart_cost(
    plan: CheckpointPlan, profile: StorageProfile | None, policy: Policy, load: LoadTime | None = None
) -> RestartCost:
    """R for this plan on this profile: the given one, else the fixed part plus the predicted load (`load`, when
    the caller has one for another storage, e.g. provision's target). No load is added where the plan has no
    restore manifest or no storage is given; the source says so."""
    if policy.restart_s is not None:
        return RestartCost(seconds=policy.restart_s, source="given (--restart)")
    fixed = policy.restart_fixed_s
    fixed_source = provenance(fixed, DEFAULT_RESTART_FIXED_S, "--restart-fixed")
    if load is None and profile is not None and plan.restore is not None:
        load = predict_load(plan, profile, policy.aggregate_limit_bytes_per_s)
    why = (
        ""
        if load is not None
        else "the load is not counted: the plan has no restore manifest"
        if plan.restore is None
        else "the load is not counted: no storage given"
    )
    return RestartCost(
        seconds=fixed + (load.seconds if load else 0.0),
        fixed_seconds=fixed,
        fixed_source=fixed_source,
        load=load,
        source=why or "fixed + predicted load",
    )


def collective_timeout_warning(seconds: float, timeout_s: float, what: str) -> str | None:
    """A warning when `what` (a sync save or an async save's blocking part, a load at restart: `seconds` on its
    busiest rank) passes COLLECTIVE_TIMEOUT_WARN_FRACTION of the process group's timeout: the other ranks wait in
    their next collective meanwhile, and the watchdog kills the job when the wait reaches the timeout."""
    if seconds <= COLLECTIVE_TIMEOUT_WARN_FRACTION * timeout_s:
        return None
    return (
        f"{what} takes {seconds:.3g} s, {seconds / timeout_s:.0%} of the process group's timeout ({timeout_s:.4g} s"
        + (", torch.distributed's NCCL default" if timeout_s == COLLECTIVE_TIMEOUT_S else "")
        + f"; warned past {COLLECTIVE_TIMEOUT_WARN_FRACTION:.0%} of it): ranks waiting in a collective meanwhile are "
        "killed by the watchdog if it reaches the timeout: raise the timeout (init_process_group(timeout=…)), or "
        "shorten what they wait for (an async save, fewer bytes on the busiest rank, faster storage)"
    )


def with_restart(policy: Policy, cost: RestartCost) -> Policy:
    """The policy with R resolved, for the rules that price a failure (evaluate, waste curves)."""
    return policy.model_copy(update={"restart_s": cost.seconds})


def restart_of(policy: Policy) -> float:
    """R as the policy holds it: given or resolved (with_restart), else only its fixed part."""
    return policy.restart_s if policy.restart_s is not None else policy.restart_fixed_s


def restart_with_persist(restart_s: float, save_s: float, stall_s: float) -> float:
    """R′ = R + (persist − stall): a failure during a background persist falls back to the previous checkpoint."""
    return restart_s + max(save_s - stall_s, 0.0)


class Constraint(Model):
    """One rule's bound on the interval τ, as evaluated for one scenario."""

    name: str
    bound: Literal["min", "max"]
    seconds: float
    explanation: str


@dataclass(frozen=True)
class Rule:
    """A constraint on τ: its bound for a scenario, and its inverse (the largest stall or persist a given τ allows)."""

    name: str
    bound: Literal["min", "max"]
    applies: Callable[[Scenario], bool]
    interval: Callable[[Scenario, Policy], float]
    inverse: Callable[[float, Policy], float]
    explain: Callable[[Scenario, Policy], str]

    def evaluate(self, s: Scenario, policy: Policy) -> Constraint:
        return Constraint(
            name=self.name, bound=self.bound, seconds=self.interval(s, policy), explanation=self.explain(s, policy)
        )


OVERHEAD = Rule(
    "overhead budget",
    "min",
    lambda s: True,
    interval=lambda s, p: s.stall_seconds / p.max_overhead,
    inverse=lambda tau, p: tau * p.max_overhead,  # the longest stall τ allows
    explain=lambda s, p: f"stall {s.stall_seconds:.3g} s ÷ budget {p.max_overhead:.1%}",
)
ONE_IN_FLIGHT = Rule(
    "one persist in flight",
    "min",
    lambda s: s.mode != "sync",
    interval=lambda s, p: s.save_seconds,
    inverse=lambda tau, p: tau,  # the longest persist τ allows
    explain=lambda s, p: f"the background persist takes {s.save_seconds:.3g} s",
)
LOSS_WINDOW = Rule(
    "loss window",
    "max",
    lambda s: True,
    interval=lambda s, p: p.max_loss_s - s.save_seconds,
    inverse=lambda tau, p: p.max_loss_s - tau,  # the longest persist τ allows
    explain=lambda s, p: f"a crash loses up to τ + {s.save_seconds:.3g} s; window {p.max_loss_s:.3g} s",
)
RULES = (OVERHEAD, ONE_IN_FLIGHT, LOSS_WINDOW)


class Evaluation(Model):
    shortest_safe_interval_s: float
    binding_constraint: str
    longest_interval_s: float  # the loss window's bound
    optimal_interval_s: float
    young_interval_s: float
    recommended_interval_s: float
    verdict: Literal["ok", "tight", "infeasible"]
    overhead_at_recommended: float
    expected_waste_fraction: float
    ettr: float

    def fits_reliability(self, bound_s: float) -> bool:
        """A lower bound on τ no longer than both the Daly optimum and the loss window's bound: it lets the
        interval follow the failure rate instead of being stretched to fit it."""
        return bound_s <= min(self.optimal_interval_s, self.longest_interval_s) * (1 + 1e-9)

    @property
    def follows_reliability(self) -> bool:
        """The shortest safe interval fits reliability (fits_reliability): no rule stretches the interval."""
        return self.fits_reliability(self.shortest_safe_interval_s)


def evaluate(s: Scenario, mtbf: float, policy: Policy) -> tuple[Evaluation, list[Constraint]]:
    if not math.isfinite(s.stall_seconds):
        inf = math.inf
        return Evaluation(
            shortest_safe_interval_s=inf,
            binding_constraint="not possible",
            longest_interval_s=0,
            optimal_interval_s=inf,
            young_interval_s=inf,
            recommended_interval_s=inf,
            verdict="infeasible",
            overhead_at_recommended=inf,
            expected_waste_fraction=1.0,
            ettr=0.0,
        ), []
    constraints = [rule.evaluate(s, policy) for rule in RULES if rule.applies(s)]
    binding = max((c for c in constraints if c.bound == "min"), key=lambda c: c.seconds)
    shortest = binding.seconds
    longest = min(c.seconds for c in constraints if c.bound == "max")
    optimum = interval.daly_interval(s.stall_seconds, mtbf)
    young = interval.young_interval(s.stall_seconds, mtbf)
    if shortest > longest:
        verdict, chosen = "infeasible", shortest
    else:
        chosen = min(max(optimum, shortest), longest)
        verdict = "tight" if s.stall_seconds / chosen > TIGHT_FRACTION * policy.max_overhead else "ok"
    chosen = max(chosen, 1e-9)
    waste = interval.waste_fraction(chosen, s.stall_seconds, mtbf, s.rework_s(restart_of(policy)))
    return Evaluation(
        shortest_safe_interval_s=shortest,
        binding_constraint=binding.name,
        longest_interval_s=longest,
        optimal_interval_s=optimum,
        young_interval_s=young,
        recommended_interval_s=chosen,
        verdict=verdict,
        overhead_at_recommended=s.stall_seconds / chosen,
        expected_waste_fraction=waste,
        ettr=1 - waste,
    ), constraints


def longest_feasible_persist(mode: Mode, stall_s: float, policy: Policy) -> float:
    """The longest persist time for which some τ meets every rule (sync: stall = persist).

    sync: OVERHEAD's bound S/b must not pass LOSS_WINDOW's L − S  →  S ≤ L·b/(1 + b);
    async/staged: ONE_IN_FLIGHT's S ≤ L − S and OVERHEAD's stall/b ≤ L − S  →  S ≤ min(L/2, L − stall/b).
    """
    b, loss = policy.max_overhead, policy.max_loss_s
    if mode == "sync":
        return loss * b / (1 + b)
    return min(loss / 2, loss - stall_s / b)


def job_mtbf_with_source(plan: CheckpointPlan, policy: Policy) -> tuple[float, str]:
    """The job's MTBF: given (--mtbf), or from the failure rates (interval.job_mtbf), with a line saying which."""
    if policy.mtbf_s is not None:
        if policy.mtbf_s <= 0:
            raise InputError("‹mtbf_s› must be > 0")
        return policy.mtbf_s, "given (--mtbf)"
    m = interval.job_mtbf(plan.setup.nodes, policy.node_failures_per_1000_days, policy.job_failures_per_day)
    return m, (
        f"{plan.setup.nodes} node(s) × {policy.node_failures_per_1000_days:g} per 1,000 node-days "
        f"+ {policy.job_failures_per_day:g} per job-day"
    )


def snapshot_seconds(plan: CheckpointPlan, policy: Policy) -> float:
    """Device-to-host copy of the busiest rank's share; all GPUs copy in parallel."""
    return plan.bytes_per_rank_max / policy.snapshot_bytes_per_s


def sync_scenario(
    plan: CheckpointPlan,
    profile: StorageProfile,
    policy: Policy,
    name: str = "as planned",
    **overrides: Unpack[SaveOverrides],
) -> Scenario:
    if policy.save_time_s is not None:
        return Scenario(
            name=name,
            mode="sync",
            save_seconds=policy.save_time_s,
            stall_seconds=policy.save_time_s,
            notes=["save time given (--save-time), model skipped"],
        )
    model = predict_save(
        plan,
        profile,
        given_serializers=policy.serialize_bytes_per_s,
        aggregate_limit=policy.aggregate_limit_bytes_per_s,
        **overrides,
    )
    return Scenario(name=name, mode="sync", save_seconds=model.seconds, stall_seconds=model.seconds, save_model=model)


def async_stall(plan: CheckpointPlan, policy: Policy) -> tuple[float, list[str]]:
    """An async save's blocking time: given (--stall-time) or the snapshot; infinite where the snapshot does not fit."""
    stall = policy.stall_time_s if policy.stall_time_s is not None else snapshot_seconds(plan, policy)
    node_bytes = plan.busiest_node.bytes
    if node_bytes > policy.host_memory_bytes:
        return math.inf, [
            f"the snapshot ({node_bytes / 1e9:.0f} GB per node) does not fit in host memory "
            f"({policy.host_memory_bytes / 1e9:.0f} GB): async save is not possible"
        ]
    return stall, []


def async_scenario(
    plan: CheckpointPlan,
    profile: StorageProfile,
    policy: Policy,
    name: str = "async save",
    **overrides: Unpack[SaveOverrides],
) -> Scenario:
    base = sync_scenario(plan, profile, policy, name, **overrides)
    stall, notes = async_stall(plan, policy)
    return Scenario(
        name=name,
        mode="async",
        save_seconds=base.save_seconds,
        stall_seconds=stall,
        save_model=base.save_model,
        notes=base.notes + notes,
    )


def staged_stall(
    plan: CheckpointPlan,
    tier: StorageProfile,
    policy: Policy,
    capacity_bytes: float,
    calibration: Calibration | None = None,
    **overrides: Unpack[SaveOverrides],
) -> tuple[float, SaveTime | None, list[str]]:
    """A staged save's blocking time: the write to the node-local tier, with its model; infinite (with the reason)
    where the staged copy does not fit the tier's capacity. `calibration`: the serialisers of this machine, if known."""
    node_bytes = plan.busiest_node.bytes
    if node_bytes > capacity_bytes:
        return (
            math.inf,
            None,
            [
                f"the staged copy ({node_bytes / 1e9:.0f} GB per node) does not fit on {tier.name} "
                f"({capacity_bytes / 1e9:.0f} GB)"
            ],
        )
    local = predict_save(
        plan,
        tier.model_copy(update={"shared": False, "replay": None, "calibration": calibration}),
        given_serializers=policy.serialize_bytes_per_s,
        **overrides,
    )
    return local.seconds, local, []


def staged_scenario(
    plan: CheckpointPlan,
    profile: StorageProfile,
    tier: StorageProfile,
    policy: Policy,
    capacity_bytes: float,
    name: str,
    **overrides: Unpack[SaveOverrides],
) -> Scenario:
    """Write to a node-local tier (blocking), then drain to the shared target in the background."""
    # the staging tier is written on this machine: its serialisers are the main profile's calibration, if any
    stall, local, notes = staged_stall(plan, tier, policy, capacity_bytes, profile.calibration, **overrides)
    if not math.isfinite(stall):
        return Scenario(name=name, mode="staged", save_seconds=math.inf, stall_seconds=math.inf, notes=notes)
    # the drain copies finished files: no serialiser or coordination on that path
    drain = predict_save(
        plan, profile, framework_costs=False, aggregate_limit=policy.aggregate_limit_bytes_per_s, **overrides
    ).seconds
    return Scenario(name=name, mode="staged", save_seconds=stall + drain, stall_seconds=stall, save_model=local)


def waste_curve(
    stall_s: float, save_s: float, restart_s: float, mtbf_s: float, lo: float, hi: float, points: int = 200
) -> tuple[list[float], list[float]]:
    """Expected waste against the interval τ from lo to hi (log-spaced), exactly as evaluate() judges a scenario."""
    rework = restart_with_persist(restart_s, save_s, stall_s)
    xs = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    return xs, [interval.waste_fraction(x, stall_s, mtbf_s, rework) for x in xs]
