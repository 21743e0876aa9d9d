"""`ckplan validate`: real saves of one node's share of a plan, against the prediction."""

from __future__ import annotations

from pathlib import Path

from ckplan import filesystem
from ckplan import scratch as scratch_area
from ckplan.errors import EnvironmentProblem, InputError
from ckplan.frameworks import framework_of
from ckplan.profile import Spread, StorageProfile
from ckplan.savers.restore import LOADERS, NodeLoads, load_saved, node_loads
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import check_scale, fmt_bytes
from ckplan.validate.model import (
    RestoreValidation,
    Validation,
    diagnose,
    diagnose_load,
    judge,
    scaled_load_prediction,
    scaled_prediction,
)

MAX_REPEATS = 100  # saves timed per validation: past this the median moves less than the target's own drift


def validate(
    path: Path,
    plan: CheckpointPlan,
    profile: StorageProfile,
    *,
    scale: float = 1.0,
    repeats: int = 3,
    mode: str = "sync",
    max_bytes: int | None = None,
    restore: bool = False,
) -> Validation:
    if not 1 <= repeats <= MAX_REPEATS:
        raise InputError(f"‹repeats› must be 1 to {MAX_REPEATS}, got {repeats}")
    check_scale(scale, "‹scale›")
    saver = framework_of(plan.setup.framework).saver
    _check_torch(saver.kind)
    path = path.expanduser()
    filesystem.check_target(path)
    node, files, prediction = scaled_prediction(plan, profile, scale)
    from ckplan.savers.saver import check_save_processes, files_by_rank, run_saves

    by_rank = files_by_rank(files, scale)
    check_save_processes(len(by_rank), f"saving node {node}'s share of the plan")
    scaled = [f for fs in by_rank.values() for f in fs]
    total = sum(f["bytes"] for f in scaled)
    _check_room(path, total, scale, max_bytes)
    loads = restore_loads(plan, by_rank) if restore else None
    with scratch_area.ScratchDir(path) as scratch:
        # one unrecorded warm-up save first, as the probe's replay has: the first save of a process pays
        # first-touch costs (host memory faulted back in, page-cache growth) that later saves do not
        walls, blocking = run_saves(
            scratch.path, by_rank, plan.setup.framework, repeats + 1, mode, what="the saves", keep_last=restore
        )
        walls, blocking = walls[1:], blocking[1:]
        restored = time_loads(loads, scratch.path / f"save-{repeats}", profile, plan, scale, repeats) if loads else None
    measured = Spread.of(walls)
    stall_pred = prediction.seconds
    notes: list[str] = []
    stall_error = None
    if mode == "async":
        from ckplan.planning.policy import Policy
        from ckplan.planning.scenario import snapshot_seconds

        stall_pred = snapshot_seconds(plan, Policy()) * scale
        if blocking:
            stall_error = (stall_pred - Spread.of(blocking).median) / Spread.of(blocking).median * 100
        notes.append(async_note(plan.coordinated_save))
    error = (prediction.seconds - measured.median) / measured.median * 100
    return Validation(
        target=str(path),
        storage=profile.name,
        framework=plan.setup.framework,
        saver=saver.how,
        mode=mode,
        node=node,
        writers=len(by_rank),
        files=len(scaled),
        bytes=total,
        scale=scale,
        repeats=repeats,
        predicted_seconds=prediction.seconds,
        predicted_stall_seconds=stall_pred,
        prediction=prediction,
        measured_seconds=measured.median,
        measured=measured,
        measured_stall_seconds=Spread.of(blocking).median if blocking else None,
        error_percent=error,
        measured_range_percent=measured.relative_range * 100,
        within_measured_range=measured.contains(prediction.seconds),
        stall_error_percent=stall_error,
        effective_bytes_per_s=total / measured.median,
        diagnosis=diagnose(prediction, measured, total, len(scaled)),
        notes=notes,
        restore=restored,
    )


