"""`ckplan validate`: real saves of one node's share of a plan, against the prediction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ckplan import filesystem
from ckplan import scratch as scratch_area
from ckplan.errors import EnvironmentProblem, InputError
from ckplan.frameworks import framework_of
from ckplan.profile import Spread, StorageProfile
from ckplan.savers.saver import check_save_processes
from ckplan.sizing.layouts.base import Read, file_format
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import check_scale
from ckplan.validate.model import (
    RestoreValidation,
    Validation,
    diagnose,
    diagnose_load,
    judge,
    restore_node,
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
    from ckplan.savers.calibrate import torch_available

    if not torch_available():  # the saves import torch in their own processes; this one never needs it
        raise EnvironmentProblem("validate needs PyTorch: pip install 'ckplan[torch]' (the CPU build, torch==2.13.0)")
    path = path.expanduser()
    filesystem.check_target(path)
    node, files, prediction = scaled_prediction(plan, profile, scale)
    from ckplan.savers.saver import check_save_processes, files_by_rank, run_saves

    by_rank = files_by_rank(files, scale)
    check_save_processes(len(by_rank), f"saving node {node}'s share of the plan")
    scaled = [f for fs in by_rank.values() for f in fs]
    total = sum(f["bytes"] for f in scaled)
    free = filesystem.free_bytes(path)
    budget = min(free // 2 if free is not None else total, max_bytes or total)
    if total > budget:
        raise InputError(
            f"the save writes {total / 1e9:.2f} GB at ‹scale› {scale:g}; the target allows {budget / 1e9:.2f} GB "
            f"(half the free space or --max-bytes): lower ‹scale›"
        )
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


@dataclass
class NodeLoads:
    """What the busiest restore node's ranks load, from the saved node's files: the load processes' input."""

    node: int
    reads: list[Read]  # readers numbered from the node's first rank
    readers: int
    by_rank: dict[int, list[dict]]  # load process → its items, paths relative to the save's directory
    files: list[str]  # every file the node reads, relative to the save's directory (page caches dropped)
    requested_bytes: int
    notes: list[str]


def restore_loads(plan: CheckpointPlan, saved: dict[int, list[dict]]) -> NodeLoads:
    """Which saved file each rank of the busiest restore node loads, and how (its framework's saver says): refused
    before anything is saved when that node reads files the saved node does not write."""
    node, reads, readers = restore_node(plan)
    saver = framework_of(plan.setup.framework).saver.kind
    writer_of = {f.path: f.rank for f in plan.manifest}
    index = {rank: i for i, rank in enumerate(saved)}  # save process of each saved rank (DCP names files by it)
    written = {f["path"]: f for fs in saved.values() for f in fs}
    missing = sorted({r.path for r in reads} - written.keys())
    if missing:
        raise InputError(
            f"node {node} reads on resume {len(missing):,} file(s) that node {plan.busiest_node.node}, the one "
            f"validate saves, does not write ({missing[0]}, …): validate --restore times plans whose busiest "
            "restore node reads the saved node's files"
        )
    by_rank: dict[int, list[dict]] = {}
    files, notes, requested = set(), [], 0
    for rank in range(readers):
        items: list[dict] = []
        dcp_writers: dict[int, list[dict]] = {}
        for r in reads:
            if rank not in r.readers:
                continue
            fmt = file_format(r.path)
            requested += written[r.path]["bytes"] * r.times
            if saver == "dcp" and fmt == "dcp":
                w = writer_of[r.path]
                dcp_writers[index[w]] = saved[w]
                files.add(f"__{index[w]}_0.distcp")
            elif saver == "dcp":  # .metadata is read by dcp.load itself; the DCP saver writes nothing else
                files.add(".metadata")
            else:
                items.append({"format": fmt, "path": r.path, "times": r.times})
                files.add(r.path)
        if dcp_writers:
            items.append({"format": "dcp", "path": "", "times": 1, "writers": dcp_writers})
        if items:
            by_rank[rank] = items
    if saver == "dcp":
        other = sorted({r.path for r in reads if file_format(r.path) != "dcp" and not r.path.endswith(".metadata")})
        if other:
            notes.append(
                f"not loaded: {len(other)} file(s) the DCP saver does not write ({', '.join(other[:3])}"
                f"{', …' if len(other) > 3 else ''}); the model counts them"
            )
    check_save_processes(len(by_rank), f"loading node {node}'s restore")
    import psutil

    # every rank holds what it loaded until its load ends
    if requested > 0.8 * psutil.virtual_memory().available:
        raise InputError(
            f"node {node}'s ranks hold {requested / 1e9:.2f} GB in memory at once when they load; this machine has "
            f"{psutil.virtual_memory().available / 1e9:.2f} GB available: lower ‹scale›"
        )
    return NodeLoads(node, reads, readers, by_rank, sorted(files), requested, notes)


def time_loads(
    loads: NodeLoads, saved: Path, profile: StorageProfile, plan: CheckpointPlan, scale: float, repeats: int
) -> RestoreValidation:
    """Load the saved files cold `repeats` times after one unrecorded warm-up load (the first load of a process pays
    first-touch costs), and compare the median with predict_load for the node at `scale`."""
    from ckplan.savers.loader import in_memory_filesystem, run_loads

    by_rank = {
        rank: [{**item, "path": str(saved / item["path"])} for item in items] for rank, items in loads.by_rank.items()
    }
    paths = [saved / f for f in loads.files]
    walls = run_loads(by_rank, repeats + 1, paths, what="the restore's loads")[1:]
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
        readers=len(by_rank),
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


LOADERS = {
    "torch.save": "torch.load(map_location='cpu') per file",
    "safetensors": "safetensors load_file (pages touched) + torch.load(map_location='cpu')",
    "dcp": "torch.distributed.checkpoint.load (gloo), each rank its keys",
}


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
