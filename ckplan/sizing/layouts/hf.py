"""Hugging Face Trainer (transformers Trainer._save_checkpoint) under DDP.

- `checkpoint-{N}/` with the model as safetensors shards
  `model-{i:05d}-of-{n:05d}.safetensors` split greedily by tensor at
  max_shard_size (5 GB in transformers 4.x; v5 raised it to 50 GB: override
  with --option hf_shard_size=50GB) and `model.safetensors.index.json`;
  a single `model.safetensors` when it fits in one shard.
- `optimizer.pt`, `scheduler.pt`, `trainer_state.json`, `training_args.bin`,
  `config.json`, `generation_config.json`: written by the main process.
- `rng_state_{i}.pth`, one per process (`rng_state.pth` for one process).
- The module's parameters are what is saved: fp32 under AMP (bf16=True).
"""

from __future__ import annotations

from ckplan.errors import InputError
from ckplan.sizing.layouts.base import (
    BufferedWriter, CONFIG_JSON_BYTES, RNG_STATE_BYTES, SAFETENSORS_INDEX_PER_TENSOR_BYTES, SCHEDULER_BYTES,
    TRAINER_STATE_BYTES, TRAINING_ARGS_BYTES, LayoutInput, ManifestFile, Parallelism, fp32_copy_only,
    torch_save_bytes, total,
)
from ckplan.sizing.states import StateBytes
from ckplan.units import parse_bytes

DEFAULT_SHARD_BYTES = 5 * 10**9
SAFETENSORS_HEADER_PER_TENSOR_BYTES = 120  # JSON header entry: dtype, shape, data_offsets


class HfLayout(BufferedWriter):
    name = "hf"
    description = "Hugging Face Trainer (safetensors shards, optimizer.pt, rng_state_i.pth)"
    options = ("hf_shard_size",)  # --option hf_shard_size=50GB: Trainer's max_shard_size

    def check(self, par: Parallelism) -> None:
        if par.zero or par.tp > 1 or par.pp > 1:
            raise InputError("the hf layout models Trainer under DDP (--zero 0, --tp 1, --pp 1); "
                             "with DeepSpeed or FSDP, Trainer writes that framework's layout: use --framework deepspeed or dcp")

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return fp32_copy_only(states)

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        par, d = inp.par, f"checkpoint-{inp.step}"
        shard_limit = parse_bytes(inp.options.get("hf_shard_size", DEFAULT_SHARD_BYTES), "--option hf_shard_size")
        shards: list[list[int]] = [[0, 0]]  # [payload bytes, tensor count]
        weight_kind = "master" if any(s.kind == "master" for s in inp.states(inp.tensors[:1])) else "weights"
        for t in inp.tensors:
            size = inp.scaled(total(inp.states([t]), (weight_kind,)))
            if shards[-1][1] and shards[-1][0] + size > shard_limit:
                shards.append([0, 0])
            shards[-1][0] += size
            shards[-1][1] += 1
        n = len(shards)
        files = []
        for i, (payload, count) in enumerate(shards):
            name = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            files.append((name, payload + SAFETENSORS_HEADER_PER_TENSOR_BYTES * count, "weights"))
        if n > 1:
            files.append(("model.safetensors.index.json", SAFETENSORS_INDEX_PER_TENSOR_BYTES * len(inp.tensors), "small"))
        optim = total(self.persisted(inp.states(inp.tensors), 0), ("optimizer",))
        files += [
            ("optimizer.pt", inp.scaled(optim) + int(torch_save_bytes(0, 2 * len(inp.tensors))), "optimizer"),
            ("scheduler.pt", SCHEDULER_BYTES, "small"),
            ("trainer_state.json", TRAINER_STATE_BYTES, "small"),
            ("training_args.bin", TRAINING_ARGS_BYTES, "small"),
            ("config.json", CONFIG_JSON_BYTES, "small"),
            ("generation_config.json", CONFIG_JSON_BYTES // 5, "small"),
        ]
        out = [ManifestFile(path=f"{d}/{name}", bytes=b, rank=0, node=0, kind=k) for name, b, k in files]
        for rank in range(par.gpus):
            name = "rng_state.pth" if par.gpus == 1 else f"rng_state_{rank}.pth"
            out.append(ManifestFile(path=f"{d}/{name}", bytes=RNG_STATE_BYTES, rank=rank, node=par.node(rank), kind="small"))
        return out
