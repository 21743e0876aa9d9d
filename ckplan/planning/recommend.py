"""From a plan, a storage profile and a policy to a recommendation.

Scenario = how one save behaves: its blocking time (stall, δ) and its persist
time (how long until the checkpoint is durable on the target, δ_p).
- sync: stall = persist = the save time.
- async: stall = the device-to-host snapshot of the busiest GPU's share;
  persist = the save time, in the background (CheckFreq, DCP async_save).
- staged: stall = the write to a node-local tier (/dev/shm or NVMe);
  persist = that plus the drain to the shared target.
Constraints on the compute interval τ:
- overhead: stall/τ ≤ budget  →  τ ≥ stall / budget;
- one persist in flight (async, staged): τ ≥ persist;
- loss window: a crash just before a save becomes durable loses τ + persist,
  so τ ≤ L − persist.
The optimum is Daly's τ with δ = stall; restart and the background persist
both add to the work redone after a failure, so R' = R + (persist − stall).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from ckplan import __version__
from ckplan.errors import InputError
from ckplan.planning import interval
from ckplan.planning.policy import TIGHT_FRACTION, Policy
from ckplan.planning.savetime import SaveTime, predict_save, required_bandwidth, required_file_rate
from ckplan.profile import StorageProfile
from ckplan.sizing.plan import CheckpointPlan


class Scenario(BaseModel):
    name: str
    mode: Literal["sync", "async", "staged"]
    save_seconds: float  # persist time: until durable on the target
    stall_seconds: float  # blocking time per save
    save_model: SaveTime | None = None
    notes: list[str] = Field(default_factory=list)


class Constraint(BaseModel):
    name: str
    bound: Literal["min", "max"]
    seconds: float
    explanation: str


class Evaluation(BaseModel):
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


class WhatIf(BaseModel):
    mitigation: str
    save_seconds: float
    stall_seconds: float
    shortest_safe_interval_s: float
    recommended_interval_s: float
    verdict: str
    expected_waste_fraction: float
    notes: list[str] = Field(default_factory=list)


class Recommendation(BaseModel):
    kind: Literal["ckplan.recommendation"] = "ckplan.recommendation"
    ckplan_version: str = __version__
    plan: str  # CheckpointPlan.describe()
    storage: str
    storage_class: str
    mode: str
    save_seconds: float
    stall_seconds: float
    save_model: SaveTime | None
    mtbf_s: float
    mtbf_source: str
    restart_s: float
    max_loss_s: float
    max_overhead: float
    shortest_safe_interval_s: float
    binding_constraint: str
    constraints: list[Constraint]
    optimal_interval_s: float
    young_interval_s: float
    recommended_interval_s: float
    recommended_steps: int | None
    verdict: Literal["ok", "tight", "infeasible"]
    verdict_reason: str
    overhead_at_recommended: float
    expected_waste_fraction: float
    ettr: float
    expected_lost_work_per_failure_s: float
    failures_per_day: float
    needed: dict[str, float] = Field(default_factory=dict)  # what would make an infeasible plan feasible
    summary: str
    what_if: list[WhatIf] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)


def job_mtbf(plan: CheckpointPlan, policy: Policy) -> tuple[float, str]:
    if policy.mtbf_s is not None:
        if policy.mtbf_s <= 0:
            raise InputError("--mtbf must be > 0")
        return policy.mtbf_s, "given (--mtbf)"
    m = interval.job_mtbf(plan.setup.nodes, policy.node_failures_per_1000_days, policy.job_failures_per_day)
    return m, (f"{plan.setup.nodes} node(s) × {policy.node_failures_per_1000_days:g} per 1,000 node-days "
               f"+ {policy.job_failures_per_day:g} per job-day")


def snapshot_seconds(plan: CheckpointPlan, policy: Policy) -> float:
    """Device-to-host copy of the busiest rank's share; all GPUs copy in parallel."""
    return plan.bytes_per_rank_max / policy.snapshot_bytes_per_s