def _check_torch(kind: str) -> None:
    from ckplan.savers.calibrate import check_torch_saves, torch_available

    if not torch_available():  # the saves import torch in their own processes; this one never needs it
        raise EnvironmentProblem("validate needs PyTorch: pip install 'ckplan[torch]' (the CPU build, torch==2.13.0)")
    check_torch_saves(f"validate's {kind} saves", (kind,))


def _check_room(path: Path, total: int, scale: float, max_bytes: int | None) -> None:
    """Refuse a save of `total` bytes larger than half the target's free space or `max_bytes`."""
    free = filesystem.free_bytes(path)
    budget = min(free // 2 if free is not None else total, max_bytes or total)
    if total > budget:
        raise InputError(
            f"the save writes {fmt_bytes(total)} at ‹scale› {scale:g}; the target allows {fmt_bytes(budget)} "
            f"(half the free space or --max-bytes): lower ‹scale›"
        )


def restore_loads(plan: CheckpointPlan, saved: dict[int, list[dict]]) -> NodeLoads:
    """What the busiest restore node's ranks load: refused before anything is saved when that node reads files the
    saved node does not write."""
    loads = node_loads(plan, saved)
    if loads.missing:
        raise InputError(
            f"node {loads.node} reads on resume {len(loads.missing):,} file(s) that node {plan.busiest_node.node}, "
            f"the one validate saves, does not write ({loads.missing[0]}, …): validate --restore times plans whose "
            "busiest restore node reads the saved node's files"
        )
    return loads


def time_loads(
    loads: NodeLoads, saved: Path, profile: StorageProfile, plan: CheckpointPlan, scale: float, repeats: int
) -> RestoreValidation:
    """Load the saved files cold `repeats` times after one unrecorded warm-up load (the first load of a process pays
    first-touch costs), and compare the median with predict_load for the node at `scale`."""
    from ckplan.savers.loader import in_memory_filesystem

    paths = [saved / f for f in loads.files]
    walls = load_saved(loads, saved, repeats + 1, "the restore's loads")[1:]
    measured = Spread.of(walls)
    prediction, notes = scaled_load_prediction(plan, profile, loads.reads, loads.readers, scale)
    cold = not in_memory_filesystem(saved)
    if not cold:
        notes.append(
            f"{saved.parent} is a filesystem in memory: its pages are the files and cannot be dropped, so these are "
            "loads from memory, not cold reads"
        )
    nbytes = sum(p.stat().st_size for p in paths)
    judged_on, holds = judge(prediction.seconds, measured)
    return RestoreValidation(
        loader=LOADERS[framework_of(plan.setup.framework).saver.kind],
        node=loads.node,
        readers=len(loads.by_rank),
        files=len(paths),
        bytes=nbytes,
        requested_bytes=loads.requested_bytes,
        scale=scale,
        repeats=repeats,
        cold=cold,
        predicted_seconds=prediction.seconds,
        prediction=prediction,
        measured_seconds=measured.median,
        measured=measured,
        error_percent=(prediction.seconds - measured.median) / measured.median * 100,
        measured_range_percent=measured.relative_range * 100,
        within_measured_range=measured.contains(prediction.seconds),
        judged_on=judged_on,
        holds=holds,
        effective_bytes_per_s=nbytes / measured.median,
        diagnosis=diagnose_load(prediction, measured),
        notes=loads.notes + notes,
    )


def async_note(coordinated_save: bool) -> str:
    """What an async validation on CPU tensors measures, and the snapshot term it leaves unchecked: the model's stall
    at the default snapshot bandwidth (validate has no --snapshot-bandwidth), named by its value."""
    from ckplan.planning.policy import DEFAULT_SNAPSHOT_BYTES_PER_S
    from ckplan.units import fmt_rate

    how = (
        "async_save's staging copy in host memory and its planning"
        if coordinated_save
        else "a copy of the state in host memory, before a background thread saves it"
    )
    return (
        f"async on CPU tensors: the blocking part measured here is {how}; the model's stall is the "
        f"device→host snapshot at the default snapshot bandwidth ({fmt_rate(DEFAULT_SNAPSHOT_BYTES_PER_S)} per "
        "GPU), which cannot be checked without a GPU. The persist (measured save) is compared with the model's "
        "save time."
    )
