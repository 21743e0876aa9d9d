"""Build a CheckpointPlan: the bytes, files, writers and bandwidth of one save."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ckplan.errors import InputError, did_you_mean
from ckplan.frameworks import FRAMEWORKS, framework_of
from ckplan.frameworks.layout import (
    FileFormat,
    Layout,
    LayoutInput,
    ManifestFile,
    Parallelism,
    WritePath,
    file_format,
    manifest_path_error,
)
from ckplan.model.architecture import Architecture, Tensor, parameter_count
from ckplan.model.architecture import tensors as model_tensors
from ckplan.model.states import OPTIMIZERS, PRECISIONS, StateBytes, state_breakdown
from ckplan.schema import Finite, Fraction, Int, Model, PositiveSeconds
from ckplan.sizing.restore import RestoreManifest, plan_restore, restore_error
from ckplan.units import MAX_BYTES, MAX_GPUS, MAX_PARAMETERS, check_range, fmt_bytes
from ckplan.version import __version__

WRITE_CALL_BYTES = 2**20  # ops are counted at one write() per MiB, the probe's block size
PLAN_SCHEMA_VERSION = 1
DEFAULT_GPUS_PER_NODE = 8
MEASURED = "measured from disk"
# The most files one plan may list. Reading a plan costs ~8 µs of CPU per file here (JSON, validation, the checks
# against its manifest), so a plan of this many (~95 MB from `size --json`) loads in ~4 s; a save of more files
# is one of over 260,000 ranks with two files each.
MAX_MANIFEST_FILES = 2**19  # the shape_source of a plan read from a checkpoint directory (size --from)

# Bounds on what a plan file may hold: the constraints build_plan's own plans meet, so that a hand-edited
# or truncated plan is refused where it is read rather than producing negative or infinite figures.
Count = Annotated[Int, Field(ge=0)]
Positive = Annotated[Int, Field(ge=1)]
Gpus = Annotated[Int, Field(ge=1, le=MAX_GPUS)]
Amount = Annotated[Finite, Field(ge=0)]


class TrainingSetup(Model):
    model: str | None = None
    parameters: Annotated[Int | None, Field(ge=1, le=MAX_PARAMETERS)]  # None: unknown (a plan measured from disk)
    shape_source: str  # the catalog model whose tensor shapes were used, or "measured from disk: DIR" (size --from)
    optimizer: str = "adam"
    precision: str = "bf16-mixed"
    framework: str = "deepspeed"
    gpus: Gpus = 8
    gpus_per_node: Gpus = DEFAULT_GPUS_PER_NODE
    nodes: Positive = 1
    tp: Positive = 1
    pp: Positive = 1
    dp: Positive = 8
    zero: Annotated[Int, Field(ge=0, le=3)] = 1
    ep: Positive = 1  # expert parallelism, within dp; left out of the JSON when 1 (plans without it read back as 1)
    dtype_overrides: dict[str, str] = Field(default_factory=dict)
    step: Count = 1000
    options: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent_world(self) -> TrainingSetup:
        if self.tp * self.pp * self.dp != self.gpus:
            raise ValueError(f"tp {self.tp} × pp {self.pp} × dp {self.dp} is not gpus {self.gpus}")
        if self.gpus_per_node > self.gpus:
            raise ValueError(f"gpus_per_node {self.gpus_per_node} exceeds gpus {self.gpus}")
        if self.nodes != math.ceil(self.gpus / self.gpus_per_node):
            raise ValueError(
                f"nodes {self.nodes} is not gpus {self.gpus} ÷ gpus_per_node {self.gpus_per_node}, rounded up"
            )
        if self.dp % self.ep:
            raise ValueError(f"ep {self.ep} does not divide dp {self.dp}")
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {self.framework!r}{did_you_mean(self.framework, sorted(FRAMEWORKS))}")
        # a plan read from a checkpoint directory does not know the optimizer or precision that made it
        unknown = ("unknown",) if self.shape_source.startswith(MEASURED) else ()
        if self.optimizer not in (*OPTIMIZERS, *unknown):
            raise ValueError(f"unknown optimizer {self.optimizer!r}{did_you_mean(self.optimizer, list(OPTIMIZERS))}")
        if self.precision not in (*PRECISIONS, *unknown):
            raise ValueError(f"unknown precision {self.precision!r}{did_you_mean(self.precision, list(PRECISIONS))}")
        return self

    @model_serializer(mode="wrap")
    def _omit_dense_ep(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.ep == 1:
            data.pop("ep", None)
        return data


class NodeLoad(Model):
    node: Count
    bytes: Count
    files: Count
    writers: Count


class Operations(Model):
    """Metadata and data operations of one save, counted the way a durable save does them."""

    creates: Count
    writes: Count
    fsyncs: Count
    renames: Count
    total: Count
    write_call_bytes: Positive = WRITE_CALL_BYTES


class IntervalDemand(Model):
    interval_s: PositiveSeconds
    max_overhead: Fraction
    stall_budget_s: Annotated[Finite, Field(gt=0)]  # at least 1 µs × 0.0001%: never 0
    average_bandwidth_bytes_per_s: Amount
    burst_bandwidth_bytes_per_s: Amount
    burst_bandwidth_per_node_bytes_per_s: Amount  # the busiest node's share, within the stall budget
    naive_bandwidth_bytes_per_s: Amount  # N·C/T: every GPU writing a full copy C
    naive_explanation: str
    ops_per_save: Count
    iops_needed: Amount


class CheckpointPlan(Model):
    kind: Literal["ckplan.plan"] = "ckplan.plan"
    schema_version: int = PLAN_SCHEMA_VERSION
    ckplan_version: str = __version__
    setup: TrainingSetup
    parameters: Annotated[int | None, Field(ge=1, le=MAX_PARAMETERS)]  # None: unknown (size --from without --params)
    bytes_per_parameter: (
        Amount | None
    )  # persisted model and optimizer state per parameter; None when the parameters are unknown
    state_bytes: Count
    # small files and per-file overhead; not bounded: DeepSpeed ZeRO-3 without mixed precision comes out negative
    # (its manifest leaves out the fp32 weights that state_bytes counts), and a plan must read back what size wrote
    small_file_bytes: Int
    total_bytes: Count
    breakdown: list[StateBytes]
    not_saved: list[StateBytes]  # states training holds that this framework does not write
    file_count: Positive
    writers: Positive
    nodes_writing: Positive
    max_writers_per_node: Positive
    bytes_per_rank_max: Count
    bytes_per_node_max: Count
    nodes: Annotated[list[NodeLoad], Field(min_length=1)]
    operations: Operations
    manifest: Annotated[list[ManifestFile], Field(min_length=1, max_length=MAX_MANIFEST_FILES)]
    write_path: WritePath = "buffered"  # how the framework's writer reaches the target (layout and its options)
    coordinated_save: bool = False  # the ranks plan and barrier together (DCP): a fixed cost per save
    assumptions: list[str]
    interval: IntervalDemand | None = None  # `size --interval`: the demand of that one interval
    typical_demand: list[IntervalDemand] = Field(default_factory=list)  # `size` without --interval: TYPICAL_INTERVALS_S
    # what every rank reads on resume; None where the layout cannot say (its reason is in the assumptions) and in
    # plan files written before it. It follows from the manifest and setup, so the fingerprint leaves it out.
    restore: RestoreManifest | None = None
    _writer_bytes: tuple[list[ManifestFile], dict[int, dict[int, dict[FileFormat, int]]]] | None = PrivateAttr(None)

    @property
    def fingerprint(self) -> str:
        """Identifies the manifest (paths, sizes, ranks), so a profile's replay is reused only for the same plan."""
        digest = hashlib.sha256()
        for f in self.manifest:
            digest.update(f"{f.path}\0{f.bytes}\0{f.rank}\n".encode())
        return digest.hexdigest()[:16]

    def writer_bytes(self, node: int) -> dict[int, dict[FileFormat, int]]:
        """Rank → bytes per file format, of every writer on `node`. The save-time model asks for it dozens of times
        per recommendation (every what-if), so the manifest is summed once per plan: a plan of a million files
        then costs one pass, not one per question."""
        if self._writer_bytes is None or self._writer_bytes[0] is not self.manifest:
            table: dict[int, dict[int, dict[FileFormat, int]]] = {}
            by_suffix: dict[str, FileFormat] = {}  # a file's format follows its name's suffix
            for f in self.manifest:
                formats = table.setdefault(f.node, {}).setdefault(f.rank, {})
                suffix = f.path[f.path.rfind(".") :]
                fmt = by_suffix.get(suffix) or by_suffix.setdefault(suffix, file_format(suffix))
                formats[fmt] = formats.get(fmt, 0) + f.bytes
            self._writer_bytes = (self.manifest, table)
        return self._writer_bytes[1].get(node, {})

    @property
    def busiest_node(self) -> NodeLoad:
        """The node writing the most bytes: it bounds a synchronous save."""
        return max(self.nodes, key=lambda n: n.bytes)

    @model_validator(mode="after")
    def _consistent_manifest(self) -> CheckpointPlan:
        """Every figure a plan carries follows from its manifest and setup, as build_plan made them: a hand-edited
        or truncated plan that disagrees with itself is refused here, where it is read, naming the field."""
        s = self.setup
        seen: dict[str, int] = {}  # path → bytes
        gpus, per_node = s.gpus, s.gpus_per_node
        # a framework never writes an empty state file; a directory on disk may hold one (a save cut short), which
        # `size --from` measures as it is and notes. A small file (a tag, a config) may be empty.
        measured = s.shape_source.startswith(MEASURED)
        for i, f in enumerate(self.manifest):
            why = manifest_path_error(f.path)
            if why is None and f.path in seen:
                why = "is listed twice"
            if why is None and f.rank >= gpus:
                why = f"has rank {f.rank}, not below setup.gpus {gpus}"
            if why is None and f.node != f.rank // per_node:
                why = f"has node {f.node}, not rank {f.rank} ÷ setup.gpus_per_node {per_node} ({f.rank // per_node})"
            if why is None and f.bytes == 0 and f.kind != "small" and not measured:
                why = f"is a {f.kind} file of 0 bytes: a framework never writes an empty state file"
            if why is not None:
                raise ValueError(f"manifest[{i}].path {f.path[:120]!r} {why}")
            seen[f.path] = f.bytes
        derived = manifest_fields(self.manifest, self.operations.renames)
        for name, value in derived.items():
            if name != "manifest" and getattr(self, name) != value:
                where, have, want = _first_difference(name, getattr(self, name), value)
                raise ValueError(f"{where} is {have}, but the manifest gives {want}")
        if self.total_bytes > MAX_BYTES:
            raise ValueError(f"total_bytes {self.total_bytes:,} is over 1 EB")
        if self.total_bytes == 0:
            raise ValueError("the manifest's files hold 0 bytes: a save writes something")
        if self.state_bytes != sum(b.bytes for b in self.breakdown):
            raise ValueError("state_bytes is not the sum of breakdown[].bytes")
        if self.small_file_bytes != self.total_bytes - self.state_bytes:
            raise ValueError("small_file_bytes is not total_bytes − state_bytes")
        if self.parameters != s.parameters:
            raise ValueError(f"parameters {self.parameters} is not setup.parameters {s.parameters}")
        if self.restore is not None:
            why = restore_error(
                self.restore, gpus=gpus, gpus_per_node=per_node, nodes=s.nodes, files=seen, total_bytes=self.total_bytes
            )
            if why is not None:
                raise ValueError(why)
        return self

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, version: int) -> int:
        if version != PLAN_SCHEMA_VERSION:
            raise ValueError(
                f"plan schema version {version}; this ckplan reads version {PLAN_SCHEMA_VERSION}: "
                "run `ckplan size --json` again"
            )
        return version

    def describe(self, world: bool = True) -> str:
        """One line naming the model, optimizer, precision, framework and (with `world`) the GPUs."""
        from ckplan.units import fmt_count

        s = self.setup
        known = FRAMEWORKS.get(s.framework)
        shown = known.layout.shows_zero_stage if known is not None else "never"
        zero = f" ZeRO-{s.zero}" if shown == "always" or shown == "nonzero" and s.zero else ""
        if s.shape_source.startswith(MEASURED):  # size --from: only what the files tell
            params = f" ({s.parameters:,} params)" if s.parameters else ", parameters unknown"
            # a stage read from the files' names (frameworks/<name>.py), where the framework has stages
            zero = f" ZeRO-{s.zero}" if shown != "never" and s.zero else ""
            text = f"{s.framework}{zero} checkpoint measured from disk{params}"
        else:
            model = s.model or f"{fmt_count(s.parameters or 0)} parameters"
            text = f"{model} ({s.parameters:,} params) · {s.optimizer} · {s.precision} · {s.framework}{zero}"
        ep = f" ep {s.ep}" if s.ep > 1 else ""
        if world:
            return text + f" · {s.gpus} GPUs on {s.nodes} node(s), tp {s.tp} pp {s.pp} dp {s.dp}{ep}"
        return text + f" · tp {s.tp} pp {s.pp}{ep}, {s.gpus_per_node} GPUs per node"


