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

from ckplan.errors import InputError
from ckplan.sizing.architecture import Tensor
from ckplan.sizing.layouts.base import (
    LATEST_TAG_BYTES,
    ZERO_TO_FP32_SCRIPT_BYTES,
    ZERO_TO_TORCH_SCRIPT_BYTES,
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
from ckplan.sizing.states import StateBytes


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
