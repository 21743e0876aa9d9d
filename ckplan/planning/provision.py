"""`provision`: the storage a cluster needs, worked backwards from a target.

Intervals follow reliability: the save must be cheap enough that the Daly
optimum for the job's MTBF keeps the stall within the overhead budget.

This is recommend's model solved for a different unknown. For a trial persist
time S, a scenario (sync: stall = S; async: stall = the host snapshot; staged:
stall = the local write, persist = local + S) is evaluated by
scenario.evaluate exactly as `recommend` would; larger S never helps, so the
largest S that meets every target is found by bisection. The bandwidth that
gives S comes from the save-time model's own inversion
(savetime.required_bandwidth): the busiest writer's serialisation and the
collective save's fixed cost come first, and a stated share of S
(METADATA_SHARE) is left for per-file costs, which sets the file rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ckplan.errors import InputError
from ckplan.planning import interval
from ckplan.planning.data import PlanningData
from ckplan.planning.policy import (
    DEFAULT_HOST_MEMORY_BYTES,
    DEFAULT_JOB_FAILURES_PER_DAY,
    DEFAULT_LOCAL_DISK_BYTES,
    DEFAULT_NODE_FAILURES_PER_1000_DAYS,
    DEFAULT_SNAPSHOT_BYTES_PER_S,
    Policy,
    provenance,
)
from ckplan.planning.savetime import (
    coordination_seconds,
    machine_figures,
    required_bandwidth,
    required_read_bandwidth,
    writer_loads,
)
from ckplan.planning.scaling import AggregateEstimate, aggregate_estimate, describe_rule
from ckplan.planning.scenario import (
    OVERHEAD,
    RestartCost,
    Scenario,
    async_scenario,
    async_stall,
    evaluate,
    job_mtbf_with_source,
    restart_cost,
    restart_of,
    staged_stall,
    sync_scenario,
    with_restart,
)
from ckplan.profile import BandwidthPoint, Calibration, Latency, Measurement, SmallFiles, StorageProfile
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import MAX_RATE_BYTES_PER_S, fmt_bytes, fmt_rate

METADATA_SHARE = 0.1  # share of the persist time left for creates/fsyncs of the plan's files
MAX_FILES_PER_S = 1e12  # the most a profile's file rate holds (schema.PerSecond)


class Provision(Model):
    gpus: int
    nodes: int
    checkpoint_bytes: int
    files_per_save: int
    mtbf_s: float
    feasible: bool
    dominant_term: str | None = None
    save_seconds: float | None = None  # the persist time the storage must deliver
    stall_seconds: float | None = None
    interval_s: float | None = None
    burst_bandwidth_bytes_per_s: float | None = None  # aggregate, during a save
    sustained_bandwidth_bytes_per_s: float | None = None  # aggregate, averaged over the interval
    node_bandwidth_bytes_per_s: float | None = None  # the busiest node's share
    files_per_s: float | None = None  # aggregate create+fsync rate
    capacity_bytes: int
    staging_bytes_per_node: int = 0
    expected_ettr: float | None = None
    expected_waste_fraction: float | None = None
    headroom: float | None = None  # given profile's aggregate bandwidth ÷ the burst needed
    # the same at the short end of storage_aggregate's range, where the probe did not reach saturation
    headroom_unsaturated: float | None = None
    restart: RestartCost | None = None  # R used for the goodput: given, or fixed + the load
    # --max-restore: the cold read bandwidth that loads the checkpoint within the restart target's time after the
    # fixed part, for all nodes at once and for the busiest node (savetime.required_read_bandwidth)
    read_bandwidth_bytes_per_s: float | None = None
    node_read_bandwidth_bytes_per_s: float | None = None
    storage_aggregate: AggregateEstimate | None = None  # what the given profile gives the plan's nodes, and how


class ProvisionSweep(Model):
    kind: Literal["ckplan.provision"] = "ckplan.provision"
    plan: str
    mode: str
    targets: dict[str, float]
    keep: int
    storage: str | None = None
    rows: list[Provision]
    assumptions: list[str] = Field(default_factory=list)


def _blocking(
    plan: CheckpointPlan, policy: Policy, mode: str, data: PlanningData, storage: StorageProfile | None
) -> tuple[float, list[str]]:
    """The stall no persist time changes: the snapshot (async) or the local write (staged), infinite with the
    reason where it does not fit; 0 for sync, whose stall is the persist itself."""
    if mode == "async":
        return async_stall(plan, policy)
    if mode == "staged":
        calibration = storage.calibration if storage else None
        stall, _, notes = staged_stall(plan, data.tier("local-nvme"), policy, policy.local_disk_bytes, calibration)
        return stall, notes
    return 0.0, []


def _scenario(mode: str, persist: float, blocking: float, notes: list[str]) -> Scenario:
    """A trial persist time as recommend's scenario: sync stalls for it; async and staged stall for `blocking`."""
    if mode == "sync":
        return Scenario(name="sync", mode="sync", save_seconds=persist, stall_seconds=persist)
    save = blocking + persist if mode == "staged" else persist
    return Scenario(name=mode, mode=mode, save_seconds=save, stall_seconds=blocking, notes=notes)