def scaled_file_bytes(nbytes: int, scale: float) -> int:
    """A manifest file's bytes when a plan is written at `scale` (the probe's replay, validate's saves and their
    predictions shrink a plan to fit): at least one byte, so that every file of the plan is still written."""
    return max(1, int(nbytes * scale))


def _first_difference(name: str, have: Any, want: Any) -> tuple[str, Any, Any]:
    """Where two values of a plan field first differ: (dotted field, value there, value wanted)."""
    if isinstance(have, list) and isinstance(want, list):
        if len(have) != len(want):
            return f"{name} (length)", len(have), len(want)
        for i, (a, b) in enumerate(zip(have, want, strict=True)):
            if a != b:
                return _first_difference(f"{name}.{i}", a, b)
    if isinstance(have, Model) and isinstance(want, Model):
        for field in type(have).model_fields:
            if getattr(have, field) != getattr(want, field):
                return _first_difference(f"{name}.{field}", getattr(have, field), getattr(want, field))
    return name, have, want


def nearest_shape(parameters: float, catalog: dict[str, Architecture]) -> Architecture:
    """The dense catalog model closest in parameter count, to borrow its tensor shapes."""
    dense = [a for a in catalog.values() if a.experts == 1]
    # the published count stands in for the derived one (equal, or within its rounding: tests/test_sizing.py),
    # which spares building every model's tensor list on each start
    return min(dense, key=lambda a: abs(math.log(a.published_parameters / parameters)))


