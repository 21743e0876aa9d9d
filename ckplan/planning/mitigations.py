"""What-ifs: each mitigation applied alone, then the best combination.

Each mitigation changes one thing about a save and is evaluated with the same
constraints and Daly model as the plan itself (recommend.evaluate).
"""

from __future__ import annotations

import itertools
import math

from ckplan import catalog
from ckplan.planning.compression import CompressionDefault, compression_default
from ckplan.planning.policy import Policy
from ckplan.planning.recommend import Scenario, WhatIf, async_scenario, staged_scenario, sync_scenario
from ckplan.profile import StorageProfile
from ckplan.sizing.plan import CheckpointPlan

SHM_SHARE_OF_HOST_MEMORY = 0.5  # tmpfs defaults to half of RAM


def _compressed(plan: CheckpointPlan, codec: CompressionDefault) -> dict:
    busiest = max(plan.nodes, key=lambda n: n.bytes)
    return {"total_bytes": plan.total_bytes / codec.ratio, "node_bytes": busiest.bytes / codec.ratio}


def _merged(plan: CheckpointPlan) -> dict:
    busiest = max(plan.nodes, key=lambda n: n.bytes)
    return {"node_files": busiest.writers, "total_files": plan.writers}


def _changed(plan: CheckpointPlan, fraction: float) -> dict:
    busiest = max(plan.nodes, key=lambda n: n.bytes)
    return {"total_bytes": plan.total_bytes * fraction, "node_bytes": busiest.bytes * fraction}


def build(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, *, stage: str | None = None,
          compress: bool = False, merge: bool = False, incremental: bool = False, storage: StorageProfile | None = None,
          name: str) -> Scenario:
    """One scenario with the chosen mitigations applied together."""
    overrides: dict = {}
    notes: list[str] = []
    codec = compression_default()
    if compress:
        overrides.update(_compressed(plan, codec))
        notes.append(f"{codec.codec} at {codec.ratio:.2f}× and {codec.bytes_per_s_per_core / 1e6:.0f} MB/s per core "
                     f"(measured by `ckplan compress-test`, {codec.measured})")
    if incremental:
        base = overrides.get("total_bytes", plan.total_bytes) / plan.total_bytes
        overrides.update(_changed(plan, policy.changed_fraction * base))
        notes.append(f"writes the changed {policy.changed_fraction:.0%} only")
    if merge:
        overrides.update(_merged(plan))
        notes.append("one file per writer")
    target = storage or profile
    fast = policy if not policy.save_time_s else policy.model_copy(update={"save_time_s": None})
    if stage:
        tier = catalog.storage_classes()[stage]
        capacity = policy.host_memory_bytes * SHM_SHARE_OF_HOST_MEMORY if stage == "tmpfs" else policy.local_disk_bytes
        s = staged_scenario(plan, target, tier, fast, capacity, name)
    elif policy.mode == "async" or name.startswith("async"):
        s = async_scenario(plan, target, fast, name, **overrides)
    else:
        s = sync_scenario(plan, target, fast, name, **overrides)
    if compress and math.isfinite(s.save_seconds):
        # compression runs in the writer's thread: the slower of the codec and the write decides
        codec_s = plan.bytes_per_rank_max / codec.bytes_per_s_per_core
        save = max(s.save_seconds, codec_s)
        stall = save if s.mode == "sync" else s.stall_seconds
        if codec_s > s.save_seconds:
            notes.append(f"the codec ({codec_s:.3g} s per writer) is slower than the write")
        s = s.model_copy(update={"save_seconds": save, "stall_seconds": stall})
    return s.model_copy(update={"notes": s.notes + notes})


def _faster_class(plan, profile, policy) -> StorageProfile | None:
    shared = [p for p in catalog.storage_classes().values() if p.shared and p.name != profile.name]
    ranked = sorted(shared, key=lambda p: sync_scenario(plan, p, policy.model_copy(update={"save_time_s": None})).save_seconds)
    current = sync_scenario(plan, profile, policy).save_seconds
    return next((p for p in ranked if sync_scenario(plan, p, policy.model_copy(update={"save_time_s": None})).save_seconds < current), None)


def what_ifs(plan: CheckpointPlan, profile: StorageProfile, policy: Policy, mtbf: float, evaluate) -> list[WhatIf]:
    rows: list[tuple[Scenario, bool]] = []
    alone = {
        "async save": dict(name="async save"),
        "/dev/shm staging, drain to target": dict(stage="tmpfs", name="/dev/shm staging"),
        "local NVMe staging, drain to target": dict(stage="local-nvme", name="local NVMe staging"),
        "compression": dict(compress=True, name="compression"),
        "merge shards (one file per writer)": dict(merge=True, name="merge shards"),
        f"incremental ({policy.changed_fraction:.0%} changed)": dict(incremental=True, name="incremental"),
    }
    for label, kwargs in alone.items():
        rows.append((build(plan, profile, policy, **kwargs).model_copy(update={"name": label}), False))
    faster = _faster_class(plan, profile, policy)
    if faster is not None:
        rows.append((build(plan, profile, policy, storage=faster, name=f"faster storage: {faster.name}"), False))
    best = _best_combination(plan, profile, policy, mtbf, evaluate)
    if best is not None:
        rows.append((best, True))
    out = []
    for s, _ in rows:
        ev, _ = evaluate(s, mtbf, policy)
        out.append(WhatIf(mitigation=s.name, save_seconds=s.save_seconds, stall_seconds=s.stall_seconds,
                          shortest_safe_interval_s=ev.shortest_safe_interval_s, recommended_interval_s=ev.recommended_interval_s,
                          verdict=ev.verdict, expected_waste_fraction=ev.expected_waste_fraction, notes=s.notes))
    return out


def _best_combination(plan, profile, policy, mtbf, evaluate) -> Scenario | None:
    candidates = []
    for stage, compress, merge in itertools.product((None, "async", "tmpfs", "local-nvme"), (False, True), (False, True)):
        if stage is None and not compress and not merge:
            continue
        parts = [p for p, on in (({"async": "async save", "tmpfs": "/dev/shm staging", "local-nvme": "NVMe staging"}.get(stage or ""), stage),
                                 ("compression", compress), ("merged shards", merge)) if on]
        name = "best combination: " + " + ".join(parts)
        s = build(plan, profile, policy, stage=stage if stage in ("tmpfs", "local-nvme") else None,
                  compress=compress, merge=merge, name=("async " if stage == "async" else "") + name)
        s = s.model_copy(update={"name": name})
        ev, _ = evaluate(s, mtbf, policy)
        # waste rounded to 0.01%: a mitigation must earn its place in the combination
        candidates.append((ev.verdict == "infeasible", round(ev.expected_waste_fraction, 4), len(parts), s))
    if not candidates:
        return None
    return min(candidates, key=lambda c: c[:3])[3]
