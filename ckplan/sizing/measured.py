"""A plan measured from disk: an existing checkpoint's files, their sizes, and the ranks that wrote them.

Pure: it takes (path, bytes) pairs, which ckplan/scan.py reads from a directory (`size --from DIR`), and
reads no file. Which rank writes which file is what the layouts know (sizing/layouts/), read backwards:
- DeepSpeed (layouts/deepspeed.py): `[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_{optim,model}_states.pt` by
  rank (dp, mp); `mp_rank_{mp:02d}_model_states.pt` and `layer_{idx:02d}-model_{tp:02d}-model_states.pt` by
  data-parallel rank 0 of model-parallel rank mp (stage × tp + tensor rank). A layer file's stage is not in
  its name: the layers go to the stages in contiguous runs balanced by bytes, as PipelineModule's default
  partition_method='parameters' balances them by parameter count.
- DeepSpeed-MoE (layouts/deepspeed.py, --ep): `layer_{moe_layer}_expert_{e}_mp_rank_{mp:02d}_model_states.pt`
  by the expert-parallel rank holding expert e, data-parallel ranks 0..ep-1. The expert-parallel size is not in
  the names: --ep gives it, else the files are counted on rank 0.
- DCP (layouts/dcp.py): `__{rank}_{k}.distcp` by that rank; `.metadata` by the coordinator, rank 0.
- Megatron-Core torch_dist (layouts/megatron.py): DCP's files in `iter_{N:07d}/`, plus `common.pt` and
  `metadata.json` (rank 0).
- Megatron legacy torch format (megatron/training/checkpointing.py, get_checkpoint_name and
  get_distributed_optimizer_checkpoint_name): `iter_{N:07d}/mp_rank_{tp:02d}[_{pp:03d}][_{ep:03d}]/
  model_optim_rng.pt`, and `distrib_optim.pt` beside it with the distributed optimizer, by data-parallel rank
  0 of each (tp, pp, ep) group. The data-parallel size is not in the names. Rank order tp, ep, dp, pp
  (Megatron's default order tp-cp-ep-dp-pp).
- HF Trainer (layouts/hf.py): `rng_state_{rank}.pth` by each process (`rng_state.pth` for one); the rest by
  the main process; with DeepSpeed a `global_stepN/` inside, with FSDP (accelerate) DCP directories inside.
- Lightning (layouts/lightning.py): `*.ckpt` (ModelCheckpoint's `epoch={e}-step={N}.ckpt`, `last.ckpt`) by rank 0;
  the world size is not in the names.
Files whose writer no name encodes (`.metadata`, `trainer_state.json`, `latest`, …) go to rank 0.
DLIO's emulated checkpoints (layouts/dlio.py: `global_epoch1_stepN/`, `layer_{i}-model_{mp}_model_states.pt`) are
refused: their names do not tell tensor from pipeline ranks, and `size --framework dlio` sizes them.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from ckplan.errors import InputError
from ckplan.sizing.layouts import LAYOUTS
from ckplan.sizing.layouts.base import FileKind, ManifestFile, Parallelism
from ckplan.sizing.plan import (
    DEFAULT_GPUS_PER_NODE,
    MEASURED,
    WRITE_CALL_BYTES,
    CheckpointPlan,
    TrainingSetup,
    manifest_fields,
)
from ckplan.sizing.restore import RestoreManifest, plan_restore
from ckplan.sizing.states import StateBytes
from ckplan.units import MAX_GPUS, MAX_PARAMETERS, check_range, fmt_bytes

DS_ZERO = re.compile(r"(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_(optim|model)_states\.pt")
DS_MP = re.compile(r"mp_rank_(\d+)_model_states\.pt")
DS_LAYER = re.compile(r"layer_(\d+)-model_(\d+)-model_states\.pt")
DS_EXPERT = re.compile(r"layer_(\d+)_expert_(\d+)_mp_rank_(\d+)_model_states\.pt")
DLIO_NAME = re.compile(r"(layer_\d+-)?model_\d+_model_states\.pt|global_epoch\d+_step\d+")
DISTCP = re.compile(r"__(\d+)_(\d+)\.distcp")
MEGATRON_DIR = re.compile(r"mp_rank_(\d+)(?:_(\d+))?(?:_(\d+))?")
MEGATRON_FILES = ("model_optim_rng.pt", "distrib_optim.pt")
RNG_STATE = re.compile(r"rng_state(?:_(\d+))?\.pth")
LIGHTNING_CKPT = re.compile(r".+\.ckpt")
LIGHTNING_STEP = re.compile(r"(?:^|[-_])step=(\d+)")  # ModelCheckpoint's default name: epoch={e}-step={N}.ckpt
STEP_DIR = re.compile(r"(global_step|checkpoint-|iter_|step-|step_)(\d+)")  # a checkpoint's directory: kind, step
HF_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "training_args.bin")
# written beside the checkpoint by each save
SAVE_SIBLINGS = ("latest", "zero_to_fp32.py", "zero_to_torch.py", "latest_checkpointed_iteration.txt")
SMALL_NAMES = (
    *SAVE_SIBLINGS,
    "common.pt",
    "scheduler.pt",
    "training_args.bin",
    ".metadata",
)
SMALL_FILE_BYTES = 2**20  # a file of no known kind smaller than this is counted with the small files


@dataclass
class _Seen:
    """One file and what its name says: the rule that matched and the indices in its name."""

    path: str
    bytes: int
    rule: str  # ds_zero, ds_mp, ds_layer, ds_expert, distcp, megatron, rng, lightning, other
    ids: tuple[int, ...] = ()
    rank: int = 0


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

    `gpus` gives the world size where the names leave it open (DeepSpeed ZeRO-0 and Megatron's legacy format
    name only the model-parallel writers); `parameters` states the count, which no file name gives; `ep` the
    expert-parallel size of a DeepSpeed-MoE save, which no name gives either."""
    if not files:
        raise InputError(f"‹from_dir› {source} holds no files")
    for value, name in ((gpus_per_node, "‹gpus_per_node›"), (gpus, "‹gpus›")):
        if value is not None:
            check_range(value, name, 1, MAX_GPUS, limit=f"{MAX_GPUS:,} GPUs")
    if parameters is not None:
        check_range(parameters, "‹params›", 1, MAX_PARAMETERS, limit=f"{MAX_PARAMETERS:,}")
    if ep is not None:
        check_range(ep, "‹ep›", 1, MAX_GPUS, limit=f"{MAX_GPUS:,}")
    seen = [_read_name(path, size) for path, size in files]
    framework = _framework(seen, source)
    _one_save(seen, source)
    world = _World.infer(seen, gpus, ep)
    if world.gpus > MAX_GPUS:  # rank numbers in the names past any world ckplan plans
        raise InputError(
            f"‹from_dir› {source}: the file names give {world.gpus:,} ranks, more than the {MAX_GPUS:,} GPUs ckplan "
            "plans for: not one checkpoint's files"
        )
    gpn = min(gpus_per_node or DEFAULT_GPUS_PER_NODE, world.gpus)
    par = Parallelism(gpus=world.gpus, gpus_per_node=gpn, tp=world.tp, pp=world.pp, zero=world.zero)
    stage_of_layer = _layer_stages(seen, par.pp)
    for f in seen:
        f.rank = _rank(f, par, world, stage_of_layer)
    manifest = [
        ManifestFile(path=f.path, bytes=f.bytes, rank=f.rank, node=par.node(f.rank), kind=_kind(f, par)) for f in seen
    ]
    manifest.sort(key=lambda m: (m.rank, m.path))

    renames = sum(1 for f in seen if PurePosixPath(f.path).name == ".metadata")  # DCP: .metadata.tmp -> .metadata
    from_files = manifest_fields(manifest, renames)
    total_bytes = from_files["total_bytes"]
    if total_bytes == 0:
        raise InputError(
            f"‹from_dir› {source}: its {len(manifest):,} file(s) hold 0 bytes: a save still being written, or one "
            "that failed, not a checkpoint"
        )
    empty = sorted(f.path for f in seen if f.bytes == 0 and f.rule != "other")
    if empty:
        notes = [
            *(notes or []),
            f"{len(empty):,} state file(s) hold 0 bytes ({', '.join(empty[:3])}{', …' if len(empty) > 3 else ''}): "
            "a framework never writes an empty one; a save interrupted, or still being written?",
        ]
    by_kind: Counter[str] = Counter()
    for m in manifest:
        by_kind[m.kind] += m.bytes
    # the states inside the files are not read: the breakdown is by kind of file
    breakdown = [
        StateBytes(name=name, kind=kind, dtype="as saved", bytes=by_kind[key])
        for key, name, kind in (
            ("weights", "weight files", "weights"),
            ("optimizer", "optimizer files", "optimizer"),
            ("mixed", "weight + optimizer files", "optimizer"),
        )
        if by_kind[key]
    ]
    state_bytes = sum(s.bytes for s in breakdown)
    steps = [int(s[2]) for f in seen for part in PurePosixPath(f.path).parts[:-1] if (s := STEP_DIR.fullmatch(part))]
    steps += [f.ids[0] for f in seen if f.rule == "lightning" and f.ids[0] >= 0]  # in the file's name
    setup = TrainingSetup(
        model=None,
        parameters=parameters,
        shape_source=f"{MEASURED}: {source}",
        optimizer="unknown",
        precision="bf16-mixed"
        if any(f.rule == "ds_zero" and f.path.rpartition("/")[2].startswith("bf16_") for f in seen)
        else "unknown",
        framework=framework,
        gpus=par.gpus,
        gpus_per_node=gpn,
        nodes=math.ceil(par.gpus / gpn),
        tp=par.tp,
        pp=par.pp,
        dp=par.dp,
        zero=world.zero,
        step=max(steps, default=0),
    )
    assumptions = [
        f"{MEASURED}: {source} — {framework} checkpoint, {len(manifest):,} files, {fmt_bytes(total_bytes)} "
        f"({total_bytes:,} bytes); the files' names and sizes only, no file was read",
        *world.notes,
        *_rank_zero_note(seen),
        f"nodes: {gpn} GPUs per node"
        + (" (--gpus-per-node)" if gpus_per_node else " (the default; --gpus-per-node to change)")
        + f", rank r on node r // {gpn}"
        + (
            f"; --gpus-per-node {gpus_per_node} exceeds the job's {par.gpus} ranks: one node"
            if gpus_per_node and gpus_per_node > par.gpus
            else ""
        ),
        (
            f"parameters: {parameters:,} as given (--params), not measured"
            if parameters
            else "parameters unknown: no file name gives the count (--params to state it), so no bytes per parameter"
        ),
        "optimizer and precision are not read from the files; the state breakdown is by kind of file",
        "write path: buffered (torch.save, DCP and safetensors write through the page cache); a DeepSpeed FastPersist "
        "save (O_DIRECT) writes the same files and cannot be told apart by them",
        f"operations: one create, one fsync per file, one write() per {fmt_bytes(WRITE_CALL_BYTES)}"
        + (f", {renames} rename(s) of DCP's .metadata.tmp" if renames else ""),
        *(notes or []),
    ]
    restore, unknown_reads = _restore(framework, seen, par, manifest, total_bytes, ep)
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
        coordinated_save=any(f.rule == "distcp" for f in seen),
        assumptions=assumptions + unknown_reads,
        restore=restore,
    )