def build_plan(
    *,
    arch: Architecture,
    parameters: int | None = None,
    model_name: str | None = None,
    optimizer: str = "adam",
    precision: str = "bf16-mixed",
    framework: str = "deepspeed",
    gpus: int = 8,
    gpus_per_node: int | None = None,
    tp: int = 1,
    pp: int = 1,
    zero: int | None = None,
    dtype_overrides: dict[str, str] | None = None,
    step: int = 1000,
    options: dict[str, str] | None = None,
    ep: int = 1,
) -> CheckpointPlan:
    """Size one save. `arch` gives the shapes; `parameters`, if given, rescales the bytes.

    gpus_per_node defaults to DEFAULT_GPUS_PER_NODE, or to gpus when the job is smaller than one such node.
    `ep` > 1 shards a mixture-of-experts model's experts over that many data-parallel ranks (Parallelism's rank order),
    for the layouts whose framework has expert parallelism (megatron, dcp, deepspeed). `zero` None takes the
    layout's `default_zero` (hf: 0, Trainer under DDP; lightning: 0, its one stage; the others: 1).
    """
    if optimizer not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r}{did_you_mean(optimizer, list(OPTIMIZERS))}")
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}{did_you_mean(precision, list(PRECISIONS))}")
    layout = framework_of(framework).layout
    zero = layout.default_zero if zero is None else zero
    par = _parallelism(
        arch, gpus, gpus_per_node, tp, pp, zero, ep, borrowed=parameters is not None and model_name is None
    )
    _check_layout(layout, par, ep, options or {})
    setup = TrainingSetup(
        model=model_name,
        parameters=int(parameters) if parameters else parameter_count(arch),
        shape_source=arch.name,
        optimizer=optimizer,
        precision=precision,
        framework=framework,
        gpus=gpus,
        gpus_per_node=par.gpus_per_node,
        nodes=math.ceil(gpus / par.gpus_per_node),
        tp=tp,
        pp=pp,
        dp=par.dp,
        zero=zero,
        ep=ep,
        dtype_overrides=dict(dtype_overrides or {}),
        step=step,
        options=options or {},
    )
    return _sized(setup, arch, par, layout)