def _meets(s: Scenario, mtbf: float, policy: Policy, goodput: float | None) -> bool:
    """Targets met with intervals that follow reliability: the stall must fit the overhead budget at the
    Daly optimum itself (or at the loss window's bound, if that is shorter), not at a stretched interval.
    A background persist may stretch the interval (one persist in flight); the loss window still binds."""
    ev, _ = evaluate(s, mtbf, policy)
    return (
        ev.verdict != "infeasible"
        and ev.fits_reliability(OVERHEAD.interval(s, policy))
        and (goodput is None or ev.ettr >= goodput)
    )


def provisioned_profile(
    node_bw: float,
    aggregate_bw: float,
    files_per_s_node: float,
    files_per_s: float,
    shared: bool = True,
    calibration: Calibration | None = None,
) -> StorageProfile:
    """A storage that delivers exactly the provisioned figures at any writer count (and reads as fast)."""
    return StorageProfile(
        name="provisioned",
        source="builtin",
        target_kind="builtin",
        target="provisioned storage",
        fs_type="-",
        storage_class="provisioned",
        shared=shared,
        buffered_bandwidth=[BandwidthPoint(writers=1, bytes_per_s=node_bw)],
        best_write_bytes_per_s=node_bw,
        aggregate_limit_bytes_per_s=aggregate_bw,
        aggregate_files_per_s=files_per_s,
        small_files=SmallFiles(
            files_per_s=files_per_s_node,
            ops_per_s=4 * files_per_s_node,
            file_bytes_min=4096,
            file_bytes_max=4096,
            writers=1,
        ),
        fsync_latency=Latency(p50_s=0, p99_s=0, p999_s=0),
        calibration=calibration,
        measurement=Measurement(tool="provision", date="-", host="-", preset="-", duration_s=0),
    )