def _restore(
    framework: str, seen: list[_Seen], par: Parallelism, manifest: list[ManifestFile], total_bytes: int, ep: int | None
) -> tuple[RestoreManifest | None, list[str]]:
    """The restore manifest by the framework's layout, read off the files' names as a sized plan's is; where the
    names leave the load open, what is assumed is noted, or no manifest is given and the note says why."""
    notes = []
    layout = LAYOUTS[framework]
    if layout.measured_restore_zero is not None:
        par = replace(par, zero=layout.measured_restore_zero)
        notes.append(layout.measured_restore_note)
    if any(f.rule == "ds_expert" for f in seen):
        if ep is None:
            return None, ["restore: DeepSpeed-MoE expert files without --ep: which ranks read each is not known"]
        par = replace(par, ep=ep)
    restore, why = plan_restore(layout, par, manifest, total_bytes)
    if restore is None:
        return None, [f"restore: {w}" for w in why]
    if restore.readers_per_node == 0:  # no rank reads a byte: there is no load to time
        return None, ["restore: every file a resume reads holds 0 bytes: a save cut short, not one to resume from"]
    return restore.model_copy(update={"notes": notes + restore.notes}), []


def _read_name(path: str, size: int) -> _Seen:
    p = PurePosixPath(path)
    name, parent = p.name, p.parent.name
    if m := DS_ZERO.fullmatch(name):
        return _Seen(path, size, "ds_zero", (int(m[2]), int(m[3]), m[4] == "model"))
    if m := DS_MP.fullmatch(name):
        return _Seen(path, size, "ds_mp", (int(m[1]),))
    if m := DS_LAYER.fullmatch(name):
        return _Seen(path, size, "ds_layer", (int(m[1]), int(m[2])))
    if m := DS_EXPERT.fullmatch(name):
        return _Seen(path, size, "ds_expert", (int(m[1]), int(m[2]), int(m[3])))
    if m := DISTCP.fullmatch(name):
        return _Seen(path, size, "distcp", (int(m[1]), int(m[2])))
    if name in MEGATRON_FILES and (m := MEGATRON_DIR.fullmatch(parent)):
        return _Seen(path, size, "megatron", tuple(int(g) if g is not None else -1 for g in m.groups()))
    if m := RNG_STATE.fullmatch(name):
        return _Seen(path, size, "rng", (int(m[1]) if m[1] is not None else 0,))
    if LIGHTNING_CKPT.fullmatch(name):
        return _Seen(path, size, "lightning", (lightning_step(name),))
    return _Seen(path, size, "other")