def _sized(setup: TrainingSetup, arch: Architecture, par: Parallelism, layout: Layout) -> CheckpointPlan:
    """The plan of one save of `setup`: its states, its files as the layout writes them, and their restore reads."""
    ts = model_tensors(arch)
    derived = parameter_count(arch)
    params, options, zero = setup.parameters or derived, setup.options, setup.zero
    scale = params / derived

    def states(tensors: list[Tensor]) -> list[StateBytes]:
        fp32_master = layout.fp32_master(zero)
        return state_breakdown(tensors, setup.optimizer, setup.precision, setup.dtype_overrides, fp32_master)

    held = states(ts)
    saved = layout.persisted(held, zero, options)
    breakdown = [s.model_copy(update={"bytes": int(round(s.bytes * scale))}) for s in saved]
    not_saved = [s.model_copy(update={"bytes": int(round(s.bytes * scale))}) for s in _dropped(held, saved)]
    manifest = layout.files(
        LayoutInput(par=par, tensors=ts, states=states, scale=scale, step=setup.step, options=options)
    )
    _check_manifest(manifest, f"{params:,} parameters are too few for {setup.framework} on ‹gpus› {setup.gpus}")
    state_bytes = sum(s.bytes for s in breakdown)
    files = manifest_fields(manifest, layout.renames_per_save)
    assumptions = _assumptions(arch, setup.model, params, derived, layout, par, held, saved, options)
    restore, unknown_reads = plan_restore(layout, par, manifest, files["total_bytes"])
    return CheckpointPlan(
        setup=setup,
        parameters=params,
        bytes_per_parameter=state_bytes / params,
        state_bytes=state_bytes,
        small_file_bytes=files["total_bytes"] - state_bytes,
        breakdown=breakdown,
        not_saved=not_saved,
        **files,
        write_path=layout.write_path(options),
        coordinated_save=layout.coordinated_save,
        assumptions=assumptions + unknown_reads,
        restore=restore,
    )


