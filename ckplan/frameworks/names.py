"""How `size --from` reads a checkpoint's file names back: the interface each framework's names implement.

A framework's `Names` (in its module, frameworks/<name>.py, named by its record) reads one file's path into a
record of its own (a `Named` subclass whose fields are the numbers its name holds) or passes; says whether the
files read are its checkpoint; and, from its own records, what the names say of the world (`WorldPart`) and then
which rank wrote each. sizing/measured.py reads a directory against every framework's names at once (an HF Trainer
directory holds DeepSpeed's or DCP's files, and the world size comes from whichever names give it) and knows no
framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import ClassVar, Protocol

from ckplan.frameworks.layout import FileKind, Parallelism

SMALL_FILE_BYTES = 2**20  # a file of no known kind smaller than this is counted with the small files
SMALL_SUFFIXES = (".json", ".txt", ".py", ".md", ".yaml", ".model")


@dataclass
class Named:
    """One file of a checkpoint and what its name says; a file no framework's names read is a plain `Named`,
    written by rank 0, its kind guessed from its suffix and size."""

    path: str
    bytes: int
    rank: int = 0  # set once the world is known
    # whether the name says which rank writes the file (else it is rank 0's, and the plan lists it as such)
    names_writer: ClassVar[bool] = False
    renamed_from: ClassVar[str | None] = None  # the temporary name the file is written under and renamed from
    coordinated: ClassVar[bool] = False  # written by a save that coordinates its ranks (DCP's planner)

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    def kind(self, par: Parallelism) -> FileKind:
        p = PurePosixPath(self.path)
        if p.suffix in SMALL_SUFFIXES:
            return "small"
        if p.name.startswith("optimizer") and p.suffix in (".pt", ".bin"):
            return "optimizer"
        if p.suffix == ".safetensors" or p.name.startswith("pytorch_model") and p.suffix == ".bin":
            return "weights"
        return "small" if self.bytes < SMALL_FILE_BYTES else "mixed"

    def once(self) -> str | None:
        """What one writer writes once per save (two files with it: the directory holds two saves), or None."""
        return None

    def numbered(self) -> tuple[str, tuple[int, ...]] | None:
        """(scope, numbers): within the scope, the numbers name one writer's file (01 and 1 alike), or None."""
        return None

    def step(self) -> int | None:
        """The training step the file's own name gives (a whole checkpoint in one file), or None."""
        return None

    def precision(self) -> str | None:
        """The training precision the name shows, where it shows one."""
        return None


@dataclass(kw_only=True)
class ProcessFile(Named):
    """A small file each process writes of its own (its RNG states), numbered by the process."""

    process: int
    names_writer: ClassVar[bool] = True

    def kind(self, par: Parallelism) -> FileKind:
        return "small"

    def numbered(self) -> tuple[str, tuple[int, ...]] | None:
        # in one directory, rng_state.pth beside rng_state_0.pth names one process's file twice
        return str(PurePosixPath(self.path).parent), (self.process,)


def process_world(files: Sequence[Named], record: type[ProcessFile], label: str, names: str) -> WorldPart | None:
    """The world as many processes as the highest process number in the `record` files' names, where there are any."""
    processes = {f.process for f in files if isinstance(f, record)}
    if not processes:
        return None
    n = 1 + max(processes)
    return WorldPart([f"ranks: {label}, {n} process(es) from the {names} names"], label, n)


def process_ranks(files: Sequence[Named], record: type[ProcessFile]) -> list[str]:
    """Each `record` file written by the process its name numbers."""
    for f in files:
        if isinstance(f, record):
            f.rank = f.process
    return []


@dataclass
class WorldPart:
    """What one framework's names say of the world that saved them."""

    notes: list[str]
    label: str = ""  # whose names these are, in the note where two disagree
    known: int | None = None  # the world size, where the names give every rank
    unit: int = 1  # the model-parallel size: the world is a multiple of it
    lower: int = 1  # the world is at least this
    tp: int | None = None  # the model-parallel split, where the names give it
    pp: int | None = None
    zero: int = 0
    ep: int | None = None  # the expert-parallel size, where the names give it
    # the expert-parallel size (--ep) places these files' writers and readers: why a resume's reads are not
    # known without it
    needs_ep: str | None = None


class Names(Protocol):
    """One framework's file-name rules, read backwards from its layout."""

    looks_like: str  # what its checkpoint's files look like, for the refusal of a directory no names read
    step_dirs: tuple[str, ...]  # the regex prefixes of its checkpoint directories' names, before the step
    siblings: tuple[str, ...]  # files a save writes beside its checkpoint directory (`latest`)
    ep_files: str | None  # the files --ep places, named in the refusal of an --ep a checkpoint without them is given

    def read(self, path: PurePosixPath, size: int) -> Named | None: ...

    def recognises(self, files: Sequence[Named], source: str) -> bool:
        """Whether these files, all of the checkpoint's in `source`, are this framework's save; an InputError
        where they are and its saves cannot be read back."""
        ...

    def world(self, files: Sequence[Named], ep: int | None) -> WorldPart | None:
        """What this framework's own records (of `files`) say of the world, or None where it has none."""
        ...

    def ranks(self, files: Sequence[Named], par: Parallelism, ep: int | None) -> list[str]:
        """Set the rank of each of this framework's own records of `files`; notes of what was assumed."""
        ...
