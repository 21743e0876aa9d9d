"""From a plan, a storage profile and a policy to a recommendation: the plan's scenario evaluated
(planning/scenario.py owns the rules), why it is or is not feasible, what would fix it, and the what-ifs."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from ckplan.errors import InputError
from ckplan.planning import mitigations
from ckplan.planning.data import PlanningData
from ckplan.planning.mitigations import WhatIf
from ckplan.planning.policy import (
    DEFAULT_DCP_FIXED_S,
    DEFAULT_HOST_MEMORY_BYTES,
    DEFAULT_SNAPSHOT_BYTES_PER_S,
    Policy,
    provenance,
)
from ckplan.planning.savetime import SaveTime, required_bandwidth_on, required_file_rate
from ckplan.planning.scaling import NOT_SATURATED, describe_rule
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
from ckplan.version import __version__


class MachineDefaults(Model):
    """The machine figures a recommendation took from the named defaults (planning/defaults.py) for want of a
    calibration of this machine in the profile, and how much of the prediction rests on them. A serialiser's speed
    is the CPU's, and calibrations differ by several times between machines (torch.save 1.16 GB/s per core by
    default, 3.6 GB/s in `ckplan calibrate --quick` on the machine these lines were written on): where the busiest
    writer serialises for half of a predicted save, the default alone can move it by about half."""

    # each default the prediction used: "serialiser torch.save" (bytes/s per writer core), "deserialiser dcp"
    # (bytes/s per reader core), "DCP fixed cost" (seconds per save)
    figures: dict[str, float]
    save_seconds: float  # the part of the predicted save these defaults give (serialisation, fixed cost)
    save_share: float  # that part ÷ the predicted save
    load_seconds: float  # the part of the predicted load at restart they give (deserialisation, fixed cost)
    note: str  # the labelled line the table, the assumptions and the report show


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
    # None where every machine figure the prediction uses was measured here or given
    machine_defaults: MachineDefaults | None = None

    def save_span(self) -> str:
        """The save time as shown: the model's range where the probe did not reach saturation, else one figure."""
        m = self.save_model
        return m.span() if m is not None and m.seconds == self.save_seconds else fmt_duration(self.save_seconds)


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
    summary = _summary(ev, scenario.save_model, needed, steps, lost, failures_per_day)
    defaults = machine_defaults(plan, profile, scenario, restart)
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
        assumptions=([defaults.note] if defaults else []) + _assumptions(plan, profile, policy, scenario, restart),
        warnings=_warnings(policy, scenario),
        machine_defaults=defaults,
        **ev.model_dump(),
    )
    if data is not None:
        rec.what_if = mitigations.what_ifs(plan, profile, policy, mtbf, data)
    return rec


def _summary(
    ev: Evaluation,
    m: SaveTime | None,
    needed: dict[str, float],
    steps: int | None,
    lost: float,
    failures_per_day: float,
) -> str:
    """The recommendation in one sentence: the interval and what it costs, or why there is none."""
    if ev.verdict == "infeasible":
        need = needed.get("aggregate_bandwidth_bytes_per_s")
        return (
            "no interval meets both the loss window and the overhead budget"
            + (f"; meeting them needs {fmt_rate(need)} aggregate write bandwidth" if need else "")
            + "; see the what-ifs"
        )
    storage_limit = (
        f"storage limit at {fmt_rate(m.aggregate_bandwidth_bytes_per_s)} ({m.limited_by}"
        + (f"; {m.aggregate.label}" if m.aggregate.extrapolated else "")
        + ")"
        if m
        else "save time as given"
    )
    return (
        f"save every {fmt_duration(ev.recommended_interval_s)}"
        + (f" ({steps:,} steps)" if steps is not None else "")
        + f"; expected overhead {fmt_percent(ev.overhead_at_recommended)}, expected lost work "
        f"{fmt_duration(lost)} per failure ({failures_per_day:.2f} failures/day); {storage_limit}"
    )


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


