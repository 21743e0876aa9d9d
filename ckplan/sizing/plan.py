"""Build a CheckpointPlan: the bytes, files, writers and bandwidth of one save."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Literal

from pydantic import BaseModel, Field

from ckplan import __version__
from ckplan.errors import InputError
from ckplan.sizing.architecture import Architecture, parameter_count, tensors as model_tensors
from ckplan.sizing.layouts import LAYOUTS
from ckplan.sizing.layouts.base import LayoutInput, ManifestFile, Parallelism, WritePath
from ckplan.sizing.states import OPTIMIZERS, PRECISIONS, StateBytes, state_breakdown
from ckplan.units import fmt_bytes

WRITE_CALL_BYTES = 2**20  # ops are counted at one write() per MiB, the probe's block size


class TrainingSetup(BaseModel):
    model: str | None = None
    parameters: int
    shape_source: str  # the catalog model whose tensor shapes were used
    optimizer: str = "adam"
    precision: str = "bf16-mixed"
    framework: str = "deepspeed"
    gpus: int = 8
    gpus_per_node: int = 8
    nodes: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 8
    zero: int = 1
    dtype_overrides: dict[str, str] = Field(default_factory=dict)
    step: int = 1000
    options: dict[str, str] = Field(default_factory=dict)


class NodeLoad(BaseModel):
    node: int
    bytes: int
    files: int
    writers: int


class Operations(BaseModel):
    """Metadata and data operations of one save, counted the way a durable save does them."""

    creates: int
    writes: int
    fsyncs: int
    renames: int
    total: int
    write_call_bytes: int = WRITE_CALL_BYTES


class IntervalDemand(BaseModel):
    interval_s: float
    max_overhead: float
    stall_budget_s: float
    average_bandwidth_bytes_per_s: float
    burst_bandwidth_bytes_per_s: float
    burst_bandwidth_per_node_bytes_per_s: float  # the busiest node's share, within the stall budget
    naive_bandwidth_bytes_per_s: float  # N·C/T: every GPU writing a full copy C
    naive_explanation: str
    ops_per_save: int
    iops_needed: float


class CheckpointPlan(BaseModel):
    kind: Literal["ckplan.plan"] = "ckplan.plan"
    schema_version: int = 1
    ckplan_version: str = __version__
    setup: TrainingSetup
    parameters: int
    bytes_per_parameter: float  # persisted model and optimizer state per parameter
    state_bytes: int
    small_file_bytes: int  # small files and per-file overhead
    total_bytes: int
    breakdown: list[StateBytes]
    not_saved: list[StateBytes]  # states training holds that this framework does not write
    file_count: int
    writers: int
    nodes_writing: int
    max_writers_per_node: int
    bytes_per_rank_max: int
    bytes_per_node_max: int
    nodes: list[NodeLoad]
    operations: Operations
    manifest: list[ManifestFile]
    write_path: WritePath = "buffered"  # how the framework's writer reaches the target (layout and its options)
    coordinated_save: bool = False  # the ranks plan and barrier together (DCP): a fixed cost per save
    assumptions: list[str]
    interval: IntervalDemand | None = None

    @property
    def busiest_node(self) -> NodeLoad:
        """The node writing the most bytes: it bounds a synchronous save."""
        return max(self.nodes, key=lambda n: n.bytes)

    def describe(self, world: bool = True) -> str:
        """One line naming the model, optimizer, precision, framework and (with `world`) the GPUs."""
        from ckplan.units import fmt_count

        s = self.setup
        model = s.model or f"{fmt_count(s.parameters)} parameters"
        zero = f" ZeRO-{s.zero}" if s.framework in ("deepspeed", "dcp", "megatron") else ""
        text = f"{model} ({s.parameters:,} params) · {s.optimizer} · {s.precision} · {s.framework}{zero}"
        if world:
            return text + f" · {s.gpus} GPUs on {s.nodes} node(s), tp {s.tp} pp {s.pp} dp {s.dp}"
        return text + f" · tp {s.tp} pp {s.pp}, {s.gpus_per_node} GPUs per node"


def nearest_shape(parameters: float, catalog: dict[str, Architecture]) -> Architecture:
    """The dense catalog model closest in parameter count, to borrow its tensor shapes."""
    dense = [a for a in catalog.values() if a.experts == 1]
    # the published count stands in for the derived one (equal, or within its rounding: tests/test_sizing.py),
    # which spares building every model's tensor list on each start
    return min(dense, key=lambda a: abs(math.log(a.published_parameters / parameters)))


def build_plan(*, arch: Architecture, parameters: int | None = None, model_name: str | None = None,
               optimizer: str = "adam", precision: str = "bf16-mixed", framework: str = "deepspeed",
               gpus: int = 8, gpus_per_node: int = 8, tp: int = 1, pp: int = 1, zero: int = 1,
               dtype_overrides: dict[str, str] | None = None, step: int = 1000,
               options: dict[str, str] | None = None) -> CheckpointPlan:
    """Size one save. `arch` gives the shapes; `parameters`, if given, rescales the bytes."""
    if optimizer not in OPTIMIZERS:
        from ckplan.catalog import closest
        raise InputError(f"unknown optimizer {optimizer!r}{closest(optimizer, list(OPTIMIZERS))}")
    if precision not in PRECISIONS:
        from ckplan.catalog import closest
        raise InputError(f"unknown precision {precision!r}{closest(precision, list(PRECISIONS))}")
    if framework not in LAYOUTS:
        from ckplan.catalog import closest
        raise InputError(f"unknown framework {framework!r}{closest(framework, sorted(LAYOUTS))}")
    par = _parallelism(arch, gpus, gpus_per_node, tp, pp, zero)
    layout = LAYOUTS[framework]
    layout.check(par)
    write_path = layout.write_path(options or {})
    overrides = dict(dtype_overrides or {})
    ts = model_tensors(arch)
    derived = parameter_count(arch)
    params = int(parameters) if parameters else derived
    scale = params / derived

    def states(subset):
        return state_breakdown(subset, optimizer, precision, overrides)

    held = states(ts)
    saved = layout.persisted(held, zero)
    saved_names = {s.name for s in saved}
    breakdown = [s.model_copy(update={"bytes": int(round(s.bytes * scale))}) for s in saved]
    not_saved = [s.model_copy(update={"bytes": int(round(s.bytes * scale))}) for s in held if s.name not in saved_names]
    manifest = layout.files(LayoutInput(par=par, tensors=ts, states=states, scale=scale, step=step, options=options or {}))

    state_bytes = sum(s.bytes for s in breakdown)
    total_bytes = sum(f.bytes for f in manifest)
    per_rank: dict[int, int] = defaultdict(int)
    per_node: dict[int, list] = defaultdict(lambda: [0, 0, set()])
    for f in manifest:
        per_rank[f.rank] += f.bytes
        load = per_node[f.node]
        load[0] += f.bytes
        load[1] += 1
        load[2].add(f.rank)
    nodes = [NodeLoad(node=n, bytes=b, files=c, writers=len(r)) for n, (b, c, r) in sorted(per_node.items())]
    writes = sum(max(1, math.ceil(f.bytes / WRITE_CALL_BYTES)) for f in manifest)
    renames = getattr(layout, "renames_per_save", 0)
    ops = Operations(creates=len(manifest), writes=writes, fsyncs=len(manifest), renames=renames,
                     total=2 * len(manifest) + writes + renames)
    assumptions = _assumptions(arch, model_name, params, derived, layout, par, held, saved, options or {})
    return CheckpointPlan(
        setup=TrainingSetup(model=model_name, parameters=params, shape_source=arch.name, optimizer=optimizer,
                            precision=precision, framework=framework, gpus=gpus, gpus_per_node=par.gpus_per_node,
                            nodes=math.ceil(gpus / par.gpus_per_node), tp=tp, pp=pp, dp=par.dp, zero=zero,
                            dtype_overrides=overrides, step=step, options=options or {}),
        parameters=params, bytes_per_parameter=state_bytes / params, state_bytes=state_bytes,
        small_file_bytes=total_bytes - state_bytes, total_bytes=total_bytes, breakdown=breakdown,
        not_saved=not_saved, file_count=len(manifest), writers=len(per_rank), nodes_writing=len(nodes),
        max_writers_per_node=max(n.writers for n in nodes), bytes_per_rank_max=max(per_rank.values()),
        bytes_per_node_max=max(n.bytes for n in nodes), nodes=nodes, operations=ops, manifest=manifest,
        write_path=write_path, coordinated_save=layout.coordinated_save, assumptions=assumptions)


def _parallelism(arch: Architecture, gpus: int, gpus_per_node: int, tp: int, pp: int, zero: int) -> Parallelism:
    for name, value in (("--gpus", gpus), ("--gpus-per-node", gpus_per_node), ("--tp", tp), ("--pp", pp)):
        if value < 1:
            raise InputError(f"{name} must be ≥ 1, got {value}")
    if zero not in (0, 1, 2, 3):
        raise InputError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if gpus % (tp * pp):
        raise InputError(f"--gpus {gpus} is not divisible by --tp {tp} × --pp {pp} = {tp * pp}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise InputError(f"--gpus {gpus} is not a whole number of nodes of --gpus-per-node {gpus_per_node}")
    if arch.heads % tp or arch.kv_heads % tp and tp % arch.kv_heads:
        raise InputError(f"--tp {tp} does not divide {arch.display}'s {arch.heads} attention heads")
    if pp > arch.layers:
        raise InputError(f"--pp {pp} exceeds {arch.display}'s {arch.layers} layers")
    return Parallelism(gpus=gpus, gpus_per_node=min(gpus_per_node, gpus), tp=tp, pp=pp, zero=zero)


def _assumptions(arch, model_name, params, derived, layout, par, held, saved, options) -> list[str]:
    out = []
    if model_name:
        out.append(f"{arch.display}: {derived:,} parameters derived from its config ({arch.source})")
    else:
        out.append(f"--params {params:,}: tensor shapes borrowed from {arch.display} (nearest dense catalog model), "
                   f"bytes scaled by {params / derived:.4f}")
    out.append(f"layout: {layout.description}")
    out.append(f"write path: {layout.write_path(options)} "
               + ("(O_DIRECT, bypassing the page cache)" if layout.write_path(options) == "direct"
                  else "(through the page cache, fsync at the end of each file)"))
    out.append(f"parallelism: {par.gpus} GPUs = tp {par.tp} × pp {par.pp} × dp {par.dp}, ZeRO stage {par.zero}, "
               f"{par.gpus_per_node} GPUs per node; rank order tp, dp, pp")
    dropped = [s for s in held if s not in saved]
    if dropped:
        out.append("not saved by this framework: " + ", ".join(f"{s.name} ({s.dtype})" for s in dropped)
                   + " — the fp32 copy is what persists")
    out.append("gradients are never saved; small-file sizes are typical values (RNG ~15 KB, scheduler ~1.5 KB)")
    out.append(f"operations: one create, one fsync per file, one write() per {fmt_bytes(WRITE_CALL_BYTES)}")
    return out


def interval_demand(plan: CheckpointPlan, interval_s: float, max_overhead: float) -> IntervalDemand:
    """Bandwidth and IOPS one save needs if it repeats every `interval_s` and may block for max_overhead of it."""
    window = interval_s * max_overhead
    gpus = plan.setup.gpus
    naive = gpus * plan.total_bytes / window
    explanation = (f"naive N·C/T assumes each of {gpus} GPUs writes the whole {fmt_bytes(plan.total_bytes)} checkpoint; "
                   f"{plan.setup.framework} shards it so {plan.writers} writer(s) write {fmt_bytes(plan.total_bytes)} in total "
                   f"(the naive figure is {naive * window / plan.total_bytes:.0f}× too high)")
    return IntervalDemand(
        interval_s=interval_s, max_overhead=max_overhead, stall_budget_s=window,
        average_bandwidth_bytes_per_s=plan.total_bytes / interval_s,
        burst_bandwidth_bytes_per_s=plan.total_bytes / window,
        burst_bandwidth_per_node_bytes_per_s=plan.bytes_per_node_max / window,
        naive_bandwidth_bytes_per_s=naive, naive_explanation=explanation,
        ops_per_save=plan.operations.total, iops_needed=plan.operations.total / window)
