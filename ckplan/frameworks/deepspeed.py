"""DeepSpeed's checkpoint layout (deepspeed/runtime/engine.py, pipe/module.py).

- Tag directory `global_step{N}/`, and a `latest` file beside it holding the tag.
- ZeRO 0-2: `mp_rank_{mp:02d}_model_states.pt`, written by data-parallel rank 0
  of each model-parallel rank. ZeRO 0 keeps the optimizer inside it.
- ZeRO 1-2: every rank writes `[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt`
  with its partition of the fp32 master copy and optimizer states
  ('bf16_' when bf16 is enabled, as in _get_zero_ckpt_prefix).
- ZeRO 3: every rank writes `zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt`
  (parameter placeholders only) and its optimizer partition, which holds the
  fp32 parameter partition: the half weights are not saved.
- Pipeline parallelism: data-parallel rank 0 of each stage writes
  `layer_{idx:02d}-model_{tp:02d}-model_states.pt` per layer per tensor rank
  (PipelineModule.save_state_dict); layer 0 is the embedding, then the blocks,
  then the final norm and the head.
- With ZeRO, rank 0 also copies zero_to_fp32.py and (since 0.19) zero_to_torch.py into the save directory,
  beside `latest` (_save_zero_checkpoint calls _copy_recovery_script(save_dir), not the tag directory).
- The ZeRO optimizers hold their own flat fp32 copy of the weights even when training in fp32
  (stage_1_and_2.py's single_partition_of_fp32_groups is a clone; stage3.py's fp32_partitioned_groups_flat):
  with Adam, ZeRO-1/2 save 16 B/param in fp32 (the module's fp32 weights, the master, two moments) and ZeRO-3 12.
- The writer is torch.save through the page cache, unless the config chooses FastPersist
  (`checkpoint.writer.type = "fast"`, DeepNVMe), which writes with O_DIRECT: `--option writer=fast`.
Model-parallel rank = pipeline stage × tp + tensor rank, as PipelineParallelGrid counts it.
- DeepSpeed-MoE (--ep > 1, engine._save_moe_checkpoint; ZeRO 1-2, tp 1, pp 1 modelled): the expert weights leave
  mp_rank_00_model_states.pt (which keeps the dense ones and the routers) for one
  `layer_{moe_layer}_expert_{e}_mp_rank_00_model_states.pt` per MoE layer and expert, written by the EP rank that
  holds expert e among the expert-data-parallel rank 0 ranks (dp ranks 0..ep-1 in DeepSpeed's default E+D
  groups); each of those writes 1/ep of the expert weights. The ZeRO optimizer partitions keep one file per rank:
  dense states over dp ranks, each EP rank's expert states over its dp/ep ranks, 1/dp of the whole either way.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import ClassVar

from ckplan.errors import InputError
from ckplan.frameworks.framework import Framework, Saver
from ckplan.frameworks.layout import (
    LATEST_TAG_BYTES,
    ZERO_TO_FP32_SCRIPT_BYTES,
    ZERO_TO_TORCH_SCRIPT_BYTES,
    FileKind,
    LayoutDefaults,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    Readers,
    RestoreReads,
    WritePath,
    ZeroShown,
    dp_replicas,
    every_rank,
    file_name,
    not_read_note,
    own_rank,
    split_even,
    torch_save_bytes,
    total,
)
from ckplan.frameworks.logs import Extractor, Save, stamp
from ckplan.frameworks.names import Named, WorldPart
from ckplan.model.architecture import Tensor
from ckplan.model.states import StateBytes


class DeepSpeedLayout(LayoutDefaults):
    name = "deepspeed"
    description = "DeepSpeed engine.save_checkpoint (global_stepN/, per-rank ZeRO optimizer shards)"
    coordinated_save = False
    options: tuple[str, ...] = ("writer",)
    shows_zero_stage: ZeroShown = "always"
    # checkpoint.writer.type: torch.save through the page cache, or FastPersist with O_DIRECT
    writer_paths: dict[str, WritePath] = {"torch": "buffered", "fast": "direct"}

    def write_path(self, options: dict[str, str]) -> WritePath:
        writer = options.get("writer", "torch")
        if writer not in self.writer_paths:
            raise InputError(f"‹options› writer= takes {' or '.join(self.writer_paths)} for deepspeed, got {writer!r}")
        return self.writer_paths[writer]

    supports_ep = True  # DeepSpeed-MoE: moe.ep_size

    def fp32_master(self, zero: int) -> bool:
        return zero > 0  # ZeRO-0 steps the client optimizer on the module's own parameters

    def check(self, par: Parallelism) -> None:
        if par.zero == 3 and par.pp > 1:
            raise InputError("DeepSpeed does not combine ZeRO stage 3 with pipeline parallelism (‹pp› > 1)")
        if par.ep > 1 and par.zero == 3:
            raise InputError(
                'DeepSpeed-MoE (‹ep› > 1) does not run under ZeRO stage 3 (engine: "Native DeepSpeed MoE '
                'is not supported with ZeRO Stage 3"): use ‹zero› 1 or 2'
            )
        if par.ep > 1 and (par.zero == 0 or par.tp > 1 or par.pp > 1):
            raise InputError("ckplan models DeepSpeed-MoE checkpoints (‹ep› > 1) with ZeRO 1 or 2, ‹tp› 1 and ‹pp› 1")

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        if par.ep == 1:
            return []
        return [
            f"DeepSpeed-MoE: dp ranks 0..{par.ep - 1} (expert-data-parallel rank 0) write one file per MoE layer "
            f"and expert, 1/{par.ep} of the expert weights each; rank 0's mp_rank_00_model_states.pt keeps the "
            "dense weights; every rank's ZeRO optimizer file holds 1/dp of all optimizer states"
        ]

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        if zero == 3 and any(s.kind == "master" for s in states):
            return [s for s in states if s.kind != "weights"]
        return states

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        return self.save_checkpoint(inp)

    def save_checkpoint(self, inp: LayoutInput, save_dir: str = "") -> list[ManifestFile]:
        """The files of engine.save_checkpoint(save_dir): `latest` and zero_to_fp32.py in save_dir, the rest
        in save_dir/global_stepN/. Other layouts whose framework calls it (HF Trainer) reuse this."""
        par = inp.par
        root = f"{save_dir}/" if save_dir else ""
        tag = f"{root}global_step{inp.step}"
        bf16 = any(s.dtype == "bf16" for s in inp.states(inp.tensors[:1]) if s.kind == "weights")
        prefix = "bf16_" if bf16 else ""
        out = [ManifestFile(path=f"{root}latest", bytes=LATEST_TAG_BYTES, rank=0, node=0, kind="small")]
        if par.zero > 0:
            for script, size in (
                ("zero_to_fp32.py", ZERO_TO_FP32_SCRIPT_BYTES),
                ("zero_to_torch.py", ZERO_TO_TORCH_SCRIPT_BYTES),
            ):
                out.append(ManifestFile(path=f"{root}{script}", bytes=size, rank=0, node=0, kind="small"))
        for stage, stage_tensors in enumerate(inp.stage_tensors()):
            states = self.persisted(inp.states(stage_tensors), par.zero)
            weights = total(states, ("weights",)) / par.tp
            if par.ep > 1:  # DeepSpeed-MoE: the experts go to files of their own
                out += self._expert_files(inp, tag, stage_tensors)
                stage_tensors = [t for t in stage_tensors if t.expert is None]
                weights = total(self.persisted(inp.states(stage_tensors), par.zero), ("weights",))
            optim = total(states, ("master", "optimizer")) / par.tp
            per_tp_tensors = len(stage_tensors)
            layers = sorted({t.layer for t in stage_tensors if t.layer is not None})
            for tp in range(par.tp):
                mp = stage * par.tp + tp
                writer = par.rank(stage, 0, tp)
                if par.zero < 3:
                    # Module weights go in per-layer files under pipeline parallelism, else here.
                    payload = 0.0 if par.pp > 1 else weights
                    if par.zero == 0:
                        payload += optim
                    out.append(
                        ManifestFile(
                            path=f"{tag}/mp_rank_{mp:02d}_model_states.pt",
                            rank=writer,
                            node=par.node(writer),
                            bytes=inp.scaled(payload) + int(torch_save_bytes(0, per_tp_tensors * (par.pp == 1))),
                            kind="mixed" if par.zero == 0 else ("small" if par.pp > 1 else "weights"),
                        )
                    )
                if par.pp > 1:
                    out += self._layer_files(inp, tag, stage, tp, stage_tensors, layers, writer)
                if par.zero > 0:
                    for dp, share in enumerate(split_even(inp.scaled(optim), par.dp)):
                        rank = par.rank(stage, dp, tp)
                        out.append(
                            ManifestFile(
                                path=f"{tag}/{prefix}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt",
                                bytes=share + int(torch_save_bytes(0, len(states))),
                                rank=rank,
                                node=par.node(rank),
                                kind="optimizer",
                            )
                        )
                        if par.zero == 3:
                            out.append(
                                ManifestFile(
                                    path=f"{tag}/zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt",
                                    bytes=int(torch_save_bytes(0, per_tp_tensors)),
                                    rank=rank,
                                    node=par.node(rank),
                                    kind="small",
                                )
                            )
        return out

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        reads, unread = self.load_checkpoint(par, manifest)
        return RestoreReads(reads, not_read_note(unread, "no rank of engine.load_checkpoint reads"))

    def load_checkpoint(self, par: Parallelism, manifest: list[ManifestFile]) -> tuple[list[Read], list[str]]:
        """The reads of engine.load_checkpoint(tag=None) on every rank, default (non-elastic, non-universal)
        checkpoints (docs/restore-reads.md §5), and the files of `manifest` it does not read. Every rank reads
        `latest`; each reads its model-parallel rank's mp_rank_XX_model_states.pt whole (SDLoader, one file per mp
        rank, the same for every dp rank: state_dict_factory.py:66-98), under pipeline parallelism its stage's
        layer files (pipe/module.py:645-661), and its own zero_pp_rank_{dp} optimizer (and ZeRO-3 model-states)
        file only, as elastic_checkpoint is off by default (engine.py:4816-4822). DeepSpeed-MoE: the expert files
        of its EP rank's experts (engine.py:4133-4200). Before its own, each rank torch.loads the first file of its
        model-states list once more (SDLoaderBase.check_ckpt_list, state_dict_factory.py:55,166-175, to compare
        mp_world_size): mp_rank_00's under ZeRO-0/1/2, its data-parallel rank's mp_rank_00 under ZeRO-3, so with
        one model-parallel rank that file is read twice (seen in tests/test_restore_oracle.py). Other layouts
        whose framework calls it (HF Trainer) reuse this."""
        reads: list[Read] = []
        unread: list[str] = []
        for f in manifest:
            name = file_name(f.path)
            if name == "latest":
                reads.append(Read(f.path, f.bytes, every_rank(par)))
            elif name.startswith(("zero_pp_rank_", "bf16_zero_pp_rank_")) and name.endswith("_optim_states.pt"):
                reads.append(Read(f.path, f.bytes, own_rank(f.rank)))
            elif name.startswith("zero_pp_rank_"):  # ZeRO-3's model states: the first of its dp rank's, checked
                reads += _loaded_and_checked(f, own_rank(f.rank), Readers(f.rank, 1, par.tp), "_mp_rank_00_" in name)
            elif "_expert_" in name:
                reads.append(Read(f.path, f.bytes, dp_replicas(par, f.rank, par.ep)))
            elif name.startswith("mp_rank_") and name.endswith("_model_states.pt"):
                reads += _loaded_and_checked(
                    f, dp_replicas(par, f.rank), every_rank(par), name.startswith("mp_rank_00_")
                )
            elif name.startswith("layer_") and name.endswith("model_states.pt"):
                reads.append(Read(f.path, f.bytes, dp_replicas(par, f.rank)))
            else:
                unread.append(f.path)
        return reads, unread

    def _expert_files(self, inp: LayoutInput, tag: str, stage_tensors: list[Tensor]) -> list[ManifestFile]:
        """DeepSpeed-MoE's per-expert weight files, from the EP rank holding each expert (tp 1, pp 1)."""
        par = inp.par
        experts = [(t, t.expert, t.layer) for t in stage_tensors if t.expert is not None and t.layer is not None]
        local = (1 + max(e for _, e, _ in experts)) // par.ep
        out = []
        for moe_layer, layer in enumerate(sorted({lay for _, _, lay in experts})):
            for e in sorted({e for _, e, lay in experts if lay == layer}):
                ts = [t for t, te, tl in experts if tl == layer and te == e]
                writer = par.rank(0, e // local, 0)
                weights = total(self.persisted(inp.states(ts), par.zero), ("weights",))
                out.append(
                    ManifestFile(
                        path=f"{tag}/layer_{moe_layer}_expert_{e}_mp_rank_00_model_states.pt",
                        rank=writer,
                        node=par.node(writer),
                        bytes=inp.scaled(weights) + int(torch_save_bytes(0, len(ts))),
                        kind="weights",
                    )
                )
        return out

    def _layer_files(
        self,
        inp: LayoutInput,
        tag: str,
        stage: int,
        tp: int,
        stage_tensors: list[Tensor],
        layers: list[int],
        writer: int,
    ) -> list[ManifestFile]:
        """Per-layer weight files; indices follow the PipelineModule's layer list."""
        par = inp.par
        first_block = 1  # index 0 is the embedding layer
        groups: list[tuple[int, list[Tensor]]] = []
        if stage == 0:
            groups.append((0, [t for t in stage_tensors if t.role == "embedding"]))
        for layer in layers:
            groups.append((first_block + layer, [t for t in stage_tensors if t.layer == layer]))
        if stage == par.pp - 1:
            last_block = first_block + max(t.layer for t in inp.tensors if t.layer is not None)
            groups.append((last_block + 1, [t for t in stage_tensors if t.layer is None and t.role == "vector"]))
            head = [t for t in stage_tensors if t.role == "head"]
            if head:
                groups.append((last_block + 2, head))
        out = []
        for idx, ts in groups:
            weights = total(self.persisted(inp.states(ts), par.zero), ("weights",)) / par.tp
            out.append(
                ManifestFile(
                    path=f"{tag}/layer_{idx:02d}-model_{tp:02d}-model_states.pt",
                    rank=writer,
                    node=par.node(writer),
                    bytes=inp.scaled(weights) + int(torch_save_bytes(0, len(ts))),
                    kind="weights",
                )
            )
        return out


def _loaded_and_checked(f: ManifestFile, loaders: Readers, checkers: Readers, checked: bool) -> list[Read]:
    """A model-states file read by the ranks that load it and, when it heads their list, by those that check it."""
    if not checked:
        return [Read(f.path, f.bytes, loaders)]
    if loaders == checkers:
        return [Read(f.path, f.bytes, loaders, times=2)]
    return [Read(f.path, f.bytes, loaders), Read(f.path, f.bytes, checkers)]


# What `size --from` reads back (frameworks/names.py):
# - `[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_{optim,model}_states.pt` by rank (dp, mp);
# - `mp_rank_{mp:02d}_model_states.pt` and `layer_{idx:02d}-model_{tp:02d}-model_states.pt` by data-parallel rank 0
#   of model-parallel rank mp (stage × tp + tensor rank). A layer file's stage is not in its name: the layers go to
#   the stages in contiguous runs balanced by bytes, as PipelineModule's default partition_method='parameters'
#   balances them by parameter count;
# - DeepSpeed-MoE (--ep): `layer_{moe_layer}_expert_{e}_mp_rank_{mp:02d}_model_states.pt` by the expert-parallel
#   rank holding expert e, data-parallel ranks 0..ep-1. The expert-parallel size is not in the names: --ep gives it,
#   else the files are counted on rank 0.
ZERO_SHARD = re.compile(r"(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_(optim|model)_states\.pt")
MP_STATES = re.compile(r"mp_rank_(\d+)_model_states\.pt")
LAYER_STATES = re.compile(r"layer_(\d+)-model_(\d+)-model_states\.pt")
EXPERT_STATES = re.compile(r"layer_(\d+)_expert_(\d+)_mp_rank_(\d+)_model_states\.pt")


@dataclass(kw_only=True)
class _DeepSpeedFile(Named):
    names_writer: ClassVar[bool] = True

    def once(self) -> str | None:
        return self.name

    def numbered(self) -> tuple[str, tuple[int, ...]] | None:
        return "", self.numbers()

    def numbers(self) -> tuple[int, ...]:
        raise NotImplementedError


@dataclass(kw_only=True)
class ZeroShard(_DeepSpeedFile):
    dp: int
    mp: int
    model_states: bool  # ZeRO-3's model_states, which hold placeholders only, beside the optimizer's shard
    bf16: bool

    def numbers(self) -> tuple[int, ...]:
        return self.dp, self.mp, int(self.model_states)

    def kind(self, par: Parallelism) -> FileKind:
        return "small" if self.model_states else "optimizer"

    def precision(self) -> str | None:
        return "bf16-mixed" if self.bf16 else None


@dataclass(kw_only=True)
class MpStates(_DeepSpeedFile):
    mp: int

    def numbers(self) -> tuple[int, ...]:
        return (self.mp,)

    def kind(self, par: Parallelism) -> FileKind:
        return "mixed" if par.zero == 0 else "small" if par.pp > 1 else "weights"


@dataclass(kw_only=True)
class LayerStates(_DeepSpeedFile):
    layer: int
    tp: int

    def numbers(self) -> tuple[int, ...]:
        return self.layer, self.tp

    def kind(self, par: Parallelism) -> FileKind:
        return "weights"


@dataclass(kw_only=True)
class ExpertStates(_DeepSpeedFile):
    layer: int
    expert: int
    mp: int

    def numbers(self) -> tuple[int, ...]:
        return self.layer, self.expert, self.mp

    def kind(self, par: Parallelism) -> FileKind:
        return "weights"


class DeepSpeedNames:
    looks_like = "DeepSpeed (global_stepN/ *_model_states.pt)"
    step_dirs: tuple[str, ...] = ("global_step",)
    siblings: tuple[str, ...] = ("latest", "zero_to_fp32.py", "zero_to_torch.py")
    ep_files: str | None = "a DeepSpeed-MoE checkpoint (layer_L_expert_E_mp_rank_MM_model_states.pt files)"

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        name, at = path.name, str(path)
        if m := ZERO_SHARD.fullmatch(name):
            return ZeroShard(
                path=at, bytes=size, dp=int(m[2]), mp=int(m[3]), model_states=m[4] == "model", bf16=bool(m[1])
            )
        if m := MP_STATES.fullmatch(name):
            return MpStates(path=at, bytes=size, mp=int(m[1]))
        if m := LAYER_STATES.fullmatch(name):
            return LayerStates(path=at, bytes=size, layer=int(m[1]), tp=int(m[2]))
        if m := EXPERT_STATES.fullmatch(name):
            return ExpertStates(path=at, bytes=size, layer=int(m[1]), expert=int(m[2]), mp=int(m[3]))
        return None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        return any(isinstance(f, _DeepSpeedFile) for f in files)

    @staticmethod
    def _split(files: Sequence[Named]) -> tuple[int, int, list[str]]:
        """(model-parallel ranks, tensor-parallel size, notes): tp from the layer files, else every mp rank."""
        named = [f.mp for f in files if isinstance(f, (ZeroShard, MpStates))]  # the files naming their mp_rank
        mps = 1 + max(named) if named else 1
        layer_tps = {f.tp for f in files if isinstance(f, LayerStates)}
        ds_tp = 1 + max(layer_tps) if layer_tps else mps
        mps = max(mps, ds_tp)
        if mps % ds_tp:
            return (
                mps,
                mps,
                [f"DeepSpeed: {mps} model-parallel ranks do not split into tensor rank {ds_tp}: taken as tp {mps}"],
            )
        return mps, ds_tp, []

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        ds = [f for f in files if isinstance(f, _DeepSpeedFile)]
        if not ds:
            return None
        mps, ds_tp, notes = self._split(ds)
        part = WorldPart(notes, label="DeepSpeed", tp=ds_tp, pp=mps // ds_tp, unit=mps)
        shards = [f for f in ds if isinstance(f, ZeroShard)]
        part.zero = 3 if any(f.model_states for f in shards) else 1 if shards else 0
        notes.append("a DeepSpeed FastPersist save (O_DIRECT) writes the same files and cannot be told apart by them")
        if part.zero:
            dps = 1 + max(f.dp for f in shards)
            part.known = dps * mps
            missing = dps * mps - len({(f.dp, f.mp) for f in shards})
            stage = "ZeRO-3" if part.zero == 3 else "ZeRO-1 or 2 (their files are alike; recorded as 1)"
            notes.append(
                f"ranks: DeepSpeed {stage}, {dps} data-parallel × {mps} model-parallel ranks from the "
                "zero_pp_rank_{dp}_mp_rank_{mp} names; rank = stage·dp·tp + dp·tp + tensor rank"
                + (f"; {missing} shard file(s) missing: an incomplete save?" if missing else "")
            )
        else:
            part.lower = mps
            notes.append(
                f"ranks: DeepSpeed ZeRO-0 (no zero_pp_rank files): {mps} model-parallel writer(s), "
                "data-parallel rank 0 of each; the data-parallel size is not in the names"
            )
        if any(isinstance(f, LayerStates) for f in ds):
            notes.append(
                f"DeepSpeed pipeline: tp {ds_tp} from the layer_XX-model_YY names, pp {mps // ds_tp}; layers go to "
                "stages in contiguous runs balanced by bytes (PipelineModule's partition_method='parameters')"
            )
        if any(isinstance(f, ExpertStates) for f in ds):
            part.needs_ep = "DeepSpeed-MoE expert files without --ep: which ranks read each is not known"
        return part

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        ds = [f for f in files if isinstance(f, _DeepSpeedFile)]
        if not ds:
            return []
        ds_tp = self._split(ds)[1]
        experts = [f.expert for f in ds if isinstance(f, ExpertStates)]
        per_layer = 1 + max(experts, default=0)
        notes, experts_per_writer = [], per_layer
        if experts and ep is None:
            notes.append(
                f"DeepSpeed-MoE: {len(experts):,} expert file(s), {per_layer} experts per MoE layer; the "
                "expert-parallel size is not in the names, so they are counted on rank 0 (--ep to spread them)"
            )
        elif experts and ep is not None:
            if per_layer % ep or ep > par.gpus // (par.tp * par.pp):
                raise InputError(
                    f"‹ep› {ep} must divide the checkpoint's {per_layer} experts per MoE layer and be at most its "
                    f"{par.gpus // (par.tp * par.pp)} data-parallel ranks"
                )
            experts_per_writer = per_layer // ep
            notes.append(
                f"DeepSpeed-MoE: {per_layer} experts per MoE layer over ep {ep} (--ep): expert e's file written by "
                f"data-parallel rank e // {experts_per_writer}, expert-data-parallel rank 0"
            )
        stage_of_layer = layer_stages(ds, par.pp)
        for f in ds:
            if isinstance(f, ZeroShard):
                stage, tp = divmod(f.mp, ds_tp)
                f.rank = par.rank(stage, f.dp, tp)
            elif isinstance(f, MpStates):
                stage, tp = divmod(f.mp, ds_tp)
                f.rank = par.rank(stage, 0, tp)
            elif isinstance(f, LayerStates):
                f.rank = par.rank(stage_of_layer[f.layer], 0, f.tp)
            elif isinstance(f, ExpertStates):
                f.rank = par.rank(0, f.expert // experts_per_writer, 0)
        return notes


def layer_stages(files: Sequence[Named], pp: int) -> dict[int, int]:
    """Layer index → pipeline stage: contiguous runs, `pp` of them, the heaviest as light as can be."""
    weights: dict[int, int] = defaultdict(int)
    for f in files:
        if isinstance(f, LayerStates):
            weights[f.layer] += f.bytes
    order = sorted(weights)
    if pp == 1 or not order:
        return {layer: 0 for layer in order}
    w = [weights[layer] for layer in order]

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
    for i, (layer, x) in enumerate(zip(order, w, strict=True)):
        # a new stage when this one is full, or when every layer left needs a stage of its own
        if i and stage < pp - 1 and (run + x > lo or len(order) - i <= pp - 1 - stage):
            stage, run = stage + 1, 0
        stages[layer] = stage
        run += x
    return stages


# DeepSpeed (runtime/engine.py, torch_checkpoint_engine.py), timestamps "[YYYY-mm-dd HH:MM:SS,mmm]": from
# "[Torch] Checkpoint TAG is about to be saved!" to the last "[Torch] Checkpoint TAG is ready now!".
class DeepSpeed(Extractor):
    name = "deepspeed"
    needles = (b"[Torch] Checkpoint",)
    start = re.compile(r"\[Torch\] Checkpoint (\S+) is about to be saved!")
    ready = re.compile(r"\[Torch\] Checkpoint (\S+) is ready now!")

    def __init__(self) -> None:
        self.open: dict[str, tuple[float, float]] = {}  # tag -> (start, last ready)

    def feed(self, line: str) -> Iterator[Save]:
        if "[Torch] Checkpoint" not in line:
            return
        if (m := self.start.search(line)) and (t := stamp(line)) is not None:
            yield from self._close_others(m.group(1))
            self.open[m.group(1)] = (t, t)
        elif (m := self.ready.search(line)) and m.group(1) in self.open and (t := stamp(line)) is not None:
            self.open[m.group(1)] = (self.open[m.group(1)][0], t)

    def _close_others(self, keep: str) -> Iterator[Save]:
        for tag in [t for t in self.open if t != keep]:
            start, end = self.open.pop(tag)
            if end > start:
                yield Save(end - start, end, tag, self.name)

    def finish(self) -> Iterator[Save]:
        yield from self._close_others("")


FRAMEWORK = Framework(
    DeepSpeedLayout(),
    DeepSpeedNames(),
    Saver("torch.save", "torch.save per rank file"),
    (DeepSpeed,),
    recorders=("record_deepspeed",),
)
