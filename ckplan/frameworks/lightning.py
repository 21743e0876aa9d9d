"""PyTorch Lightning's default checkpoint: one torch.save file from rank 0.

`epoch={e}-step={N}.ckpt` under `checkpoints/` holds the module's state_dict
(fp32 under AMP), optimizer and scheduler states, loops and callbacks. Applies
to single-device and DDP strategies; Lightning's FSDP strategy writes a DCP
directory and its DeepSpeed strategy writes DeepSpeed's layout.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import ClassVar

from ckplan.errors import InputError
from ckplan.frameworks.framework import Framework, LooseSave, Saver
from ckplan.frameworks.layout import (
    RNG_STATE_BYTES,
    SCHEDULER_BYTES,
    BufferedWriter,
    FileKind,
    LayoutInput,
    ManifestFile,
    Parallelism,
    Read,
    RestoreReads,
    ZeroShown,
    every_rank,
    fp32_copy_only,
    not_read_note,
    torch_save_bytes,
    total,
)
from ckplan.frameworks.logs import TIMESTAMP_BYTES, Extractor, Save, stamp
from ckplan.frameworks.names import Named, WorldPart
from ckplan.model.states import StateBytes


class LightningLayout(BufferedWriter):
    name = "lightning"
    description = "PyTorch Lightning ModelCheckpoint (one .ckpt via torch.save, rank 0)"
    shows_zero_stage: ZeroShown = "never"
    default_zero = 0  # one stage: no sharding

    def check(self, par: Parallelism) -> None:
        if par.zero or par.tp > 1 or par.pp > 1:
            raise InputError(
                "the lightning layout is one torch.save file (DDP: ‹zero› 0, ‹tp› 1, ‹pp› 1); "
                "Lightning's FSDP strategy writes DCP (‹framework› dcp), its DeepSpeed strategy DeepSpeed's layout"
            )

    def persisted(self, states: list[StateBytes], zero: int, options: dict[str, str] | None = None) -> list[StateBytes]:
        return fp32_copy_only(states)

    def restore(self, par: Parallelism, manifest: list[ManifestFile]) -> RestoreReads:
        """Every rank torch.loads the whole .ckpt before setup and restores the optimizer, loops and callbacks from
        that dict (checkpoint_connector.py:67-84, strategy.py:366-368, torch_io.py:61-91, trainer.py:1044-1046)."""
        reads = [Read(f.path, f.bytes, every_rank(par)) for f in manifest if f.path.endswith(".ckpt")]
        unread = [f.path for f in manifest if not f.path.endswith(".ckpt")]
        return RestoreReads(reads, not_read_note(unread, "Lightning resumes from the one .ckpt"))

    def files(self, inp: LayoutInput) -> list[ManifestFile]:
        states = self.persisted(inp.states(inp.tensors), 0)
        payload = inp.scaled(total(states)) + SCHEDULER_BYTES + RNG_STATE_BYTES
        size = int(torch_save_bytes(payload, len(inp.tensors) * len(states)))
        return [
            ManifestFile(path=f"checkpoints/epoch=0-step={inp.step}.ckpt", bytes=size, rank=0, node=0, kind="mixed")
        ]


# PyTorch Lightning (ModelCheckpoint, verbose): "... saving model to 'PATH' ..." lines carry no duration; with a
# timestamped log format the save runs until the next timestamped line, an upper bound.
class Lightning(Extractor):
    name = "lightning"
    needles = (b"saving model to",)
    start = re.compile(r"saving model to '([^']+)'")

    def __init__(self) -> None:
        self.path: str | None = None
        self.begin = 0.0

    def feed(self, line: str) -> Iterator[Save]:
        if self.path and (t := stamp(line)) is not None and t > self.begin:
            yield Save(t - self.begin, t, self.path.rsplit("/", 1)[-1], self.name)
            self.path = None
        if "saving model to" in line and (m := self.start.search(line)) and (t := stamp(line)) is not None:
            self.path, self.begin = m.group(1), t

    def wanted(self) -> bytes | re.Pattern[bytes] | None:
        return TIMESTAMP_BYTES if self.path else None  # the next timestamped line ends the save


# What `size --from` reads back (frameworks/names.py): `*.ckpt` (ModelCheckpoint's `epoch={e}-step={N}.ckpt`,
# `last.ckpt`) by rank 0; the world size is not in the names.
CKPT = re.compile(r".+\.ckpt")
CKPT_STEP = re.compile(r"(?:^|[-_])step=(\d+)")  # ModelCheckpoint's default name: epoch={e}-step={N}.ckpt


def ckpt_step(name: str) -> int:
    """The step in a Lightning checkpoint's file name (`epoch=0-step=500.ckpt`), or -1 where it names none."""
    m = CKPT_STEP.search(name)
    return int(m[1]) if m else -1


