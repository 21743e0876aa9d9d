"""A plan measured from disk: an existing checkpoint's files, their sizes, and the ranks that wrote them.

Pure: it takes (path, bytes) pairs, which ckplan/scan.py reads from a directory (`size --from DIR`), and
reads no file. Which rank writes which file is what each framework's layout knows, read backwards by its names
(frameworks/names.py's interface, in frameworks/<name>.py): every file is read by the first framework's names that
read it, the first framework (in the registry's order) that recognises the files names the checkpoint, and the world
is what all the names together say. Files whose writer no name encodes (`.metadata`, `trainer_state.json`, `latest`,
…) go to rank 0.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from ckplan.errors import InputError
from ckplan.frameworks import FRAMEWORKS, STEP_DIR, read_name
from ckplan.frameworks.framework import Framework
from ckplan.frameworks.layout import ManifestFile, Parallelism
from ckplan.frameworks.names import Named, WorldPart
from ckplan.model.states import StateBytes
from ckplan.sizing.plan import (
    DEFAULT_GPUS_PER_NODE,
    MEASURED,
    WRITE_CALL_BYTES,
    CheckpointPlan,
    TrainingSetup,
    manifest_fields,
)
from ckplan.sizing.restore import RestoreManifest, plan_restore
from ckplan.units import MAX_GPUS, MAX_PARAMETERS, check_range, fmt_bytes


def measured_plan(
    files: list[tuple[str, int]],
    *,
    source: str,
    gpus_per_node: int | None = None,
    gpus: int | None = None,
    parameters: int | None = None,
    ep: int | None = None,
    notes: list[str] | None = None,
) -> CheckpointPlan:
    """The plan of the save that wrote `files` (paths relative to the scanned directory, bytes on disk).

    `gpus` gives the world size where the names leave it open (where they name only the model-parallel writers);
    `parameters` states the count, which no file name gives; `ep` the expert-parallel size, which places the
    writers of some frameworks' expert files and which no name gives either."""
    if not files:
        raise InputError(f"‹from_dir› {source} holds no files")
    _check_inputs(gpus_per_node, gpus, parameters, ep)
    read = [read_name(path, size) for path, size in files]
    seen = [f for f, _ in read]
    framework = _framework(seen, source)
    _one_save(seen, source)
    parts = {fw.name: part for fw in FRAMEWORKS.values() if (part := fw.names.world(_own(read, fw), ep)) is not None}
    world = _World.infer(list(parts.values()), gpus, ep)
    _check_world(world.gpus, source)
    gpn = min(gpus_per_node or DEFAULT_GPUS_PER_NODE, world.gpus)
    par = Parallelism(gpus=world.gpus, gpus_per_node=gpn, tp=world.tp, pp=world.pp, zero=world.zero)
    for fw in FRAMEWORKS.values():
        world.notes += fw.names.ranks(_own(read, fw), par, ep)
    manifest = [
        ManifestFile(path=f.path, bytes=f.bytes, rank=f.rank, node=par.node(f.rank), kind=f.kind(par)) for f in seen
    ]
    manifest.sort(key=lambda m: (m.rank, m.path))
    renamed = [f.renamed_from for f in seen if f.renamed_from]  # written under a temporary name, then renamed
    from_files = manifest_fields(manifest, len(renamed))
    total_bytes = from_files["total_bytes"]
    notes = [*(notes or []), *_empty_files(seen, source, total_bytes)]
    breakdown = _breakdown(manifest)
    state_bytes = sum(s.bytes for s in breakdown)
    setup = TrainingSetup(
        model=None,
        parameters=parameters,
        shape_source=f"{MEASURED}: {source}",
        optimizer="unknown",
        precision=next((p for f in seen if (p := f.precision())), "unknown"),
        framework=framework,
        gpus=par.gpus,
        gpus_per_node=gpn,
        nodes=math.ceil(par.gpus / gpn),
        tp=par.tp,
        pp=par.pp,
        dp=par.dp,
        zero=world.zero,
        step=_saved_step(seen),
    )
    assumptions = [
        f"{MEASURED}: {source} — {framework} checkpoint, {len(manifest):,} files, {fmt_bytes(total_bytes)} "
        f"({total_bytes:,} bytes); the files' names and sizes only, no file was read",
        *world.notes,
        *_rank_zero_note(seen),
        *_given_notes(gpn, gpus_per_node, par.gpus, parameters),
        f"operations: one create, one fsync per file, one write() per {fmt_bytes(WRITE_CALL_BYTES)}"
        + (f", {len(renamed)} rename(s) of {', '.join(sorted(set(renamed)))}" if renamed else ""),
        *notes,
    ]
    restore, unknown_reads = _restore(FRAMEWORKS[framework], list(parts.values()), par, manifest, total_bytes, ep)
    return CheckpointPlan(
        setup=setup,
        parameters=parameters,
        bytes_per_parameter=state_bytes / parameters if parameters else None,
        state_bytes=state_bytes,
        small_file_bytes=total_bytes - state_bytes,
        breakdown=breakdown,
        not_saved=[],
        **from_files,
        write_path="buffered",
        coordinated_save=any(f.coordinated for f in seen),
        assumptions=assumptions + unknown_reads,
        restore=restore,
    )