def lightning_step(name: str) -> int:
    """The step in a Lightning checkpoint's file name (`epoch=0-step=500.ckpt`), or -1 where it names none."""
    m = LIGHTNING_STEP.search(name)
    return int(m[1]) if m else -1


def _is_hf(f: _Seen) -> bool:
    name = PurePosixPath(f.path).name
    return (
        f.rule == "rng"
        or name in HF_FILES
        or name.endswith(".safetensors")
        or (name.startswith("pytorch_model") and name.endswith(".bin"))
    )


def _framework(seen: list[_Seen], source: str) -> str:
    rules = {f.rule for f in seen}
    if dlio := next((f.path for f in seen for part in PurePosixPath(f.path).parts if DLIO_NAME.fullmatch(part)), None):
        raise InputError(
            f"‹from_dir› {source} holds a DLIO benchmark checkpoint ({dlio}): its names do not tell tensor from "
            "pipeline ranks; size it with --framework dlio"
        )
    if any(_is_hf(f) for f in seen):
        return "hf"  # Trainer's checkpoint-N/, holding DeepSpeed's or DCP's files when it runs under them
    names = {PurePosixPath(f.path).name for f in seen}
    in_iter = any(part.startswith("iter_") for f in seen for part in PurePosixPath(f.path).parts[:-1])
    if "megatron" in rules or (
        "distcp" in rules and (in_iter or names & {"common.pt", "latest_checkpointed_iteration.txt"})
    ):
        return "megatron"
    if rules & {"ds_zero", "ds_mp", "ds_layer", "ds_expert"}:
        return "deepspeed"
    if "distcp" in rules:
        return "dcp"
    if "lightning" in rules:
        return "lightning"
    raise InputError(
        f"no recognised checkpoint in ‹from_dir› {source} ({len(seen):,} file(s)): expected DeepSpeed "
        "(global_stepN/ *_model_states.pt), DCP (__R_0.distcp + .metadata), Megatron (iter_NNNNNNN/), "
        "HF Trainer (checkpoint-N/) or Lightning (*.ckpt) files"
    )


