"""What-ifs: each mitigation applied alone, then the best combination.

Each mitigation changes one thing about a save and is evaluated with the same
constraints and Daly model as the plan itself (scenario.evaluate). The staging
tiers, the faster classes and the codec come in as `PlanningData`.
"""

from __future__ import annotations

import itertools
import math

from pydantic import Field

from ckplan.planning.compression import CompressionDefault
from ckplan.planning.data import PlanningData
from ckplan.planning.policy import Policy
from ckplan.planning.savetime import SaveOverrides
from ckplan.planning.scenario import Scenario, async_scenario, evaluate, staged_scenario, sync_scenario
from ckplan.profile import StorageProfile
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan

SHM_SHARE_OF_HOST_MEMORY = 0.5  # tmpfs defaults to half of RAM


class WhatIf(Model):
    mitigation: str
    save_seconds: float
    stall_seconds: float
    shortest_safe_interval_s: float
    recommended_interval_s: float
    verdict: str
    expected_waste_fraction: float
    notes: list[str] = Field(default_factory=list)


def _compressed(plan: CheckpointPlan, codec: CompressionDefault) -> SaveOverrides:
    return {"total_bytes": plan.total_bytes / codec.ratio, "node_bytes": plan.busiest_node.bytes / codec.ratio}


def _merged(plan: CheckpointPlan) -> SaveOverrides:
    return {"node_files": plan.busiest_node.writers, "total_files": plan.writers}


def _changed(plan: CheckpointPlan, fraction: float) -> SaveOverrides:
    return {"total_bytes": plan.total_bytes * fraction, "node_bytes": plan.busiest_node.bytes * fraction}


STAGES = {"async": "async save", "tmpfs": "/dev/shm staging", "local-nvme": "local NVMe staging"}


def build(
    plan: CheckpointPlan,
    profile: StorageProfile,
    policy: Policy,
    data: PlanningData,
    *,
    how: str | None = None,
    compress: bool = False,
    merge: bool = False,
    incremental: bool = False,
    storage: StorageProfile | None = None,
    name: str,
) -> Scenario:
    """One scenario with the chosen mitigations applied together.

    `how`: None keeps the policy's mode; 'async' saves asynchronously; 'tmpfs' or 'local-nvme'
    stage on that node-local tier and drain to the target. `policy` must use the save-time
    model (no --save-time): every mitigation changes the save.
    """
    overrides: SaveOverrides = {}
    notes: list[str] = []
    codec = data.codec
    if compress:
        overrides.update(_compressed(plan, codec))
        notes.append(
            f"{codec.codec} at {codec.ratio:.2f}× and {codec.bytes_per_s_per_core / 1e6:.0f} MB/s per core "
            f"(measured by `ckplan compress-test`, {codec.measured})"
        )
    if incremental:
        base = overrides.get("total_bytes", plan.total_bytes) / plan.total_bytes
        overrides.update(_changed(plan, policy.changed_fraction * base))
        notes.append(f"writes the changed {policy.changed_fraction:.0%} only")
    if merge:
        overrides.update(_merged(plan))
        notes.append("one file per writer")
    target = storage or profile
    if storage is not None:  # another system: the limit given for the user's own does not apply to it
        policy = policy.model_copy(update={"aggregate_limit_bytes_per_s": None})
    if how in ("tmpfs", "local-nvme"):
        tier = data.tier(how)
        capacity = policy.host_memory_bytes * SHM_SHARE_OF_HOST_MEMORY if how == "tmpfs" else policy.local_disk_bytes
        s = staged_scenario(plan, target, tier, policy, capacity, name, **overrides)
    elif how == "async" or (how is None and policy.mode == "async"):
        s = async_scenario(plan, target, policy, name, **overrides)
    else:
        s = sync_scenario(plan, target, policy, name, **overrides)
    if compress and math.isfinite(s.save_seconds):
        # compression runs in the writer's thread: the slower of the codec and the write decides
        codec_s = plan.bytes_per_rank_max / codec.bytes_per_s_per_core
        save = max(s.save_seconds, codec_s)
        stall = save if s.mode == "sync" else s.stall_seconds
        if codec_s > s.save_seconds:
            notes.append(f"the codec ({codec_s:.3g} s per writer) is slower than the write")
        s = s.model_copy(update={"save_seconds": save, "stall_seconds": stall})
    return s.model_copy(update={"notes": s.notes + notes})


def _faster_class(
    plan: CheckpointPlan, profile: StorageProfile, policy: Policy, data: PlanningData
) -> StorageProfile | None:
    """The fastest shared built-in class that saves faster than the current target, if any."""
    current = sync_scenario(plan, profile, policy).save_seconds
    others = policy.model_copy(update={"aggregate_limit_bytes_per_s": None})  # the given limit is the user's system's
    timed = [
        (sync_scenario(plan, p, others).save_seconds, p)
        for p in data.storage_classes.values()
        if p.shared and p.name != profile.name
    ]
    best = min(timed, key=lambda t: t[0], default=None)
    return best[1] if best is not None and best[0] < current else None


def what_ifs(
    plan: CheckpointPlan, profile: StorageProfile, policy: Policy, mtbf: float, data: PlanningData
) -> list[WhatIf]:
    # what-ifs change the save, so they use the model even when the plan's save time was given
    modelled = policy.model_copy(update={"save_time_s": None, "stall_time_s": None})
    scenarios = [
        build(plan, profile, modelled, data, how="async", name="async save"),
        build(plan, profile, modelled, data, how="tmpfs", name="/dev/shm staging, drain to target"),
        build(plan, profile, modelled, data, how="local-nvme", name="local NVMe staging, drain to target"),
        build(plan, profile, modelled, data, compress=True, name="compression"),
        build(plan, profile, modelled, data, merge=True, name="merge shards (one file per writer)"),
        build(
            plan, profile, modelled, data, incremental=True, name=f"incremental ({policy.changed_fraction:.0%} changed)"
        ),
    ]
    faster = _faster_class(plan, profile, modelled, data)
    if faster is not None:
        scenarios.append(build(plan, profile, modelled, data, storage=faster, name=f"faster storage: {faster.name}"))
    scenarios.append(_best_combination(plan, profile, modelled, mtbf, data))
    out = []
    for s in scenarios:
        ev, _ = evaluate(s, mtbf, policy)
        out.append(
            WhatIf(
                mitigation=s.name,
                save_seconds=s.save_seconds,
                stall_seconds=s.stall_seconds,
                shortest_safe_interval_s=ev.shortest_safe_interval_s,
                recommended_interval_s=ev.recommended_interval_s,
                verdict=ev.verdict,
                expected_waste_fraction=ev.expected_waste_fraction,
                notes=s.notes,
            )
        )
    return out


def _best_combination(
    plan: CheckpointPlan, profile: StorageProfile, policy: Policy, mtbf: float, data: PlanningData
) -> Scenario:
    candidates = []
    for how, compress, merge in itertools.product((None, *STAGES), (False, True), (False, True)):
        parts = [STAGES[how]] if how else []
        parts += ["compression"] * compress + ["merged shards"] * merge
        if not parts:
            continue
        s = build(
            plan,
            profile,
            policy,
            data,
            how=how,
            compress=compress,
            merge=merge,
            name="best combination: " + " + ".join(parts),
        )
        ev, _ = evaluate(s, mtbf, policy)
        # waste rounded to 0.01%: a mitigation must earn its place in the combination
        candidates.append((ev.verdict == "infeasible", round(ev.expected_waste_fraction, 4), len(parts), s))
    return min(candidates, key=lambda c: c[:3])[3]