def _check_world(gpus: int, source: str) -> None:
    if gpus > MAX_GPUS:  # rank numbers in the names past any world ckplan plans
        raise InputError(
            f"‹from_dir› {source}: the file names give {gpus:,} ranks, more than the {MAX_GPUS:,} GPUs ckplan "
            "plans for: not one checkpoint's files"
        )


def _empty_files(seen: list[Named], source: str, total_bytes: int) -> list[str]:
    """A save of no bytes refused; a note on state files of none (a framework never writes an empty one)."""
    if total_bytes == 0:
        raise InputError(
            f"‹from_dir› {source}: its {len(seen):,} file(s) hold 0 bytes: a save still being written, or one "
            "that failed, not a checkpoint"
        )
    empty = sorted(f.path for f in seen if f.bytes == 0 and f.names_writer)
    if not empty:
        return []
    return [
        f"{len(empty):,} state file(s) hold 0 bytes ({', '.join(empty[:3])}{', …' if len(empty) > 3 else ''}): "
        "a framework never writes an empty one; a save interrupted, or still being written?"
    ]


def _saved_step(seen: list[Named]) -> int:
    """The training step the save is of: from a step directory above a file, or a file's own name; 0 if none."""
    steps = [int(s[2]) for f in seen for part in PurePosixPath(f.path).parts[:-1] if (s := STEP_DIR.fullmatch(part))]
    steps += [step for f in seen if (step := f.step()) is not None]
    return max(steps, default=0)


def _check_inputs(gpus_per_node: int | None, gpus: int | None, parameters: int | None, ep: int | None) -> None:
    for value, name in ((gpus_per_node, "‹gpus_per_node›"), (gpus, "‹gpus›")):
        if value is not None:
            check_range(value, name, 1, MAX_GPUS, limit=f"{MAX_GPUS:,} GPUs")
    if parameters is not None:
        check_range(parameters, "‹params›", 1, MAX_PARAMETERS, limit=f"{MAX_PARAMETERS:,}")
    if ep is not None:
        check_range(ep, "‹ep›", 1, MAX_GPUS, limit=f"{MAX_GPUS:,}")


def _breakdown(manifest: list[ManifestFile]) -> list[StateBytes]:
    """The states inside the files are not read: the breakdown is by kind of file."""
    by_kind: Counter[str] = Counter()
    for m in manifest:
        by_kind[m.kind] += m.bytes
    return [
        StateBytes(name=name, kind=kind, dtype="as saved", bytes=by_kind[key])
        for key, name, kind in (
            ("weights", "weight files", "weights"),
            ("optimizer", "optimizer files", "optimizer"),
            ("mixed", "weight + optimizer files", "optimizer"),
        )
        if by_kind[key]
    ]


def _given_notes(gpn: int, gpus_per_node: int | None, gpus: int, parameters: int | None) -> list[str]:
    """What the plan takes from the flags or the defaults, not from the files."""
    return [
        f"nodes: {gpn} GPUs per node"
        + (" (--gpus-per-node)" if gpus_per_node else " (the default; --gpus-per-node to change)")
        + f", rank r on node r // {gpn}"
        + (
            f"; --gpus-per-node {gpus_per_node} exceeds the job's {gpus} ranks: one node"
            if gpus_per_node and gpus_per_node > gpus
            else ""
        ),
        (
            f"parameters: {parameters:,} as given (--params), not measured"
            if parameters
            else "parameters unknown: no file name gives the count (--params to state it), so no bytes per parameter"
        ),
        "optimizer and precision are not read from the files; the state breakdown is by kind of file",
        "write path: buffered (the frameworks' savers write through the page cache)",
    ]


def _restore(
    framework: Framework,
    parts: list[WorldPart],
    par: Parallelism,
    manifest: list[ManifestFile],
    total_bytes: int,
    ep: int | None,
) -> tuple[RestoreManifest | None, list[str]]:
    """The restore manifest by the framework's layout, read off the files' names as a sized plan's is; where the
    names leave the load open, what is assumed is noted, or no manifest is given and the note says why."""
    notes = []
    layout = framework.layout
    if layout.measured_restore_zero is not None:
        par = replace(par, zero=layout.measured_restore_zero)
        notes.append(layout.measured_restore_note)
    if needs := next((p.needs_ep for p in parts if p.needs_ep), None):
        if ep is None:
            return None, [f"restore: {needs}"]
        par = replace(par, ep=ep)
    restore, why = plan_restore(layout, par, manifest, total_bytes)
    if restore is None:
        return None, [f"restore: {w}" for w in why]
    if restore.readers_per_node == 0:  # no rank reads a byte: there is no load to time
        return None, ["restore: every file a resume reads holds 0 bytes: a save cut short, not one to resume from"]
    return restore.model_copy(update={"notes": notes + restore.notes}), []


