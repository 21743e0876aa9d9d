"""DLIO's checkpoint workload: what MLPerf Storage's checkpointing benchmark writes
(argonne-lcf/dlio_benchmark, dlio_benchmark/checkpointing/base_checkpointing.py and pytorch_checkpointing.py,
branch mlperf_storage_v2.0 that mlcommons/storage pins; the same save code on main).

DLIO emulates a Megatron-DeepSpeed save with torch.save of random tensors, one fsync per file:
- Directory `global_epoch1_step{N}/` (a checkpoint-only run passes epoch 1).
- Rank order: tensor rank fastest, then pipeline stage, then data-parallel rank
  (pp rank = rank // tp % pp, dp rank = rank // (tp·pp)); model-parallel rank mp = stage·tp + tensor rank.
- Layer indices: 0 the embedding, 1..L the blocks, L+1 the output head, L+2 the final norm; the blocks are
  split over the stages as evenly as possible (earlier stages take the remainder); stage 0 also holds layer 0,
  the last stage layers L+1 and L+2.
- A layer's tensors, in the model datatype: the two norms (never split by tensor parallelism), q/k/v as one
  tensor, o, gate+up as one tensor, down; matrices, the embedding and the head are split by tp (integer division).
- ZeRO 1-2: data-parallel rank 0 of each model-parallel rank writes the model: one file per layer,
  `layer_{i}-model_{mp}_model_states.pt`, under pipeline parallelism, else `model_{mp}_model_states.pt`.
- ZeRO 3: every rank writes `zero_pp_rank_{dp}_mp_rank_{mp}_model_states.pt` with its 1/dp of each tensor of its
  stage's layers. Unlike DeepSpeed (whose ZeRO-3 model files are placeholders), these hold 2 B/param.
- ZeRO 0: only the ranks of data-parallel rank 0 write, the model in `zero_pp_rank_0_mp_rank_{mp}_model_states.pt`.
- Optimizer: every writing rank writes `zero_pp_rank_{dp}_mp_rank_{mp}_optim_states.pt` holding three groups
  (the fp32 master, exp_avg and exp_avg_sq of mixed-precision Adam) of N/(dp·mp) values each (N/mp under ZeRO 0),
  each with a 5·hidden-value companion tensor, in the optimizer datatype.
ckplan sizes the model files from the weights state and one group per master/optimizer state, so
--optimizer adam with --precision fp16-mixed (DLIO's model_datatype fp16, optimizer_datatype fp32) reproduces
MLPerf's workloads; tests/test_layouts_published.py holds their configurations (mlcommons/storage
configs/dlio/workload/llama3_*.yaml) and checks the published sizes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from ckplan.errors import InputError
from ckplan.frameworks.framework import Framework, Saver
from ckplan.frameworks.layout import (
    BufferedWriter,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    RestoreReads,
    ZeroShown,
    own_rank,
    split_even,
    torch_save_bytes,
    total,
)
from ckplan.frameworks.names import Named, WorldPart
from ckplan.model.architecture import Tensor
from ckplan.model.states import StateBytes

OPTIMIZER_COMPANION_VALUES = 5  # each optimizer group has a hidden_size*5 tensor beside its N/(dp·mp) values
MERGED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "h_to_4h", "up_proj": "h_to_4h"}
SPLIT_BY_TP = ("matrix", "embedding", "head", "router")  # DLIO divides these by tp; norms are replicated


class DlioLayout(BufferedWriter):
    name = "dlio"
    description = "DLIO / MLPerf Storage checkpoint workload (global_epoch1_stepN/, torch.save of random tensors)"
    rank_order = "tp, pp, dp"
    shows_zero_stage: ZeroShown = "always"

    def check(self, par: Parallelism) -> None:
        if par.zero == 3 and par.pp > 1:
            raise InputError(
                "DLIO's ZeRO-3 checkpoint needs ‹pp› 1 (load_checkpoint asserts pipeline_parallelism == 1)"
            )

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return states  # model files hold the weights, optimizer files one group per master/optimizer state

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        return [
            "DLIO writes 2-byte model tensors and three fp32 optimizer groups (mixed-precision Adam): "
            "--optimizer adam --precision fp16-mixed reproduces MLPerf Storage; other settings are sized "
            "with one group per optimizer state. DLIO's model files under ZeRO-3 hold the weights "
            "(DeepSpeed's hold placeholders); MLPerf's \"GB\" are GiB"
        ]

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """DLIO's load_checkpoint (dlio_benchmark/checkpointing/base_checkpointing.py) mirrors its save: each rank
        torch.loads the files it wrote, the model files on data-parallel rank 0 of each model-parallel rank (every
        rank under ZeRO-3) and its own optimizer file. checkpoint_recovery_rank_shift moves each rank to the files of
        the rank one node on, so the bytes come from another node's writes; the amounts are the same."""
        return RestoreReads([Read(f.path, f.bytes, own_rank(f.rank)) for f in manifest], [])

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        par = inp.par
        if any(t.role == "router" for t in inp.tensors):
            raise InputError("DLIO emulates dense transformers only: give a dense model for ‹framework› dlio")
        d = f"global_epoch1_step{inp.step}"
        mp = par.tp * par.pp
        layers = _dlio_layers(inp.tensors)
        stage_layers = _stage_layer_indices(len(layers) - 3, par.pp)
        weight_bytes = _bytes_per_value(inp, ("weights",))
        optim_bytes = _bytes_per_value(inp, ("master", "optimizer"))
        groups = sum(1 for s in inp.states(inp.tensors[:1]) if s.kind in ("master", "optimizer"))
        hidden = next(t.shape[1] for t in inp.tensors if t.role == "embedding")
        values = sum(t.numel for t in inp.tensors)
        optim_writers = par.gpus if par.zero > 0 else mp
        per_rank_values = values // optim_writers
        optim_payload = inp.scaled(per_rank_values * optim_bytes) + int(
            OPTIMIZER_COMPANION_VALUES * hidden * optim_bytes
        )
        shard = par.dp if par.zero == 3 else 1

        def layer_file_bytes(index: int) -> tuple[int, int]:
            tensors = layers[index]
            payload = sum(numel // (par.tp if splits else 1) // shard for numel, splits in tensors) * weight_bytes
            return inp.scaled(payload), len(tensors)

        out: list[ManifestFile] = []
        for rank in range(par.gpus):
            tp_rank, stage, dp = rank % par.tp, rank // par.tp % par.pp, rank // mp
            mp_rank = stage * par.tp + tp_rank
            if par.zero == 0 and dp > 0:
                continue
            node = par.node(rank)
            indices = [i for i in stage_layers[stage] if layers[i]]
            if par.zero in (1, 2) and par.pp > 1 and dp == 0:  # the model layer by layer
                for i in indices:
                    payload, count = layer_file_bytes(i)
                    out.append(
                        ManifestFile(
                            path=f"{d}/layer_{i}-model_{mp_rank}_model_states.pt",
                            rank=rank,
                            node=node,
                            bytes=int(torch_save_bytes(payload, count)),
                            kind="weights",
                        )
                    )
            elif par.zero in (0, 3) or dp == 0:  # the model in one file: sharded over dp (ZeRO 3) or whole
                name = (
                    f"model_{mp_rank}_model_states.pt"
                    if par.zero in (1, 2)
                    else f"zero_pp_rank_{dp}_mp_rank_{mp_rank}_model_states.pt"
                )
                sizes = [layer_file_bytes(i) for i in indices]
                out.append(
                    ManifestFile(
                        path=f"{d}/{name}",
                        rank=rank,
                        node=node,
                        kind="weights",
                        bytes=int(torch_save_bytes(sum(p for p, _ in sizes), sum(c for _, c in sizes))),
                    )
                )
            out.append(
                ManifestFile(
                    path=f"{d}/zero_pp_rank_{dp}_mp_rank_{mp_rank}_optim_states.pt",
                    rank=rank,
                    node=node,
                    bytes=int(torch_save_bytes(optim_payload, 2 * groups)),
                    kind="optimizer",
                )
            )
        return out


def _bytes_per_value(inp: LayoutInput, kinds: tuple[str, ...]) -> float:
    """Bytes per parameter of the states of these kinds (2 for fp16 weights, 12 for Adam's three fp32 groups)."""
    return total(inp.states(inp.tensors), kinds) / sum(t.numel for t in inp.tensors)


def _dlio_layers(tensors: list[Tensor]) -> list[list[tuple[int, bool]]]:
    """DLIO's layer list, [0 embedding, 1..L blocks, L+1 head, L+2 final norm], each a list of (values, split by tp)
    with q/k/v and gate/up merged into one tensor as DLIO allocates them."""
    blocks = 1 + max(t.layer for t in tensors if t.layer is not None)
    layers: list[dict[str, tuple[int, bool]]] = [{} for _ in range(blocks + 3)]

    def add(index: int, key: str, t: Tensor) -> None:
        numel, split = layers[index].get(key, (0, t.role in SPLIT_BY_TP))
        layers[index][key] = (numel + t.numel, split)

    for t in tensors:
        if t.role == "embedding":
            add(0, t.name, t)
        elif t.role == "head":
            add(blocks + 1, t.name, t)
        elif t.layer is None:
            add(blocks + 2, t.name, t)
        else:
            proj = t.name.split(".")[-2]
            add(1 + t.layer, MERGED.get(proj, t.name) if t.name.endswith(".weight") else t.name, t)
    return [[(n, splits) for n, splits in layer.values()] for layer in layers]


def _stage_layer_indices(blocks: int, pp: int) -> list[list[int]]:
    """DLIO's get_layer_index: blocks 1..L split over the stages, earlier stages taking the remainder; stage 0 also
    has the embedding (0), the last stage the head (L+1) and the final norm (L+2)."""
    out, start = [], 1
    for stage, count in enumerate(split_even(blocks, pp)):
        indices = list(range(start, start + count))
        start += count
        if stage == 0:
            indices = [0] + indices
        if stage == pp - 1:
            indices += [blocks + 1, blocks + 2]
        out.append(indices)
    return out


# `size --from` refuses DLIO's checkpoints (`global_epoch1_stepN/`, `layer_{i}-model_{mp}_model_states.pt`): their
# names do not tell tensor from pipeline ranks, and `size --framework dlio` sizes them.
DLIO_NAME = re.compile(r"(layer_\d+-)?model_\d+_model_states\.pt|global_epoch\d+_step\d+")


class DlioNames:
    looks_like = ""
    step_dirs: tuple[str, ...] = ()
    siblings: tuple[str, ...] = ()
    ep_files: str | None = None

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        return None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        dlio = next((f.path for f in files for part in PurePosixPath(f.path).parts if DLIO_NAME.fullmatch(part)), None)
        if dlio:
            raise InputError(
                f"‹from_dir› {source} holds a DLIO benchmark checkpoint ({dlio}): its names do not tell tensor from "
                "pipeline ranks; size it with --framework dlio"
            )
        return False

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        return None

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        return []


FRAMEWORK = Framework(
    DlioLayout(),
    DlioNames(),
    Saver("torch.save", "torch.save per rank file (DLIO's random tensors)"),
    (),
    no_extractor="no sample of what DLIO prints per save has been checked (tests/fixtures/logs holds none); --pattern "
    "reads its log",
)