def provision_one(
    plan: CheckpointPlan,
    policy: Policy,
    mode: str,
    goodput: float | None,
    keep: int,
    data: PlanningData,
    storage: StorageProfile | None = None,
    max_restore_s: float | None = None,
) -> Provision:
    """The storage that lets `plan` meet the goodput target (or the loss window alone) in `mode`: the longest persist
    time that still meets it, the bandwidth and file rate that give that time, and that storage checked forward."""
    mtbf, _ = job_mtbf_with_source(plan, policy)
    restart, reads = _restart(plan, policy, storage, max_restore_s)
    machine = machine_figures(storage.calibration if storage else None, policy.serialize_bytes_per_s)
    # the busiest writer's serialiser and a collective save's fixed cost: time no storage can shorten
    serialize = max(s for _, s in writer_loads(plan, plan.busiest_node.node, machine.rates()).values())
    coordination = coordination_seconds(plan, machine)
    blocking, notes = _blocking(plan, policy, mode, data, storage)
    base: dict[str, Any] = dict(
        gpus=plan.setup.gpus,
        nodes=plan.setup.nodes,
        checkpoint_bytes=plan.total_bytes,
        files_per_save=plan.file_count,
        mtbf_s=mtbf,
        capacity_bytes=(keep + 1) * plan.total_bytes,  # the newest save is written before the oldest is deleted
        staging_bytes_per_node=plan.busiest_node.bytes if mode in ("async", "staged") else 0,
    )
    floor = (serialize + coordination) / (1 - METADATA_SHARE) + 1e-6  # no storage can finish faster than the serialiser
    if reads is None and max_restore_s is not None:
        return Provision(
            feasible=False,
            dominant_term=f"restart target: deserialising the busiest reader's bytes alone takes longer than the "
            f"{max_restore_s - policy.restart_fixed_s:.3g} s the target leaves after the fixed part",
            **base,
        )
    if reads is not None:
        base["read_bandwidth_bytes_per_s"], base["node_read_bandwidth_bytes_per_s"] = reads

    inverse = _Inverse(plan, serialize, coordination, storage.calibration if storage else None)

    def trial(persist: float) -> tuple[Scenario, Policy, RestartCost]:
        """A persist time's scenario, with R: given, the target, or fixed + the load on the storage that gives it."""
        cost = restart or restart_cost(plan, inverse.storage(persist), policy)
        return _scenario(mode, persist, blocking, notes), with_restart(policy, cost), cost

    def meets(persist: float) -> bool:
        s, p, _ = trial(persist)
        return _meets(s, mtbf, p, goodput)

    if not meets(floor):
        s, p, cost = trial(floor)
        return Provision(feasible=False, dominant_term=_dominant(p, s, mtbf, goodput), restart=cost, **base)
    persist = _longest(meets, floor)
    burst, node_bw, files = inverse.needs(persist)
    _, policy, cost = trial(persist)
    check = _forward(plan, inverse.storage(persist), policy, mode, blocking, notes)
    ev, _ = evaluate(check, mtbf, policy)
    have = _measured_aggregate(plan, storage, policy)
    return Provision(
        feasible=True,
        save_seconds=persist,
        stall_seconds=check.stall_seconds,
        interval_s=ev.recommended_interval_s,
        burst_bandwidth_bytes_per_s=burst,
        sustained_bandwidth_bytes_per_s=plan.total_bytes / ev.recommended_interval_s,
        node_bandwidth_bytes_per_s=node_bw,
        files_per_s=files,
        expected_ettr=ev.ettr,
        expected_waste_fraction=ev.expected_waste_fraction,
        headroom=have.bytes_per_s / burst if have is not None else None,
        headroom_unsaturated=(
            have.unsaturated_bytes_per_s / burst
            if have is not None and have.unsaturated_bytes_per_s is not None
            else None
        ),
        storage_aggregate=have,
        restart=cost,
        **base,
    )


@dataclass(frozen=True)
class _Inverse:
    """The save-time model inverted for a plan: what storage gives a persist time, past the time no storage can
    shorten (the busiest writer's serialiser, a collective save's fixed cost)."""

    plan: CheckpointPlan
    serialize_s: float
    coordination_s: float
    calibration: Calibration | None

    def needs(self, persist: float) -> tuple[float, float, float]:
        """(aggregate bytes/s, busiest node's bytes/s, files/s) that give this persist time."""
        needed = required_bandwidth(
            self.plan,
            persist,
            fixed_seconds=persist * METADATA_SHARE + self.coordination_s,
            writer_cpu_seconds=self.serialize_s,
            overlap=False,
        )
        assert needed is not None  # persist ≥ floor leaves time for the bytes
        return needed[0], needed[1], self.plan.file_count / (persist * METADATA_SHARE)

    def storage(self, persist: float) -> StorageProfile:
        """The storage that gives this persist time, reading as fast as it writes. Near the floor the figures pass
        what a profile holds (1 PB/s, 10^12 files/s): capped there, where a load is its deserialisation alone."""
        burst, node_bw, files = (min(x, MAX_RATE_BYTES_PER_S) for x in self.needs(persist))
        node_files = min(self.plan.busiest_node.files / (persist * METADATA_SHARE), MAX_FILES_PER_S)
        return provisioned_profile(
            node_bw, burst, node_files, min(files, MAX_FILES_PER_S), calibration=self.calibration
        )


def _forward(
    plan: CheckpointPlan, profile: StorageProfile, policy: Policy, mode: str, blocking: float, notes: list[str]
) -> Scenario:
    """The provisioned storage, checked by the forward model: the same scenario recommend would build on it."""
    check = async_scenario(plan, profile, policy) if mode == "async" else sync_scenario(plan, profile, policy)
    return _scenario(mode, check.save_seconds, blocking, notes) if mode == "staged" else check


def _longest(meets: Callable[[float], bool], floor: float) -> float:
    """The longest persist time that still `meets` the target, from `floor` (which meets it): doubled until it
    fails, then bisected."""
    lo, hi = floor, floor
    while meets(hi * 2) and hi < 1e7:
        hi *= 2
    hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