def _check_layout(layout: Layout, par: Parallelism, ep: int, options: dict[str, str]) -> None:
    """The layout takes this parallelism, expert parallelism where asked, and these --option names."""
    if ep > 1 and not layout.supports_ep:
        takes = ", ".join(name for name, other in sorted(FRAMEWORKS.items()) if other.layout.supports_ep)
        raise InputError(
            f"‹ep› {ep}: the {layout.name} layout has no expert parallelism (the layouts with it: {takes})"
        )
    layout.check(par)
    known = layout.options  # the --option names a layout reads; most read none
    for name in options:
        if name not in known:
            takes = f"takes {', '.join(known)}" if known else "takes no --option"
            raise InputError(f"unknown ‹options› {name!r}: the {layout.name} layout {takes}")
    layout.check_options(par, options)


def _check_manifest(manifest: list[ManifestFile], too_few: str) -> None:
    """A manifest ckplan can plan: not too many files, and no state file left empty."""
    if len(manifest) > MAX_MANIFEST_FILES:
        raise InputError(
            f"this save writes {len(manifest):,} files; ckplan plans saves of at most {MAX_MANIFEST_FILES:,} files "
            "(a plan file of that many takes seconds to read)"
        )
    empty = [f.path for f in manifest if f.bytes == 0 and f.kind != "small"]
    if empty:  # a model of a handful of parameters, sharded so that some ranks hold none of them
        raise InputError(
            f"{too_few}: {len(empty):,} state file(s) would hold 0 bytes ({empty[0]}{', …' if len(empty) > 1 else ''})"
        )