def _one_save(seen: list[_Seen], source: str) -> None:
    """Refuse two files that one writer writes once per save: the directory holds more than one save."""
    where: dict[str, str] = {}
    steps = {f.ids[0]: f.path for f in seen if f.rule == "lightning" and f.ids[0] >= 0}
    if len(steps) > 1:
        first, second = sorted(steps)[:2]
        raise InputError(
            f"‹from_dir› {source} holds more than one save ({steps[first]} and {steps[second]}): "
            "give the directory of one checkpoint"
        )
    # a writer's file by the numbers in its name, which 01 and 1 both give
    numbered: dict[tuple[str, str, tuple[int, ...]], str] = {}
    for f in seen:
        p = PurePosixPath(f.path)
        if f.rule in ("ds_zero", "ds_mp", "ds_layer", "ds_expert", "megatron"):
            key = f"{p.parent.name}/{p.name}" if f.rule == "megatron" else p.name
            other = where.setdefault(key, f.path)
            if other != f.path:
                raise InputError(
                    f"‹from_dir› {source} holds more than one save ({other} and {f.path}): "
                    "give the directory of one checkpoint"
                )
        if f.rule != "other" and f.rule != "lightning":
            # DCP's and Trainer's files repeat in each of their directories (optimizer_0/__0_0.distcp); in one, a
            # number written twice (__01_0 beside __1_0, rng_state.pth beside rng_state_0.pth) is no framework's
            scope = str(p.parent) if f.rule in ("distcp", "rng") else p.name if f.rule == "megatron" else ""
            other = numbered.setdefault((f.rule, scope, f.ids), f.path)
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
    ds_tp: int  # DeepSpeed's tensor-parallel size, which splits mp_rank into stage and tensor rank
    experts_per_writer: int  # DeepSpeed-MoE: expert e's file is written by data-parallel rank e // this
    notes: list[str]

    @classmethod
    def infer(cls, seen: list[_Seen], gpus: int | None, ep: int | None = None) -> _World:
        """The world size and its split from the names: `known` where every rank writes a named file, else the
        model-parallel writers only, with `gpus` (or one data-parallel rank) for the rest."""
        notes: list[str] = []
        known: dict[str, int] = {}  # what each framework's names say the world is, where they name every rank
        tp = pp = 1
        zero, ds_tp = 0, 1
        unit = 1  # the model-parallel size: the world is a multiple of it
        lower = 1
        ds = [f for f in seen if f.rule.startswith("ds_")]
        if ds:
            named = [f for f in ds if f.rule in ("ds_zero", "ds_mp")]  # the files that name their mp_rank first
            mps = 1 + max(f.ids[1] if f.rule == "ds_zero" else f.ids[0] for f in named) if named else 1
            layer_tps = {f.ids[1] for f in ds if f.rule == "ds_layer"}
            ds_tp = 1 + max(layer_tps) if layer_tps else mps
            mps = max(mps, ds_tp)
            if mps % ds_tp:
                notes.append(
                    f"DeepSpeed: {mps} model-parallel ranks do not split into tensor rank {ds_tp}: taken as tp {mps}"
                )
                ds_tp = mps
            tp, pp, unit = ds_tp, mps // ds_tp, mps
            zero_files = [f for f in ds if f.rule == "ds_zero"]
            zero = 3 if any(f.ids[2] for f in zero_files) else 1 if zero_files else 0
            if zero:
                dps = 1 + max(f.ids[0] for f in zero_files)
                known["DeepSpeed"] = dps * mps
                missing = dps * mps - len({(f.ids[0], f.ids[1]) for f in zero_files})
                stage = "ZeRO-3" if zero == 3 else "ZeRO-1 or 2 (their files are alike; recorded as 1)"
                notes.append(
                    f"ranks: DeepSpeed {stage}, {dps} data-parallel × {mps} model-parallel ranks from the "
                    "zero_pp_rank_{dp}_mp_rank_{mp} names; rank = stage·dp·tp + dp·tp + tensor rank"
                    + (f"; {missing} shard file(s) missing: an incomplete save?" if missing else "")
                )
            else:
                lower = mps
                notes.append(
                    f"ranks: DeepSpeed ZeRO-0 (no zero_pp_rank files): {mps} model-parallel writer(s), "
                    "data-parallel rank 0 of each; the data-parallel size is not in the names"
                )
            if layer_tps:
                notes.append(
                    f"DeepSpeed pipeline: tp {ds_tp} from the layer_XX-model_YY names, pp {pp}; layers go to "
                    "stages in contiguous runs balanced by bytes (PipelineModule's partition_method='parameters')"
                )
        meg = [f for f in seen if f.rule == "megatron"]
        if meg:
            tp = 1 + max(f.ids[0] for f in meg)
            pp = 1 + max(max(f.ids[1], 0) for f in meg)
            ep = 1 + max(max(f.ids[2], 0) for f in meg)
            unit, lower = tp * pp, tp * pp * ep
            notes.append(
                f"ranks: Megatron legacy format, tp {tp} × pp {pp}"
                + (f" × ep {ep}" if ep > 1 else "")
                + " from the mp_rank_TT[_PPP][_EEE] directories (a two-number name read as tp, pp), written "
                "by data-parallel rank 0 of each; rank order tp, ep, dp, pp; the data-parallel size is not "
                "in the names"
            )
        distcp = {f.ids[0] for f in seen if f.rule == "distcp"}
        if distcp:
            known["DCP"] = 1 + max(distcp)
            notes.append(
                f"ranks: DCP, {len(distcp)} rank(s) from the __R_0.distcp names"
                + (f" (rank(s) up to {max(distcp)}, some wrote none)" if len(distcp) <= max(distcp) else "")
            )
        if any(f.rule == "lightning" for f in seen):
            notes.append("ranks: Lightning, rank 0 writes the .ckpt (DDP and one device alike)")
        rng = {f.ids[0] for f in seen if f.rule == "rng"}
        if rng:
            known["HF Trainer"] = 1 + max(rng)
            notes.append(f"ranks: HF Trainer, {1 + max(rng)} process(es) from the rng_state_R.pth names")
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
        experts = [f.ids[1] for f in seen if f.rule == "ds_expert"]
        per_layer = 1 + max(experts, default=0)
        if not experts:
            if ep is not None and ep > 1:
                raise InputError(
                    f"‹ep› {ep} applies to a DeepSpeed-MoE checkpoint (layer_L_expert_E_mp_rank_MM_model_states.pt "
                    "files); this one has none"
                )
        elif ep is None:
            notes.append(
                f"DeepSpeed-MoE: {len(experts):,} expert file(s), {per_layer} experts per MoE layer; the "
                "expert-parallel size is not in the names, so they are counted on rank 0 (--ep to spread them)"
            )
        elif per_layer % ep or ep > world // (tp * pp):
            raise InputError(
                f"‹ep› {ep} must divide the checkpoint's {per_layer} experts per MoE layer and be at most its "
                f"{world // (tp * pp)} data-parallel ranks"
            )
        else:
            notes.append(
                f"DeepSpeed-MoE: {per_layer} experts per MoE layer over ep {ep} (--ep): expert e's file written by "
                f"data-parallel rank e // {per_layer // ep}, expert-data-parallel rank 0"
            )
        experts_per_writer = per_layer // ep if experts and ep else per_layer
        return cls(gpus=world, tp=tp, pp=pp, zero=zero, ds_tp=ds_tp, experts_per_writer=experts_per_writer, notes=notes)