def _measured_aggregate(
    plan: CheckpointPlan, storage: StorageProfile | None, policy: Policy
) -> AggregateEstimate | None:
    """What the measured storage gives the plan's nodes at once: the save-time model's own aggregate (the curve over
    hosts, a stated model beyond it, the system's limit), not the per-node figure times the nodes."""
    if storage is None:
        return None
    return aggregate_estimate(
        storage,
        storage.bandwidth_at(plan.busiest_node.writers, plan.write_path),
        plan.nodes_writing,
        policy.aggregate_limit_bytes_per_s,
    )


def _restart(
    plan: CheckpointPlan, policy: Policy, storage: StorageProfile | None, max_restore_s: float | None
) -> tuple[RestartCost | None, tuple[float, float] | None]:
    """R for the goodput where it does not depend on the storage bought, and with a restart target the read
    bandwidth it needs. A target makes R the target itself (the storage bought loads within it); None: R = fixed +
    the load on the storage each trial persist time needs (provision_one), as recommend would predict it there."""
    if max_restore_s is None:
        if policy.restart_s is not None or plan.restore is None:
            return restart_cost(plan, None, policy), None
        return None, None
    fixed = policy.restart_fixed_s
    if max_restore_s <= fixed:
        raise InputError(
            f"‹max_restore› ({max_restore_s:g} s) leaves no time for the load after the restart's fixed part "
            f"({fixed:g} s, ‹restart_fixed_s›)"
        )
    if policy.restart_s is not None:
        raise InputError("‹max_restore› is a target for the restart and ‹restart_s› a measured one: give one of them")
    cost = restart_cost(plan, storage, policy)
    target = RestartCost(
        seconds=max_restore_s,
        fixed_seconds=fixed,
        fixed_source=cost.fixed_source,
        source=f"the restart target (--max-restore): the load gets {max_restore_s - fixed:g} s after the fixed part",
    )
    return target, required_read_bandwidth(plan, max_restore_s - fixed, storage.calibration if storage else None)


def _dominant(policy: Policy, s: Scenario, mtbf: float, goodput: float | None) -> str:
    """Why no bandwidth is enough: the term that fails even with an instant persist (`s`, at the floor)."""
    if not math.isfinite(s.stall_seconds):
        return "; ".join(s.notes) or "the save cannot complete"
    ev, _ = evaluate(s, mtbf, policy)
    restart = restart_of(policy)
    ceiling = interval.ettr_ceiling(restart, mtbf)
    if goodput is not None and ceiling < goodput:
        return (
            f"restart cost: {restart:.0f} s per failure at a {mtbf / 3600:.2f} h MTBF caps ETTR at "
            f"{ceiling:.1%} before any save; faster storage cannot fix that"
        )
    needs = OVERHEAD.interval(s, policy)
    if needs > ev.longest_interval_s:
        what = (
            "the host snapshot"
            if s.mode == "async"
            else "the local staging write"
            if s.mode == "staged"
            else "the busiest writer's serialisation"
        )
        return (
            f"loss window: {what} ({s.stall_seconds:.3g} s) needs τ ≥ {needs:.3g} s "
            f"for the overhead budget, longer than the {policy.max_loss_s:.0f} s window allows"
        )
    if goodput is not None and ev.ettr < goodput:
        return f"goodput: even an instant persist gives ETTR {ev.ettr:.1%} with these failure rates and this stall"
    return "the serialiser of the busiest writer is slower than the targets allow"


MAX_SWEEP_SIZES = 64  # cluster sizes in one sweep: each is a whole plan in memory, and a chart shows no more


def check_sweep_sizes(count: int) -> None:
    """Refuse a sweep of more cluster sizes than MAX_SWEEP_SIZES, before its plans are built."""
    if not 1 <= count <= MAX_SWEEP_SIZES:
        raise InputError(f"‹gpus› lists {count:,} cluster sizes; a sweep takes 1 to {MAX_SWEEP_SIZES}")


