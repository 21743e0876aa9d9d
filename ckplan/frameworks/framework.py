"""The record that joins what ckplan knows of one framework, which its module (frameworks/<name>.py) fills in.

Importing it imports neither torch nor rich: a saver is a name that savers/saver.py acts on inside its save
processes, and a recorder is the name of an adapter that ckplan.record imports only when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ckplan.frameworks.layout import Layout
from ckplan.frameworks.logs import Extractor
from ckplan.frameworks.names import Names

# torch.save: one torch.save per file; dcp: torch.distributed.checkpoint.save with every rank in a gloo group;
# safetensors: safetensors.torch.save_file for the .safetensors files and torch.save for the others
SaverKind = Literal["torch.save", "dcp", "safetensors"]


@dataclass(frozen=True, slots=True)
class Saver:
    """How validate and the probe's replay save a framework's files (savers/saver.py)."""

    kind: SaverKind
    how: str  # the one line `validate` reports as its saver


DCP_SAVER = Saver("dcp", "torch.distributed.checkpoint.save (gloo)")


# (path, bytes) of a directory's files, with the notes of what was chosen among them
LooseSave = tuple[list[tuple[str, int]], list[str]]
# the newest save among the loose files of a directory a run saves into (its files, its notes, the directory's own
# name, the directory as given), for a framework whose saves are files rather than step directories; None: none
NewestSave = Callable[[list[tuple[str, int]], list[str], str, str], LooseSave | None]


@dataclass(frozen=True, slots=True)
class Framework:
    layout: Layout  # the files a save writes and a resume reads, and the capabilities the planner reads there
    names: Names  # how `size --from` reads its files' names back
    saver: Saver
    extractors: tuple[type[Extractor], ...]  # what diagnose reads this framework's logs with
    no_extractor: str | None = None  # why there is none, where `extractors` is empty
    recorders: tuple[str, ...] = ()  # the adapters in ckplan.record that time this framework's saves in the job
    newest_save: NewestSave | None = None  # `size --from` of a run's directory of loose checkpoint files

    def __post_init__(self) -> None:
        if bool(self.extractors) == bool(self.no_extractor):
            raise ValueError(f"{self.name}: give log extractors, or no_extractor with the reason there is none")

    @property
    def name(self) -> str:
        return self.layout.name