def sync_scenario(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, name: str = "as planned", **overrides) -> Scenario:
    if policy.save_time_s is not None:
        return Scenario(name=name, mode="sync", save_seconds=policy.save_time_s, stall_seconds=policy.save_time_s,
                        notes=["save time given (--save-time), model skipped"])
    model = predict_save(plan, profile, given_serializers=policy.serialize_bytes_per_s, **overrides)
    return Scenario(name=name, mode="sync", save_seconds=model.seconds, stall_seconds=model.seconds, save_model=model)


def async_scenario(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, name: str = "async save", **overrides) -> Scenario:
    base = sync_scenario(plan, profile, policy, name, **overrides)
    stall = policy.stall_time_s if policy.stall_time_s is not None else snapshot_seconds(plan, policy)
    notes = list(base.notes)
    node_bytes = max(n.bytes for n in plan.nodes)
    if node_bytes > policy.host_memory_bytes:
        notes.append(f"the snapshot ({node_bytes / 1e9:.0f} GB per node) does not fit in host memory "
                     f"({policy.host_memory_bytes / 1e9:.0f} GB): async save is not possible")
        stall = math.inf
    return Scenario(name=name, mode="async", save_seconds=base.save_seconds, stall_seconds=stall,
                    save_model=base.save_model, notes=notes)


def staged_scenario(plan: CheckpointPlan, profile: StorageProfile, tier: StorageProfile, policy: Policy,
                    capacity_bytes: float, name: str, **overrides) -> Scenario:
    """Write to a node-local tier (blocking), then drain to the shared target in the background."""
    # the staging tier is written on this machine: its serialisers are the main profile's calibration, if any
    local = predict_save(plan, tier.model_copy(update={"shared": False, "replay": None, "calibration": profile.calibration}),
                         given_serializers=policy.serialize_bytes_per_s, **overrides)
    # the drain copies finished files: no serialiser or coordination on that path
    drain = predict_save(plan, profile, framework_costs=False, **overrides).seconds
    notes = []
    node_bytes = max(n.bytes for n in plan.nodes)
    if node_bytes > capacity_bytes:
        notes.append(f"the staged copy ({node_bytes / 1e9:.0f} GB per node) does not fit on {tier.name} "
                     f"({capacity_bytes / 1e9:.0f} GB)")
        return Scenario(name=name, mode="staged", save_seconds=math.inf, stall_seconds=math.inf, notes=notes)
    return Scenario(name=name, mode="staged", save_seconds=local.seconds + drain, stall_seconds=local.seconds,
                    save_model=local, notes=notes)


def evaluate(s: Scenario, mtbf: float, policy: Policy) -> tuple[Evaluation, list[Constraint]]:
    if not math.isfinite(s.stall_seconds):
        inf = math.inf
        return Evaluation(shortest_safe_interval_s=inf, binding_constraint="not possible", longest_interval_s=0,
                          optimal_interval_s=inf, young_interval_s=inf, recommended_interval_s=inf, verdict="infeasible",
                          overhead_at_recommended=inf, expected_waste_fraction=1.0, ettr=0.0), []
    constraints = [Constraint(name="overhead budget", bound="min", seconds=s.stall_seconds / policy.max_overhead,
                              explanation=f"stall {s.stall_seconds:.3g} s ÷ budget {policy.max_overhead:.1%}")]
    if s.mode != "sync":
        constraints.append(Constraint(name="one persist in flight", bound="min", seconds=s.save_seconds,
                                      explanation=f"the background persist takes {s.save_seconds:.3g} s"))
    longest = policy.max_loss_s - s.save_seconds
    constraints.append(Constraint(name="loss window", bound="max", seconds=longest,
                                  explanation=f"a crash loses up to τ + {s.save_seconds:.3g} s; window {policy.max_loss_s:.3g} s"))
    binding = max((c for c in constraints if c.bound == "min"), key=lambda c: c.seconds)
    shortest = binding.seconds
    extra_rework = max(s.save_seconds - s.stall_seconds, 0.0)
    restart = policy.restart_s + extra_rework
    optimum = interval.daly_interval(s.stall_seconds, mtbf)
    young = interval.young_interval(s.stall_seconds, mtbf)
    if shortest > longest:
        verdict, chosen = "infeasible", shortest
    else:
        chosen = min(max(optimum, shortest), longest)
        verdict = "tight" if s.stall_seconds / chosen > TIGHT_FRACTION * policy.max_overhead else "ok"
    chosen = max(chosen, 1e-9)
    waste = interval.waste_fraction(chosen, s.stall_seconds, mtbf, restart)
    return Evaluation(shortest_safe_interval_s=shortest, binding_constraint=binding.name, longest_interval_s=longest,
                      optimal_interval_s=optimum, young_interval_s=young, recommended_interval_s=chosen, verdict=verdict,
                      overhead_at_recommended=s.stall_seconds / chosen, expected_waste_fraction=waste,
                      ettr=1 - waste), constraints


