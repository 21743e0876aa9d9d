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

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import ClassVar

from ckplan.frameworks.dcp import DistcpFile, dcp_load, distcp_files
from ckplan.frameworks.framework import DCP_SAVER, Framework
from ckplan.frameworks.layout import (
    CONFIG_JSON_BYTES,
    LATEST_TAG_BYTES,
    TORCH_SAVE_OVERHEAD_BYTES,
    BufferedWriter,
    FileKind,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    RestoreReads,
    ZeroShown,
    every_rank,
    file_name,
)
from ckplan.frameworks.logs import Extractor, Save, number, stamp
from ckplan.frameworks.names import Named, WorldPart
from ckplan.model.states import StateBytes

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


# What `size --from` reads back (frameworks/names.py):
# - torch_dist: DCP's files in `iter_{N:07d}/`, plus `common.pt` and `metadata.json` (rank 0);
# - the legacy torch format (megatron/training/checkpointing.py, get_checkpoint_name and
#   get_distributed_optimizer_checkpoint_name): `iter_{N:07d}/mp_rank_{tp:02d}[_{pp:03d}][_{ep:03d}]/model_optim_rng.pt`,
#   and `distrib_optim.pt` beside it with the distributed optimizer, by data-parallel rank 0 of each (tp, pp, ep)
#   group. The data-parallel size is not in the names. Rank order tp, ep, dp, pp (Megatron's default order
#   tp-cp-ep-dp-pp).
LEGACY_DIR = re.compile(r"mp_rank_(\d+)(?:_(\d+))?(?:_(\d+))?")
LEGACY_FILES = ("model_optim_rng.pt", "distrib_optim.pt")
MARKS = ("common.pt", "latest_checkpointed_iteration.txt")  # names a torch_dist save writes beside DCP's files


@dataclass(kw_only=True)
class LegacyFile(Named):
    tp: int
    pp: int  # -1 where the directory names none
    ep: int
    names_writer: ClassVar[bool] = True

    def kind(self, par: Parallelism) -> FileKind:
        return "optimizer" if self.name == "distrib_optim.pt" else "mixed"

    def once(self) -> str | None:
        p = PurePosixPath(self.path)
        return f"{p.parent.name}/{p.name}"

    def numbered(self) -> tuple[str, tuple[int, ...]] | None:
        return self.name, (self.tp, self.pp, self.ep)


@dataclass(kw_only=True)
class CommonPt(Named):
    def kind(self, par: Parallelism) -> FileKind:
        return "small"


class MegatronNames:
    looks_like = "Megatron (iter_NNNNNNN/)"
    step_dirs: tuple[str, ...] = ("iter_",)
    siblings: tuple[str, ...] = ("latest_checkpointed_iteration.txt",)
    ep_files: str | None = None

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        if path.name in LEGACY_FILES and (m := LEGACY_DIR.fullmatch(path.parent.name)):
            tp, pp, ep = (int(g) if g is not None else -1 for g in m.groups())
            return LegacyFile(path=str(path), bytes=size, tp=tp, pp=pp, ep=ep)
        if path.name == "common.pt":
            return CommonPt(path=str(path), bytes=size)
        return None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        if any(isinstance(f, LegacyFile) for f in files):
            return True
        in_iter = any(part.startswith("iter_") for f in files for part in PurePosixPath(f.path).parts[:-1])
        marked = in_iter or any(f.name in MARKS for f in files)
        return marked and any(isinstance(f, DistcpFile) for f in files)

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        legacy = [f for f in files if isinstance(f, LegacyFile)]
        if not legacy:
            return None
        tp = 1 + max(f.tp for f in legacy)
        pp = 1 + max(max(f.pp, 0) for f in legacy)
        eps = 1 + max(max(f.ep, 0) for f in legacy)
        note = (
            f"ranks: Megatron legacy format, tp {tp} × pp {pp}"
            + (f" × ep {eps}" if eps > 1 else "")
            + " from the mp_rank_TT[_PPP][_EEE] directories (a two-number name read as tp, pp), written "
            "by data-parallel rank 0 of each; rank order tp, ep, dp, pp; the data-parallel size is not "
            "in the names"
        )
        return WorldPart(
            [note], label="Megatron", tp=tp, pp=pp, unit=tp * pp, lower=tp * pp * eps, ep=eps if eps > 1 else None
        )

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        for f in files:
            if isinstance(f, LegacyFile):
                f.rank = par.rank(max(f.pp, 0), max(f.ep, 0), f.tp)
        return []


# Megatron-LM (megatron/training/checkpointing.py, timers.py): after "successfully saved checkpoint from iteration
# N to PATH", the timer block "save-checkpoint ......: (min, max)" in ms; the max is the save.
class Megatron(Extractor):
    name = "megatron"
    needles = (b"successfully saved checkpoint", b"save-checkpoint")
    saved = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")
    timer = re.compile(r"save-checkpoint \.*: (?:\(([\d.]+), ([\d.]+)\)|([\d.]+))")

    def __init__(self) -> None:
        self.iteration: str | None = None
        self.at: float | None = None

    def feed(self, line: str) -> Iterator[Save]:
        if "successfully saved checkpoint" in line and (m := self.saved.search(line)):
            self.iteration, self.at = m.group(1), stamp(line)
        if "save-checkpoint" in line and (m := self.timer.search(line)):
            ms = number(m.group(2) or m.group(3), "megatron's save-checkpoint timer is", "milliseconds")
            yield Save(ms / 1000, self.at, f"iteration {self.iteration or '?'}", self.name)
            self.iteration = None


FRAMEWORK = Framework(MegatronLayout(), MegatronNames(), DCP_SAVER, (Megatron,))