@dataclass(kw_only=True)
class CkptFile(Named):
    names_writer: ClassVar[bool] = True

    def kind(self, par: Parallelism) -> FileKind:
        return "mixed"  # the module's state_dict, the optimizer's and the loops' in one torch.save

    def step(self) -> int | None:
        at = ckpt_step(self.name)
        return at if at >= 0 else None


class LightningNames:
    looks_like = "Lightning (*.ckpt)"
    step_dirs: tuple[str, ...] = ()
    siblings: tuple[str, ...] = ()
    ep_files: str | None = None

    def read(self, path: PurePosixPath, size: int) -> Named | None:
        return CkptFile(path=str(path), bytes=size) if CKPT.fullmatch(path.name) else None

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        return any(isinstance(f, CkptFile) for f in files)

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        if not any(isinstance(f, CkptFile) for f in files):
            return None
        return WorldPart(["ranks: Lightning, rank 0 writes the .ckpt (DDP and one device alike)"])

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        return []


# a file of these kinds beside .ckpt files says the directory is not a Lightning run's
STATE_SUFFIXES = (".pt", ".pth", ".bin", ".distcp", ".safetensors")


def newest_save(files: list[tuple[str, int]], notes: list[str], name: str, path: str) -> LooseSave | None:
    """A Lightning run's newest checkpoint out of every file under DIR (`path`, named `name`), with a `last*.ckpt`
    beside it; None where DIR holds no Lightning checkpoint. Paths of .ckpt files lying in DIR itself are led by
    DIR's name."""
    steps = {p: ckpt_step(PurePosixPath(p).name) for p, _ in files if CKPT.fullmatch(PurePosixPath(p).name)}
    if not steps or any(p.endswith(STATE_SUFFIXES) for p, _ in files):
        return None
    newest = max(steps.values())
    if newest < 0 and len(steps) > 1:
        raise InputError(
            f"‹from_dir› {path} holds {len(steps)} Lightning checkpoints whose names give no step "
            f"({', '.join(sorted(steps)[:3])}{', …' if len(steps) > 3 else ''}): give the directory of one"
        )
    chosen = next(p for p, step in steps.items() if step == newest)
    where = PurePosixPath(chosen).parent
    kept = [
        (p, b)
        for p, b in files
        if p in steps
        and (steps[p] == newest or (PurePosixPath(p).parent == where and PurePosixPath(p).name.startswith("last")))
    ]
    saves = len({step for step in steps.values() if step >= 0})
    if saves > 1:
        notes.append(f"{path} holds {saves} Lightning checkpoints: the newest, {chosen}, is measured")
    if len(files) > len(kept):
        left = len(files) - len(kept)
        notes.append(f"{left} other file{'' if left == 1 else 's'} under {path} left out: not part of the save")
    if str(where) == ".":
        kept = [(f"{name}/{p}", b) for p, b in kept]
    return kept, notes


FRAMEWORK = Framework(
    LightningLayout(),
    LightningNames(),
    Saver("torch.save", "torch.save of one .ckpt"),
    (Lightning,),
    recorders=("RecordingCheckpointIO",),
    newest_save=newest_save,
)
