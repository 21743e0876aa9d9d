"""From a plan, a storage profile and a policy to a recommendation: the plan's scenario evaluated
(planning/scenario.py owns the rules), why it is or is not feasible, what would fix it, and the what-ifs."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ckplan import __version__
from ckplan.errors import InputError
from ckplan.planning import mitigations
from ckplan.planning.data import PlanningData
from ckplan.planning.mitigations import WhatIf
from ckplan.planning.policy import (
    DEFAULT_HOST_MEMORY_BYTES,
    DEFAULT_SNAPSHOT_BYTES_PER_S,
    Policy,
    provenance,
)
from ckplan.planning.savetime import SaveTime, required_bandwidth_on, required_file_rate
from ckplan.planning.scaling import describe_rule
from ckplan.planning.scenario import (
    Constraint,
    Evaluation,
    RestartCost,
    Scenario,
    async_scenario,
    collective_timeout_warning,
    evaluate,
    job_mtbf_with_source,
    longest_feasible_persist,
    restart_cost,
    sync_scenario,
    with_restart,
)
from ckplan.profile import StorageProfile
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import fmt_bytes, fmt_duration, fmt_percent, fmt_rate


class Recommendation(Model):
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
    restart_s: float  # R: restart.seconds
    restart: RestartCost
    max_loss_s: float
    max_overhead: float
    shortest_safe_interval_s: float
    binding_constraint: str
    longest_interval_s: float  # the loss window's bound
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
    warnings: list[str] = Field(default_factory=list)


def recommend(
    plan: CheckpointPlan, profile: StorageProfile, policy: Policy, data: PlanningData | None = None
) -> Recommendation:
    """The recommendation for `plan` on `profile`; with `data` (the built-in tiers and codec), its what-ifs too."""
    if policy.max_loss_s <= 0:
        raise InputError("‹max_loss_s› must be > 0")
    mtbf, mtbf_source = job_mtbf_with_source(plan, policy)
    restart = restart_cost(plan, profile, policy)
    policy = with_restart(policy, restart)
    scenario = (
        async_scenario(plan, profile, policy, "as planned")
        if policy.mode == "async"
        else sync_scenario(plan, profile, policy)
    )
    ev, constraints = evaluate(scenario, mtbf, policy)
    needed: dict[str, float] = {}
    if ev.verdict == "infeasible":
        reason = _infeasible_reason(scenario, ev, policy)
        needed = _needed(plan, profile, policy, scenario)
        m = scenario.save_model
        if m is not None and "save_seconds" in needed and "aggregate_bandwidth_bytes_per_s" not in needed:
            reason += (
                f"; no storage bandwidth is enough: the per-file, fsync and serialisation terms "
                f"({m.metadata_seconds + m.fsync_tail_seconds + m.serialize_seconds:.3g} s) already exceed the "
                f"{needed['save_seconds']:.3g} s the window allows"
            )
    elif ev.verdict == "tight":
        reason = (
            f"overhead {fmt_percent(ev.overhead_at_recommended)} is near the {fmt_percent(policy.max_overhead)} budget"
        )
    else:
        reason = f"the optimum fits inside the loss window with overhead {fmt_percent(ev.overhead_at_recommended)}"
    steps = (
        int(ev.recommended_interval_s // policy.iteration_s)
        if policy.iteration_s and math.isfinite(ev.recommended_interval_s)
        else None
    )
    failures_per_day = 86400 / mtbf
    lost = ev.recommended_interval_s / 2 + scenario.save_seconds
    m = scenario.save_model
    storage_limit = (
        f"storage limit at {fmt_rate(m.aggregate_bandwidth_bytes_per_s)} ({m.limited_by}"
        + (f"; {m.aggregate.label}" if m.aggregate.extrapolated else "")
        + ")"
        if m
        else "save time as given"
    )
    if ev.verdict == "infeasible":
        need = needed.get("aggregate_bandwidth_bytes_per_s")
        summary = (
            "no interval meets both the loss window and the overhead budget"
            + (f"; meeting them needs {fmt_rate(need)} aggregate write bandwidth" if need else "")
            + "; see the what-ifs"
        )
    else:
        summary = (
            f"save every {fmt_duration(ev.recommended_interval_s)}"
            + (f" ({steps:,} steps)" if steps is not None else "")
            + f"; expected overhead {fmt_percent(ev.overhead_at_recommended)}, expected lost work "
            f"{fmt_duration(lost)} per failure ({failures_per_day:.2f} failures/day); {storage_limit}"
        )
    rec = Recommendation(
        plan=plan.describe(),
        storage=profile.name,
        storage_class=profile.storage_class,
        mode=policy.mode,
        save_seconds=scenario.save_seconds,
        stall_seconds=scenario.stall_seconds,
        save_model=scenario.save_model,
        mtbf_s=mtbf,
        mtbf_source=mtbf_source,
        restart_s=restart.seconds,
        restart=restart,
        max_loss_s=policy.max_loss_s,
        max_overhead=policy.max_overhead,
        constraints=constraints,
        recommended_steps=steps,
        verdict_reason=reason,
        expected_lost_work_per_failure_s=lost,
        failures_per_day=failures_per_day,
        needed=needed,
        summary=summary,
        assumptions=_assumptions(plan, profile, policy, scenario, restart),
        warnings=_warnings(policy, scenario),
        **ev.model_dump(),
    )
    if data is not None:
        rec.what_if = mitigations.what_ifs(plan, profile, policy, mtbf, data)
    return rec


class Comparison(Model):
    """One plan on every built-in storage class, without what-ifs."""

    kind: Literal["ckplan.comparison"] = "ckplan.comparison"
    plan: str
    recommendations: list[Recommendation]


def compare(plan: CheckpointPlan, policy: Policy, classes: list[StorageProfile]) -> Comparison:
    """`plan` on each of `classes` (the built-in storage classes), without what-ifs."""
    if policy.aggregate_limit_bytes_per_s is not None:
        raise InputError("‹aggregate_limit_bytes_per_s› is the limit of one storage system: give it with ‹storage›")
    profiles = classes
    if policy.save_time_s is not None:
        # a measured save time replaces the save-time model, the only place the storage enters without what-ifs,
        # so every class would give the same row: give one, named for what it rests on
        profiles = [
            profiles[0].model_copy(
                update={
                    "name": "measured (--save-time)",
                    "storage_class": "measured",
                    "source": "measured",
                    "notes": [],
                }
            )
        ]
    return Comparison(plan=plan.describe(), recommendations=[recommend(plan, p, policy) for p in profiles])


def _infeasible_reason(s: Scenario, ev: Evaluation, policy: Policy) -> str:
    if not math.isfinite(ev.shortest_safe_interval_s):
        return "; ".join(s.notes) or "the save cannot complete"
    return (
        f"the shortest safe interval ({fmt_duration(ev.shortest_safe_interval_s)}, {ev.binding_constraint}) "
        f"exceeds what the {fmt_duration(policy.max_loss_s)} loss window allows "
        f"({fmt_duration(max(ev.longest_interval_s, 0))} after a {fmt_duration(s.save_seconds)} persist)"
    )


def _needed(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, s: Scenario) -> dict[str, float]:
    """The save time that meets the window, and the bandwidth and file rate that give it."""
    target = longest_feasible_persist(s.mode, s.stall_seconds, policy)
    if target <= 0:
        return {}
    out = {"save_seconds": target}
    if s.save_model is not None:
        bw = required_bandwidth_on(plan, profile, target, policy.serialize_bytes_per_s)
        if bw is not None:
            out["aggregate_bandwidth_bytes_per_s"], out["node_bandwidth_bytes_per_s"] = bw
        rate = required_file_rate(plan, target / 2)
        if rate > profile.small_files.files_per_s:
            out["files_per_s_per_node"] = rate
    return out


def _warnings(policy: Policy, s: Scenario) -> list[str]:
    """What may kill the job outright: a blocking save that nears the collective timeout while the other ranks wait
    in their next collective. (A load is not warned about: every rank loads at once, so none waits out another's.)"""
    if not math.isfinite(s.stall_seconds):
        return []
    warning = collective_timeout_warning(
        s.stall_seconds, policy.collective_timeout_s, f"a {s.mode} save's blocking part"
    )
    return [warning] if warning else []


def _assumptions(
    plan: CheckpointPlan, profile: StorageProfile, policy: Policy, s: Scenario, restart: RestartCost
) -> list[str]:
    out = [
        f"storage: {profile.name} ({profile.source}"
        f"{', ' + profile.notes[0] if profile.source == 'builtin' and profile.notes else ''})"
    ]
    m = s.save_model
    if m and m.source == "replay":
        out.append(
            f"save time: the profile's replay of this exact plan ({m.write_path} writes), extrapolated by bytes "
            "to full size"
        )
    elif m:
        if m.write_path == "buffered" and profile.page_cache_write:
            terms = (
                "busiest writer: serialise + copy its bytes into the page cache; the flush, beside it: its bytes ÷ "
                "one-stream bandwidth, the busiest node's bytes ÷ node bandwidth, all bytes ÷ aggregate"
            )
        else:
            terms = (
                "busiest writer: serialise + its bytes ÷ one-stream bandwidth; busiest node: its bytes ÷ node "
                "bandwidth at its writer count; all bytes ÷ aggregate"
            )
        out.append(
            f"save time = fixed cost of a collective save + max({terms}) + files ÷ small-file rate + fsync p99, "
            f"on the {m.write_path} write path's curve"
        )
    if m and m.nodes > 1:
        a = m.aggregate
        out.append(f"aggregate bandwidth of {m.nodes:,} nodes at once: {fmt_rate(a.bytes_per_s)}, {a.label}")
        if a.extrapolated:
            out.append(describe_rule())
    if m and m.machine is not None:
        out.append(m.machine.describe() + " (--serialize-bandwidth; `ckplan calibrate`)")
    if m:
        out.extend(m.notes)
    if policy.mode == "async":
        if policy.stall_time_s is not None:
            out.append(f"async stall {policy.stall_time_s:g} s per save (given (--stall-time)), snapshot model skipped")
        else:
            bw = policy.snapshot_bytes_per_s
            source = provenance(bw, DEFAULT_SNAPSHOT_BYTES_PER_S, "--snapshot-bandwidth")
            if bw == DEFAULT_SNAPSHOT_BYTES_PER_S:
                source = "not measured here, " + source
            out.append(f"async snapshot at {bw / 1e9:g} GB/s per GPU (device→pinned host; {source})")
        out.append(
            f"host memory {fmt_bytes(policy.host_memory_bytes)} per node holds the snapshot "
            f"({provenance(policy.host_memory_bytes, DEFAULT_HOST_MEMORY_BYTES, '--host-memory')})"
        )
    out.append(restart.describe() + "; failures: exponential (Daly 2006)")
    if restart.load is not None:
        load = restart.load
        out.append(
            "load at restart = "
            + ("a collective load's fixed cost (DCP, as its save's) + " if load.coordination_seconds else "")
            + "max(busiest reader's deserialisation; its bytes ÷ one-stream read bandwidth; the "
            f"busiest node's distinct bytes ÷ read bandwidth at {load.streams_per_node:.3g} streams; all nodes' bytes ÷ "
            f"aggregate read bandwidth, {load.aggregate.label}): reads and deserialisation overlap; {load.page_cache}"
        )
        out.extend(load.notes)
    return out
