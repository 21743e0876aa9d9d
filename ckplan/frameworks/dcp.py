"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint.save, FileSystemWriter).

- One directory per checkpoint (`step-{N}/`, torchtitan's naming).
- Each rank writes `__{rank}_{k}.distcp`, one file per writer thread
  (thread_count defaults to 1), and fsyncs it (sync_files=True).
- The coordinator (rank 0) writes `.metadata` through `.metadata.tmp` and a rename.
- Replicated tensors (DDP, or TP-replicated) are deduplicated and the save
  plan balances them across ranks, so every rank writes about 1/N of the bytes;
  FSDP/ZeRO-3 shards are disjoint and also 1/N each.
- What is saved is the module's parameters, which are fp32 under torch AMP and
  FSDP mixed precision (the half copy is transient), plus the optimizer state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import ClassVar

from ckplan.frameworks.framework import DCP_SAVER, Framework
from ckplan.frameworks.layout import (
    DCP_METADATA_PER_CHUNK_BYTES,
    BufferedWriter,
    FileKind,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    Readers,
    RestoreReads,
    ZeroShown,
    every_rank,
    file_name,
    fp32_copy_only,
    own_rank,
    split_even,
    total,
)
from ckplan.frameworks.logs import Extractor, Save, number, stamp
from ckplan.frameworks.names import Named, WorldPart
from ckplan.model.states import StateBytes


def distcp_files(
    inp: LayoutInput, directory: str, states_of: Callable[[list[StateBytes]], list[StateBytes]]
) -> list[ManifestFile]:
    """One `.distcp` per rank holding an even share of its pipeline stage, plus `.metadata`.

    Under expert parallelism a rank holds the stage's dense tensors and only its EP rank's experts: it writes
    1/(dp·tp) of the dense bytes and 1/(edp·tp) of its EP rank's 1/ep of the expert bytes (which comes to the
    same 1/N when the experts are even), and each expert tensor is chunked over its edp·tp holders only.
    """
    par = inp.par
    out: list[ManifestFile] = []
    chunks = 0
    for stage, stage_tensors in enumerate(inp.stage_tensors()):
        states = states_of(inp.states(stage_tensors))
        ranks = [par.rank(stage, dp, tp) for dp in range(par.dp) for tp in range(par.tp)]
        if par.ep == 1:
            chunks += len(stage_tensors) * len(states) * par.dp * par.tp
            shares = split_even(inp.scaled(total(states)), len(ranks))
        else:
            dense = [t for t in stage_tensors if t.expert is None]
            experts = [t for t in stage_tensors if t.expert is not None]
            chunks += (len(dense) * par.dp + len(experts) * par.edp) * len(states) * par.tp
            dense_shares = split_even(inp.scaled(total(states_of(inp.states(dense)))), len(ranks))
            per_ep_rank = split_even(inp.scaled(total(states_of(inp.states(experts)))), par.ep)
            expert_shares = [split_even(b, par.edp * par.tp) for b in per_ep_rank]
            shares = [
                dense_shares[dp * par.tp + tp] + expert_shares[dp % par.ep][dp // par.ep * par.tp + tp]
                for dp in range(par.dp)
                for tp in range(par.tp)
            ]
        for rank, share in zip(ranks, shares, strict=False):
            out.append(
                ManifestFile(
                    path=f"{directory}/__{rank}_0.distcp", bytes=share, rank=rank, node=par.node(rank), kind="mixed"
                )
            )
    out.sort(key=lambda f: f.rank)
    out.append(
        ManifestFile(
            path=f"{directory}/.metadata", bytes=DCP_METADATA_PER_CHUNK_BYTES * chunks, rank=0, node=0, kind="small"
        )
    )
    return out


def dcp_load(par: Parallelism, manifest: list[ManifestFile], sharded: bool, metadata_reads: int = 1) -> RestoreReads:
    """dcp.load on every rank (docs/restore-reads.md §4): each reads and unpickles the whole `.metadata`
    (state_dict_loader.py:234, filesystem.py:926-930) and every saved chunk that overlaps its own, whole
    (default_planner.py:477-516, filesystem.py:852-905). `sharded` (FSDP, ZeRO ≥ 1, or Megatron's fully parallel
    load): a rank's chunks are the ones it saved, its own .distcp files. Else (DDP) every rank of a pipeline stage
    holds all of the stage's tensors and reads every .distcp file of the stage; with tensor parallelism a rank's
    chunks are spread over its stage's files in a way the sizes do not tell, so the reads are not modelled."""
    reads: list[Read] = []
    for f in manifest:
        if f.path.endswith(".distcp"):
            if sharded:
                readers = own_rank(f.rank)
            elif par.tp > 1:
                return RestoreReads(
                    None,
                    [
                        "DCP under DDP with tensor parallelism: which saved chunks overlap a rank's slice is not in "
                        "the file sizes, so its resume reads are not modelled"
                    ],
                )
            else:  # a stage's dp ranks are consecutive when tp is 1
                stage = f.rank // par.dp
                readers = Readers(stage * par.dp, 1, par.dp)
            reads.append(Read(f.path, f.bytes, readers))
        elif file_name(f.path) == ".metadata":
            reads.append(Read(f.path, f.bytes, every_rank(par), metadata_reads))
    return RestoreReads(reads, [])


class DcpLayout(BufferedWriter):
    name = "dcp"
    description = "PyTorch Distributed Checkpoint (one .distcp per rank plus .metadata)"
    coordinated_save = True
    shows_zero_stage: ZeroShown = "always"
    renames_per_save = 1  # .metadata.tmp -> .metadata
    # the files are alike under DDP and FSDP (DCP dedups replicated tensors when saving)
    measured_restore_zero: int | None = 3
    measured_restore_note = (
        "DCP's files do not tell DDP from FSDP: the resume is taken as sharded (each rank reads its own .distcp "
        "files and .metadata); under DDP every rank reads every .distcp file"
    )
    supports_ep = True  # torchtitan: experts Shard(0) over the ep mesh, FSDP over dp_shard / ep

    def check(self, par: Parallelism) -> None:
        return None

    def notes(self, par: Parallelism, options: dict[str, str]) -> list[str]:
        if par.ep == 1:
            return []
        return [
            f"DCP under expert parallelism (torchtitan): expert weights are sharded over the ep {par.ep} mesh "
            f"and FSDP-sharded over its {par.edp} expert-data-parallel ranks, dense ones over all {par.dp}; "
            "every rank saves its own shards, so each still writes ~1/N"
        ]

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return fp32_copy_only(states)

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """ZeRO ≥ 1 (FSDP's sharded state dict) loads each rank's own chunks; ZeRO-0 (DDP) replicated tensors."""
        return dcp_load(par, manifest, sharded=par.zero > 0)

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        return distcp_files(inp, f"step-{inp.step}", lambda s: self.persisted(s, inp.par.zero))


# DCP prints nothing of its own; torchtitan (torchtitan/components/checkpoint.py), which saves with it, prints
# "Finished saving the checkpoint (or staging if async is enabled)in 12.34 seconds."
class Torchtitan(Extractor):
    name = "torchtitan"
    needles = (b"Finished saving the checkpoint",)
    pattern = re.compile(
        r"Finished saving the checkpoint(?: \(or staging if async is enabled\))?\s*in ([\d.]+) seconds"
    )

    def __init__(self) -> None:
        self.n = 0

    def feed(self, line: str) -> Iterator[Save]:
        if "Finished saving the checkpoint" in line and (m := self.pattern.search(line)):
            self.n += 1
            yield Save(number(m.group(1), "torchtitan's save time is"), stamp(line), f"save {self.n}", self.name)


# What `size --from` reads back (frameworks/names.py): `__{rank}_{k}.distcp` by that rank; `.metadata` by the
# coordinator, rank 0.
DISTCP = re.compile(r"__(\d+)_(\d+)\.distcp")


@dataclass(kw_only=True)
class DistcpFile(Named):
    writer: int  # the rank in the name
    thread: int
    names_writer: ClassVar[bool] = True
    coordinated: ClassVar[bool] = True

    def kind(self, par: Parallelism) -> FileKind:
        return (
            "optimizer"
            if any(part.startswith("optimizer") for part in PurePosixPath(self.path).parts[:-1])
            else "mixed"
        )

    def numbered(self) -> tuple[str, tuple[int, ...]] | None:
        # DCP's files repeat in each of its directories (HF's FSDP optimizer_0/__0_0.distcp beside pytorch_model_fsdp_0/)
        return str(PurePosixPath(self.path).parent), (self.writer, self.thread)


@dataclass(kw_only=True)
class DcpMetadata(Named):
    renamed_from: ClassVar[str | None] = ".metadata.tmp"

    def kind(self, par: Parallelism) -> FileKind:
        return "small"


class DcpNames:
    looks_like = "DCP (__R_0.distcp + .metadata)"
    step_dirs: tuple[str, ...] = ("step-", "step_")
    siblings: tuple[str, ...] = ()
    ep_files: str | None = None

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        if m := DISTCP.fullmatch(path.name):
            return DistcpFile(path=str(path), bytes=size, writer=int(m[1]), thread=int(m[2]))
        if path.name == ".metadata":
            return DcpMetadata(path=str(path), bytes=size)
        return None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        return any(isinstance(f, DistcpFile) for f in files)

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        ranks = {f.writer for f in files if isinstance(f, DistcpFile)}
        if not ranks:
            return None
        note = f"ranks: DCP, {len(ranks)} rank(s) from the __R_0.distcp names" + (
            f" (rank(s) up to {max(ranks)}, some wrote none)" if len(ranks) <= max(ranks) else ""
        )
        return WorldPart([note], label="DCP", known=1 + max(ranks))

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        for f in files:
            if isinstance(f, DistcpFile):
                f.rank = f.writer
        return []


FRAMEWORK = Framework(DcpLayout(), DcpNames(), DCP_SAVER, (Torchtitan,), recorders=("dcp_save", "dcp_async_save"))