def _sweep_assumptions(rows: list[Provision], policy: Policy, mode: str, storage: StorageProfile | None) -> list[str]:
    failures = (
        f"job MTBF {policy.mtbf_s:g} s (given (--mtbf))"
        if policy.mtbf_s is not None
        else f"failures: {policy.node_failures_per_1000_days:g} per 1,000 node-days "
        f"({provenance(policy.node_failures_per_1000_days, DEFAULT_NODE_FAILURES_PER_1000_DAYS, '--node-failure-rate')})"
        f" + {policy.job_failures_per_day:g} per job-day "
        f"({provenance(policy.job_failures_per_day, DEFAULT_JOB_FAILURES_PER_DAY, '--job-failure-rate')})"
    )
    assumptions = [
        f"persist time split: {1 - METADATA_SHARE:.0%} for bytes, {METADATA_SHARE:.0%} for per-file creates and fsyncs",
        "capacity = (keep + 1) × one checkpoint: the newest is written before the oldest is deleted",
        failures,
        *dict.fromkeys(
            f"{r.gpus:,} GPUs: {r.restart.describe()}" if len(rows) > 1 else r.restart.describe()
            for r in rows
            if r.restart is not None
        ),
        "bandwidth is what the storage must sustain at the plan's writers per node, as measured by `ckplan probe`",
        machine_figures(storage.calibration if storage else None, policy.serialize_bytes_per_s).describe(),
    ]
    if storage is not None:
        if any(r.storage_aggregate is not None and r.storage_aggregate.extrapolated for r in rows):
            assumptions.append("headroom: " + describe_rule())
        assumptions += [
            f"{storage.name} gives {r.storage_aggregate.nodes:,} nodes {fmt_rate(r.storage_aggregate.bytes_per_s)}: "
            f"{r.storage_aggregate.label}"
            for r in rows
            if r.storage_aggregate is not None
        ]
    if mode == "async":
        bw = policy.snapshot_bytes_per_s
        assumptions += [
            f"async snapshot at {bw / 1e9:g} GB/s per GPU "
            f"({provenance(bw, DEFAULT_SNAPSHOT_BYTES_PER_S, '--snapshot-bandwidth')})",
            f"host memory {fmt_bytes(policy.host_memory_bytes)} per node holds the snapshot "
            f"({provenance(policy.host_memory_bytes, DEFAULT_HOST_MEMORY_BYTES, '--host-memory')})",
        ]
    if mode == "staged":
        disk = provenance(policy.local_disk_bytes, DEFAULT_LOCAL_DISK_BYTES, None)
        assumptions.append(
            f"staged: the local write uses the built-in local-nvme class, {fmt_bytes(policy.local_disk_bytes)} "
            f"per node ({disk})"
        )
    return assumptions


def provision_sweep(
    plans: list[CheckpointPlan],
    policy: Policy,
    mode: str,
    goodput: float | None,
    keep: int,
    data: PlanningData,
    storage: StorageProfile | None = None,
    max_restore_s: float | None = None,
) -> ProvisionSweep:
    check_sweep_sizes(len(plans))
    if mode not in ("sync", "async", "staged"):
        raise InputError(f"‹mode› must be sync, async or staged, got {mode!r}")
    if keep < 1:
        raise InputError("‹keep› must be ≥ 1")
    if goodput is not None and not 0 < goodput < 1:
        raise InputError("‹target_goodput› must lie between 0% and 100%")
    if policy.aggregate_limit_bytes_per_s is not None and storage is None:
        raise InputError(
            "‹aggregate_limit_bytes_per_s› is the limit of the system whose headroom is checked: give it with ‹storage›"
        )
    if mode == "async" and goodput is None:
        # an async save's stall is the snapshot alone, so the overhead budget cannot bound its persist: only the
        # loss window does, and the largest persist it allows (half the window) adds that much rework per failure,
        # which made async look worse than sync (ETTR 64.9% against sync's 83.8% at 16k GPUs)
        raise InputError(
            "async provision needs ‹target_goodput›: without it only the loss window bounds the background "
            "persist, and a persist of half the window costs more rework than a sync save"
        )
    targets = {"max_overhead": policy.max_overhead, "max_loss_s": policy.max_loss_s}
    if goodput is not None:
        targets["target_goodput"] = goodput
    if max_restore_s is not None:
        targets["max_restore_s"] = max_restore_s
    rows = [provision_one(p, policy, mode, goodput, keep, data, storage, max_restore_s) for p in plans]
    assumptions = _sweep_assumptions(rows, policy, mode, storage)
    return ProvisionSweep(
        plan=plans[0].describe(world=False),
        mode=mode,
        targets=targets,
        keep=keep,
        storage=storage.name if storage else None,
        rows=rows,
        assumptions=assumptions,
    )