def recommend(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, what_ifs: bool = True) -> Recommendation:
    from ckplan.planning import mitigations
    from ckplan.units import fmt_duration, fmt_percent, fmt_rate

    if policy.max_loss_s <= 0:
        raise InputError("--max-loss must be > 0")
    mtbf, mtbf_source = job_mtbf(plan, policy)
    scenario = async_scenario(plan, profile, policy, "as planned") if policy.mode == "async" else sync_scenario(plan, profile, policy)
    ev, constraints = evaluate(scenario, mtbf, policy)
    needed: dict[str, float] = {}
    if ev.verdict == "infeasible":
        reason = _infeasible_reason(scenario, ev, policy)
        needed = _needed(plan, profile, policy, scenario)
        m = scenario.save_model
        if m is not None and "save_seconds" in needed and "aggregate_bandwidth_bytes_per_s" not in needed:
            reason += (f"; no storage bandwidth is enough: the per-file, fsync and serialisation terms "
                       f"({m.metadata_seconds + m.fsync_tail_seconds + m.serialize_seconds:.3g} s) already exceed the "
                       f"{needed['save_seconds']:.3g} s the window allows")
    elif ev.verdict == "tight":
        reason = f"overhead {fmt_percent(ev.overhead_at_recommended)} is near the {fmt_percent(policy.max_overhead)} budget"
    else:
        reason = f"the optimum fits inside the loss window with overhead {fmt_percent(ev.overhead_at_recommended)}"
    steps = int(ev.recommended_interval_s // policy.iteration_s) if policy.iteration_s and math.isfinite(ev.recommended_interval_s) else None
    failures_per_day = 86400 / mtbf
    lost = ev.recommended_interval_s / 2 + scenario.save_seconds
    storage_limit = (f"storage limit at {fmt_rate(scenario.save_model.aggregate_bandwidth_bytes_per_s)} "
                     f"({scenario.save_model.limited_by})" if scenario.save_model else "save time as given")
    if ev.verdict == "infeasible":
        need = needed.get("aggregate_bandwidth_bytes_per_s")
        summary = ("no interval meets both the loss window and the overhead budget"
                   + (f"; meeting them needs {fmt_rate(need)} aggregate write bandwidth" if need else "")
                   + "; see the what-ifs")
    else:
        summary = (f"save every {fmt_duration(ev.recommended_interval_s)}"
                   + (f" ({steps:,} steps)" if steps is not None else "")
                   + f"; expected overhead {fmt_percent(ev.overhead_at_recommended)}, expected lost work "
                   f"{fmt_duration(lost)} per failure ({failures_per_day:.2f} failures/day); {storage_limit}")
    rec = Recommendation(
        plan=plan.describe(), storage=profile.name, storage_class=profile.storage_class, mode=policy.mode,
        save_seconds=scenario.save_seconds, stall_seconds=scenario.stall_seconds, save_model=scenario.save_model,
        mtbf_s=mtbf, mtbf_source=mtbf_source, restart_s=policy.restart_s, max_loss_s=policy.max_loss_s,
        max_overhead=policy.max_overhead, constraints=constraints, recommended_steps=steps, verdict_reason=reason,
        expected_lost_work_per_failure_s=lost, failures_per_day=failures_per_day, needed=needed, summary=summary,
        assumptions=_assumptions(plan, profile, policy, scenario), **ev.model_dump(exclude={"verdict"}), verdict=ev.verdict)
    if what_ifs:
        rec.what_if = mitigations.what_ifs(plan, profile, policy, mtbf)
    return rec


class Comparison(BaseModel):
    """One plan on every built-in storage class, without what-ifs."""

    kind: Literal["ckplan.comparison"] = "ckplan.comparison"
    plan: str
    recommendations: list[Recommendation]


def compare(plan: CheckpointPlan, policy: Policy) -> Comparison:
    from ckplan import catalog
    profiles = list(catalog.storage_classes().values())
    if policy.save_time_s is not None:
        # a measured save time replaces the save-time model, the only place the storage enters without what-ifs,
        # so every class would give the same row: give one, named for what it rests on
        profiles = [profiles[0].model_copy(update={"name": "measured (--save-time)", "storage_class": "measured",
                                                   "source": "measured", "notes": []})]
    return Comparison(plan=plan.describe(), recommendations=[recommend(plan, p, policy, what_ifs=False) for p in profiles])


def _infeasible_reason(s: Scenario, ev: Evaluation, policy: Policy) -> str:
    if not math.isfinite(ev.shortest_safe_interval_s):
        return "; ".join(s.notes) or "the save cannot complete"
    from ckplan.units import fmt_duration
    return (f"the shortest safe interval ({fmt_duration(ev.shortest_safe_interval_s)}, {ev.binding_constraint}) "
            f"exceeds what the {fmt_duration(policy.max_loss_s)} loss window allows "
            f"({fmt_duration(max(ev.longest_interval_s, 0))} after a {fmt_duration(s.save_seconds)} persist)")


def _needed(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, s: Scenario) -> dict[str, float]:
    """The save time that meets the window, and the bandwidth and file rate that give it."""
    b, loss = policy.max_overhead, policy.max_loss_s
    if s.mode == "sync":
        target = loss * b / (1 + b)  # S/b ≤ L − S
    else:
        target = min(loss / 2, loss - s.stall_seconds / b)  # S ≤ L − S and S ≤ L − stall/b
    if target <= 0:
        return {}
    out = {"save_seconds": target}
    if s.save_model is not None:
        bw = required_bandwidth(plan, profile, target, policy.serialize_bytes_per_s)
        if bw is not None:
            out["aggregate_bandwidth_bytes_per_s"], out["node_bandwidth_bytes_per_s"] = bw
        rate = required_file_rate(plan, target / 2)
        if rate > profile.small_files.files_per_s:
            out["files_per_s_per_node"] = rate
    return out


def _assumptions(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, s: Scenario) -> list[str]:
    out = [f"storage: {profile.name} ({profile.source}{', ' + profile.notes[0] if profile.source == 'builtin' and profile.notes else ''})"]
    m = s.save_model
    if m and m.source == "replay":
        out.append(f"save time: the profile's replay of this exact plan ({m.write_path} writes), extrapolated by bytes "
                   "to full size")
    elif m:
        if m.write_path == "buffered" and profile.page_cache_write:
            terms = ("busiest writer: serialise + copy its bytes into the page cache; the flush, beside it: its bytes ÷ "
                     "one-stream bandwidth, the busiest node's bytes ÷ node bandwidth, all bytes ÷ aggregate")
        else:
            terms = ("busiest writer: serialise + its bytes ÷ one-stream bandwidth; busiest node: its bytes ÷ node "
                     "bandwidth at its writer count; all bytes ÷ aggregate")
        out.append(f"save time = fixed cost of a collective save + max({terms}) + files ÷ small-file rate + fsync p99, "
                   f"on the {m.write_path} write path's curve")
    if m and m.machine is not None:
        out.append(m.machine.describe() + " (--serialize-bandwidth; `ckplan calibrate`)")
    if m:
        out.extend(m.notes)
    if policy.mode == "async":
        out.append(f"async snapshot at {policy.snapshot_bytes_per_s / 1e9:g} GB/s per GPU (device→pinned host; default, "
                   "not measured here; --snapshot-bandwidth)")
    out.append(f"restart cost {policy.restart_s:g} s; failures: exponential (Daly 2006)")
    return out
