"""Megatron-Core distributed checkpointing, `torch_dist` format.

- `iter_{N:07d}/` holding DCP-style `__{rank}_0.distcp` files and `.metadata`,
  plus `common.pt` (non-sharded state, rank 0) and `metadata.json`
  (the sharded backend's name and version); `latest_checkpointed_iteration.txt`
  sits beside the iteration directories.
- Fully parallel save (the default since Megatron-Core 0.7) spreads replicated
  shards across the data-parallel ranks, so every rank writes about 1/N.
- The distributed optimizer saves the bf16 model weights, the fp32 main params
  and both Adam moments: 14 bytes/param for mixed-precision Adam. It saves the main
  params (`fp32_param`) in fp32 training too, beside the fp32 model weights
  (megatron-core 0.16 distrib_optimizer.py, sharded_param_state_fs_model_space), so
  16 bytes/param; read from the source, as megatron-core does not train on CPU.
"""

from __future__ import annotations

from ckplan.sizing.layouts.base import (
    CONFIG_JSON_BYTES,
    LATEST_TAG_BYTES,
    TORCH_SAVE_OVERHEAD_BYTES,
    BufferedWriter,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    RestoreReads,
    ZeroShown,
    every_rank,
    file_name,
)
from ckplan.sizing.layouts.dcp import dcp_load, distcp_files
from ckplan.sizing.states import StateBytes

COMMON_PT_BYTES = TORCH_SAVE_OVERHEAD_BYTES + 12_000  # args namespace, RNG state, iteration counters


class MegatronLayout(BufferedWriter):
    name = "megatron"
    description = "Megatron-Core dist checkpointing, torch_dist format (iter_NNNNNNN/)"
    coordinated_save = True
    shows_zero_stage: ZeroShown = "always"
    renames_per_save = 1  # .metadata.tmp -> .metadata
    supports_ep = True  # --expert-model-parallel-size

    def fp32_master(self, zero: int) -> bool:
        return zero > 0  # the distributed optimizer; without it (FP32Optimizer) the moments only

    def check(self, par: Parallelism) -> None:
        return None

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        if par.ep == 1:
            return []
        return [
            f"Megatron-Core expert parallelism: the distributed optimizer shards each EP rank's expert states over "
            f"its {par.edp} expert-data-parallel ranks (dense states over all {par.dp}), and fully parallel save "
            "spreads each EP rank's expert weights over the same ranks, so each still writes ~1/N"
        ]

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return states

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """Megatron-LM's --ckpt-fully-parallel-load (FullyParallelLoadStrategyWrapper over the DP×CP group,
        megatron-core 0.16 fully_parallel.py:246-264,354-499): each shard is assigned to one rank of the DP group
        holding it, read once, and broadcast to the others. The greedy plan balances the shards by size as the fully
        parallel save does, so each rank is modelled as reading its own .distcp files' bytes. Every rank also reads
        common.pt twice (serialization.py:121 and load_common_state_dict :174), .metadata twice (one base load for
        objects, one for tensors: fully_parallel.py:246-252, strategies/torch.py:798), metadata.json and the tracker
        file. Without the flag (Megatron-LM's default) every DP replica reads its (tp, pp) slice's weights, dp times
        the weight bytes in all: not modelled here. The legacy torch format (mp_rank_XX/model_optim_rng.pt) is not
        modelled either."""
        if any(file_name(f.path) in ("model_optim_rng.pt", "distrib_optim.pt") for f in manifest):
            return RestoreReads(None, ["Megatron's legacy torch checkpoint format: its resume reads are not modelled"])
        done = dcp_load(par, manifest, sharded=True, metadata_reads=2)
        reads = list(done.reads or [])
        for f in manifest:
            name = file_name(f.path)
            if name in ("common.pt", "metadata.json", "latest_checkpointed_iteration.txt"):
                reads.append(Read(f.path, f.bytes, every_rank(par), 2 if name == "common.pt" else 1))
        return RestoreReads(
            reads,
            [
                "Megatron resume modelled with --ckpt-fully-parallel-load: each shard read once in its data-parallel "
                "group and broadcast; without it every data-parallel replica reads its slice's weights"
            ],
        )

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        directory = f"iter_{inp.step:07d}"
        out = distcp_files(inp, directory, lambda s: self.persisted(s, inp.par.zero))
        out.append(ManifestFile(path=f"{directory}/common.pt", bytes=COMMON_PT_BYTES, rank=0, node=0, kind="small"))
        out.append(
            ManifestFile(path=f"{directory}/metadata.json", bytes=CONFIG_JSON_BYTES // 10, rank=0, node=0, kind="small")
        )
        out.append(
            ManifestFile(path="latest_checkpointed_iteration.txt", bytes=LATEST_TAG_BYTES, rank=0, node=0, kind="small")
        )
        return out