def _parallelism(
    arch: Architecture,
    gpus: int,
    gpus_per_node: int | None,
    tp: int,
    pp: int,
    zero: int,
    ep: int = 1,
    borrowed: bool = False,
) -> Parallelism:
    for name, value in (("gpus", gpus), ("gpus_per_node", gpus_per_node), ("tp", tp), ("pp", pp), ("ep", ep)):
        if value is not None:
            check_range(value, f"‹{name}›", 1, MAX_GPUS, limit=f"{MAX_GPUS:,} GPUs")
    if gpus_per_node is None:
        gpus_per_node = min(DEFAULT_GPUS_PER_NODE, gpus)
    elif gpus_per_node > gpus:
        raise InputError(f"‹gpus_per_node› {gpus_per_node} exceeds ‹gpus› {gpus}: give the GPUs per node the job uses")
    if zero not in (0, 1, 2, 3):
        raise InputError(f"‹zero› must be 0, 1, 2 or 3, got {zero}")
    if gpus % (tp * pp):
        raise InputError(f"‹gpus› {gpus} is not divisible by ‹tp› {tp} × ‹pp› {pp} = {tp * pp}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise InputError(f"‹gpus› {gpus} is not a whole number of nodes of ‹gpus_per_node› {gpus_per_node}")
    if arch.heads % tp or arch.kv_heads % tp and tp % arch.kv_heads:
        raise InputError(f"‹tp› {tp} does not divide {arch.display}'s {arch.heads} attention heads")
    if pp > arch.layers:
        raise InputError(f"‹pp› {pp} exceeds {arch.display}'s {arch.layers} layers")
    if ep > 1:
        dp = gpus // (tp * pp)
        if arch.experts == 1:
            raise InputError(
                f"‹ep› {ep} needs a mixture-of-experts model: {arch.display} is dense"
                + (" (--params borrows a dense model's shapes; give --model)" if borrowed else "")
            )
        if dp % ep:
            raise InputError(
                f"‹ep› {ep} does not divide the {dp} data-parallel ranks (‹gpus› {gpus} / (‹tp› {tp} × ‹pp› {pp})): "
                "expert parallelism is carved out of data parallelism"
            )
        if arch.experts % ep:
            raise InputError(f"‹ep› {ep} does not divide {arch.display}'s {arch.experts} experts")
    return Parallelism(gpus=gpus, gpus_per_node=gpus_per_node, tp=tp, pp=pp, zero=zero, ep=ep)


def _dropped(held: list[StateBytes], saved: list[StateBytes]) -> list[StateBytes]:
    """The held states that no saved state holds: a saved state holds a held one under its own name or as a
    copy of the same kind, dtype and size (HF Trainer's gathered 16-bit weights of DeepSpeed's ZeRO-3 model)."""
    kept = {(s.kind, s.dtype, s.bytes) for s in saved}
    names = {s.name for s in saved}
    return [s for s in held if s.name not in names and (s.kind, s.dtype, s.bytes) not in kept]


def _assumptions(
    arch: Architecture,
    model_name: str | None,
    params: int,
    derived: int,
    layout: Layout,
    par: Parallelism,
    held: list[StateBytes],
    saved: list[StateBytes],
    options: dict[str, str],
) -> list[str]:
    out = []
    if model_name:
        out.append(f"{arch.display}: {derived:,} parameters derived from its config ({arch.source})")
    else:
        out.append(
            f"--params {params:,}: tensor shapes borrowed from {arch.display} (nearest dense catalog model), "
            f"bytes scaled by {params / derived:.4f}"
        )
    out.append(f"layout: {layout.description}")
    out.append(
        f"write path: {layout.write_path(options)} "
        + (
            "(O_DIRECT, bypassing the page cache)"
            if layout.write_path(options) == "direct"
            else "(through the page cache, fsync at the end of each file)"
        )
    )
    out.append(
        f"parallelism: {par.gpus} GPUs = tp {par.tp} × pp {par.pp} × dp {par.dp}, ZeRO stage {par.zero}, "
        f"{par.gpus_per_node} GPUs per node; rank order {layout.rank_order}"
    )
    if par.ep > 1:
        local = arch.experts // par.ep
        out.append(
            f"expert parallelism: ep {par.ep} × expert-data-parallel {par.edp} = the {par.dp} data-parallel ranks; "
            f"an EP group is {par.ep} consecutive dp ranks (EP rank = dp rank mod {par.ep}, expert-data-parallel "
            f"rank = dp rank div {par.ep}); {local} expert(s) per EP rank in contiguous blocks (expert e on EP "
            f"rank e div {local}): each EP rank holds 1/{par.ep} of the expert weights and their optimizer states"
        )
    out += layout.notes(par, options)
    dropped = _dropped(held, saved)
    if dropped:
        out.append(
            "not saved by this framework: "
            + ", ".join(f"{s.name} ({s.dtype})" for s in dropped)
            + " — the fp32 copy is what persists"
        )
    out.append("gradients are never saved; small-file sizes are typical values (RNG ~15 KB, scheduler ~1.5 KB)")
    out.append(f"operations: one create, one fsync per file, one write() per {fmt_bytes(WRITE_CALL_BYTES)}")
    return out


def manifest_fields(manifest: list[ManifestFile], renames: int) -> dict[str, Any]:
    """The CheckpointPlan fields that follow from a save's files: totals, each node's load, the busiest rank and
    node, and the operations (one create and one fsync per file, one write() per WRITE_CALL_BYTES, and the
    framework's renames). A sized plan and a plan measured from disk both take them from here."""
    per_rank: dict[int, int] = defaultdict(int)
    node_bytes: dict[int, int] = defaultdict(int)
    node_files: dict[int, int] = defaultdict(int)
    node_ranks: dict[int, set[int]] = defaultdict(set)
    writes = 0
    for f in manifest:
        b, rank, node = f.bytes, f.rank, f.node
        per_rank[rank] += b
        node_bytes[node] += b
        node_files[node] += 1
        node_ranks[node].add(rank)
        writes += -(-b // WRITE_CALL_BYTES) or 1  # one write() per WRITE_CALL_BYTES, at least one per file
    nodes = [
        NodeLoad(node=n, bytes=node_bytes[n], files=node_files[n], writers=len(node_ranks[n]))
        for n in sorted(node_bytes)
    ]
    ops = Operations(
        creates=len(manifest),
        writes=writes,
        fsyncs=len(manifest),
        renames=renames,
        total=2 * len(manifest) + writes + renames,
    )
    return dict(
        total_bytes=sum(node_bytes.values()),
        file_count=len(manifest),
        writers=len(per_rank),
        nodes_writing=len(nodes),
        max_writers_per_node=max(n.writers for n in nodes),
        bytes_per_rank_max=max(per_rank.values()),
        bytes_per_node_max=max(n.bytes for n in nodes),
        nodes=nodes,
        operations=ops,
        manifest=manifest,
    )


TYPICAL_INTERVALS_S = (300.0, 900.0, 1800.0, 3600.0)  # the demand `size` shows when no interval is given


def interval_demand(plan: CheckpointPlan, interval_s: float, max_overhead: float) -> IntervalDemand:
    """Bandwidth and IOPS one save needs if it repeats every `interval_s` and may block for max_overhead of it."""
    window = interval_s * max_overhead
    gpus = plan.setup.gpus
    naive = gpus * plan.total_bytes / window
    explanation = (
        f"naive N·C/T assumes each of {gpus} GPUs writes the whole {fmt_bytes(plan.total_bytes)} checkpoint; "
        f"{plan.setup.framework} shards it so {plan.writers} writer(s) write {fmt_bytes(plan.total_bytes)} in total "
        f"(the naive figure is {naive * window / plan.total_bytes:.0f}× too high)"
    )
    return IntervalDemand(
        interval_s=interval_s,
        max_overhead=max_overhead,
        stall_budget_s=window,
        average_bandwidth_bytes_per_s=plan.total_bytes / interval_s,
        burst_bandwidth_bytes_per_s=plan.total_bytes / window,
        burst_bandwidth_per_node_bytes_per_s=plan.bytes_per_node_max / window,
        naive_bandwidth_bytes_per_s=naive,
        naive_explanation=explanation,
        ops_per_save=plan.operations.total,
        iops_needed=plan.operations.total / window,
    )