def _own(read: list[tuple[Named, str | None]], framework: Framework) -> list[Named]:
    return [f for f, by in read if by == framework.name]


def _framework(seen: list[Named], source: str) -> str:
    for fw in FRAMEWORKS.values():
        if fw.names.recognises(seen, source):
            return fw.name
    expected = ", ".join(fw.names.looks_like for fw in FRAMEWORKS.values() if fw.names.looks_like)
    raise InputError(
        f"no recognised checkpoint in ‹from_dir› {source} ({len(seen):,} file(s)): expected {expected} files"
    )


def _one_save(seen: list[Named], source: str) -> None:
    """Refuse two files that one writer writes once per save: the directory holds more than one save."""
    steps = {step: f.path for f in seen if (step := f.step()) is not None}
    if len(steps) > 1:
        first, second = sorted(steps)[:2]
        raise InputError(
            f"‹from_dir› {source} holds more than one save ({steps[first]} and {steps[second]}): "
            "give the directory of one checkpoint"
        )
    where: dict[str, str] = {}
    numbered: dict[tuple[str, str, tuple[int, ...]], str] = {}
    for f in seen:
        if (key := f.once()) is not None:
            other = where.setdefault(key, f.path)
            if other != f.path:
                raise InputError(
                    f"‹from_dir› {source} holds more than one save ({other} and {f.path}): "
                    "give the directory of one checkpoint"
                )
        if (scoped := f.numbered()) is not None:
            # a number written twice in one scope (__01_0 beside __1_0, rng_state.pth beside rng_state_0.pth)
            other = numbered.setdefault((type(f).__name__, *scoped), f.path)
            if other != f.path:
                raise InputError(
                    f"‹from_dir› {source}: {other} and {f.path} number the same writer's file twice; no framework "
                    "names its files so: give the directory of one checkpoint as the framework wrote it"
                )


@dataclass
class _World:
    gpus: int
    tp: int
    pp: int
    zero: int
    notes: list[str]

    @classmethod
    def infer(cls, parts: list[WorldPart], gpus: int | None, ep: int | None) -> _World:
        """The world size and its split from what the names say: `known` where a framework's names name every rank,
        else the model-parallel writers only, with `gpus` (or one data-parallel rank) for the rest."""
        notes = [n for part in parts for n in part.notes]
        known = {part.label: part.known for part in parts if part.known is not None}
        split = next((part for part in parts if part.tp is not None), None)
        tp, pp = (split.tp or 1, split.pp or 1) if split else (1, 1)
        unit = max((part.unit for part in parts), default=1)
        lower = max((part.lower for part in parts), default=1)
        world = max(known.values(), default=max(lower, unit))
        if len(set(known.values())) > 1:
            notes.append(
                "the names disagree on the world size ("
                + ", ".join(f"{k} {v}" for k, v in known.items())
                + f"): {world} taken"
            )
        if gpus is not None:
            if known and gpus != world:
                raise InputError(f"‹gpus› {gpus} disagrees with the {world} ranks the checkpoint's file names show")
            if gpus < lower or gpus % unit:
                raise InputError(
                    f"‹gpus› {gpus} is not a multiple of the checkpoint's {unit} model-parallel ranks"
                    + (f" of at least {lower}" if lower > unit else "")
                )
            world = gpus
        elif not known:
            notes.append(
                f"world: {world} GPU(s), one data-parallel rank: the names give no more (--gpus to give the world size)"
            )
        if world % (tp * pp):
            notes.append(f"world {world} is not a multiple of tp {tp} × pp {pp}: taken as tp 1, pp 1")
            tp = pp = 1
        shown = next((part.ep for part in parts if part.ep), None)
        if ep is not None and shown is not None and ep != shown:
            raise InputError(f"‹ep› {ep} disagrees with the expert-parallel size {shown} the checkpoint's names show")
        if ep is not None and ep > 1 and shown is None and not any(part.needs_ep for part in parts):
            takes = " or ".join(fw.names.ep_files for fw in FRAMEWORKS.values() if fw.names.ep_files)
            raise InputError(f"‹ep› {ep} applies to {takes}; this one has none")
        return cls(gpus=world, tp=tp, pp=pp, zero=max((part.zero for part in parts), default=0), notes=notes)


def _rank_zero_note(seen: list[Named]) -> list[str]:
    plain = [f.name for f in seen if not f.names_writer]
    if not plain:
        return []
    shown = sorted(set(plain))
    return [
        f"{len(plain):,} file(s) no name assigns a writer to ({', '.join(shown[:6])}{', …' if len(shown) > 6 else ''}) "
        "are written by rank 0"
    ]