def machine_defaults(
    plan: CheckpointPlan, profile: StorageProfile, s: Scenario, restart: RestartCost
) -> MachineDefaults | None:
    """The named defaults the prediction of `plan` on `profile` used for this machine's figures, and the seconds of
    the save and the load that rest on them; None where it used none (all measured here or given, or no model)."""
    figures: dict[str, float] = {}
    save_part = load_part = 0.0
    m = s.save_model
    if m is not None and m.machine is not None:
        formats = {fmt for w in plan.writer_bytes(plan.busiest_node.node).values() for fmt in w}
        serialisers = {
            fmt: f.value
            for fmt, f in m.machine.serialize_bytes_per_s.items()
            if fmt in formats and f.source == "default"
        }
        figures |= {f"serialiser {fmt}": v for fmt, v in serialisers.items()}
        save_part += m.serialize_seconds if serialisers else 0.0
        if plan.coordinated_save and m.machine.coordination_seconds.source == "default":
            figures["DCP fixed cost"] = m.machine.coordination_seconds.value
            save_part += m.coordination_seconds
    load = restart.load
    if load is not None and load.source == "model" and plan.restore is not None:
        read = plan.restore.rank_bytes_by_format
        deserialisers = {fmt: f.value for fmt, f in load.deserializers.items() if fmt in read and f.source == "default"}
        figures |= {f"deserialiser {fmt}": v for fmt, v in deserialisers.items()}
        load_part += load.deserialize_seconds if deserialisers else 0.0
        if load.coordination_seconds and (profile.calibration is None or profile.calibration.dcp_fixed_seconds is None):
            figures.setdefault("DCP fixed cost", DEFAULT_DCP_FIXED_S)
            load_part += load.coordination_seconds
    if not figures:
        return None
    failed = [f for f in profile.failed_phases if f.phase == "calibration"]
    why = (
        "a built-in class carries none"
        if profile.source == "builtin"
        else f"its probe's calibration failed: {failed[0].error}"
        if failed
        else "it was probed without PyTorch or with --no-calibrate"
        if profile.calibration is None
        else "its calibration lacks them"
    )
    shown = ", ".join(
        f"{name} {v:.3g} s per save" if name == "DCP fixed cost" else f"{name} {v / 1e9:.3g} GB/s per core"
        for name, v in figures.items()
    )
    save_s = m.seconds if m is not None else s.save_seconds
    share = save_part / save_s if save_s > 0 and math.isfinite(save_s) else 0.0
    parts = [f"{save_part:.3g} s of the {save_s:.3g} s predicted save ({share:.0%})"]
    if load is not None and load_part:
        parts.append(f"{load_part:.3g} s of the {load.seconds:.3g} s load at restart")
    note = (
        f"NOT MEASURED on this machine: {shown} are the named defaults (planning/defaults.py), as the profile "
        f"{profile.name} has no calibration ({why}). They give {' and '.join(parts)}: this machine's own speed "
        "moves that part in proportion (calibrations differ by several times between machines). Measure them: probe "
        "again with PyTorch installed (pip install 'ckplan[torch]'), or give `ckplan calibrate`'s serialiser figures "
        "with --serialize-bandwidth"
    )
    return MachineDefaults(figures=figures, save_seconds=save_part, save_share=share, load_seconds=load_part, note=note)


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
    in their next collective (a load is not warned about: every rank loads at once, so none waits out another's);
    and a save time that is a range because the probe did not reach saturation."""
    out = []
    m = s.save_model
    if m is not None and m.shortest_seconds is not None:
        out.append(
            f"save time {m.span()}, not one figure: {NOT_SATURATED} (the intervals use the long end, the aggregate "
            "held flat)"
        )
    if math.isfinite(s.stall_seconds):
        warning = collective_timeout_warning(
            s.stall_seconds, policy.collective_timeout_s, f"a {s.mode} save's blocking part"
        )
        out += [warning] if warning else []
    return out


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