def _layer_stages(seen: list[_Seen], pp: int) -> dict[int, int]:
    """DeepSpeed layer index → pipeline stage: contiguous runs, `pp` of them, the heaviest as light as can be."""
    weights: dict[int, int] = defaultdict(int)
    for f in seen:
        if f.rule == "ds_layer":
            weights[f.ids[0]] += f.bytes
    layers = sorted(weights)
    if pp == 1 or not layers:
        return {layer: 0 for layer in layers}
    w = [weights[layer] for layer in layers]

    def parts_at(cap: int) -> int:
        count, run = 1, 0
        for x in w:
            if run + x > cap:
                count, run = count + 1, 0
            run += x
        return count

    lo, hi = max(w), sum(w)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if parts_at(mid) <= pp else (mid + 1, hi)
    stages, stage, run = {}, 0, 0
    for i, (layer, x) in enumerate(zip(layers, w, strict=True)):
        # a new stage when this one is full, or when every layer left needs a stage of its own
        if i and stage < pp - 1 and (run + x > lo or len(layers) - i <= pp - 1 - stage):
            stage, run = stage + 1, 0
        stages[layer] = stage
        run += x
    return stages


def _rank(f: _Seen, par: Parallelism, world: _World, stage_of_layer: dict[int, int]) -> int:
    if f.rule == "ds_zero":
        stage, tp = divmod(f.ids[1], world.ds_tp)
        return par.rank(stage, f.ids[0], tp)
    if f.rule == "ds_mp":
        stage, tp = divmod(f.ids[0], world.ds_tp)
        return par.rank(stage, 0, tp)
    if f.rule == "ds_layer":
        return par.rank(stage_of_layer[f.ids[0]], 0, f.ids[1])
    if f.rule == "ds_expert":
        return par.rank(0, f.ids[1] // world.experts_per_writer, 0)
    if f.rule == "megatron":
        tp, pp, ep = f.ids
        return par.rank(max(pp, 0), max(ep, 0), tp)
    if f.rule in ("distcp", "rng"):
        return f.ids[0]
    return 0


def _kind(f: _Seen, par: Parallelism) -> FileKind:
    p = PurePosixPath(f.path)
    name = p.name
    if f.rule == "ds_zero":
        return "small" if f.ids[2] else "optimizer"  # ZeRO-3's model_states hold placeholders only
    if f.rule == "ds_mp":
        return "mixed" if par.zero == 0 else "small" if par.pp > 1 else "weights"
    if f.rule in ("ds_layer", "ds_expert"):
        return "weights"
    if f.rule == "lightning":
        return "mixed"  # the module's state_dict, the optimizer's and the loops' in one torch.save
    if f.rule == "megatron":
        return "optimizer" if name == "distrib_optim.pt" else "mixed"
    if f.rule == "distcp":
        return "optimizer" if any(part.startswith("optimizer") for part in p.parts[:-1]) else "mixed"
    if f.rule == "rng" or name in SMALL_NAMES or p.suffix in (".json", ".txt", ".py", ".md", ".yaml", ".model"):
        return "small"
    if name.startswith("optimizer") and p.suffix in (".pt", ".bin"):
        return "optimizer"
    if p.suffix == ".safetensors" or name.startswith("pytorch_model") and p.suffix == ".bin":
        return "weights"
    return "small" if f.bytes < SMALL_FILE_BYTES else "mixed"


def _rank_zero_note(seen: list[_Seen]) -> list[str]:
    plain = [PurePosixPath(f.path).name for f in seen if f.rule == "other"]
    if not plain:
        return []
    shown = sorted(set(plain))
    return [
        f"{len(plain):,} file(s) no name assigns a writer to ({', '.join(shown[:6])}{', …' if len(shown) > 6 else ''}) "
        "are written by rank 0"
    ]
