"""One record per framework: what ckplan knows of it, in one place.

A `Framework` joins its layout (sizing/layouts/<name>.py: the files a save writes, and the capabilities the
planner reads there), its saver (how `validate` and the probe's replay save those files, savers/saver.py),
its log extractor (what `diagnose` reads its save times with, diagnose/extractors.py). Its capabilities
(coordinated save, ZeRO stages shown, expert parallelism) are the layout's, read there by the planner.
Code outside a framework's own modules asks its record (`framework_of(name)`) and never compares a framework's
name (tests/test_structure.py checks it).

The layouts stay in sizing/, whose pure core may not import diagnose/ or validate/; this registry, above them,
imports the layouts and the extractor classes. Importing it imports neither torch nor rich: a saver is a name
that savers/saver.py acts on inside its save processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ckplan.diagnose.extractors import DeepSpeed, Extractor, HfTrainer, Lightning, Megatron, Torchtitan
from ckplan.errors import InputError, did_you_mean
from ckplan.sizing.layouts import LAYOUTS
from ckplan.sizing.layouts.base import Layout

# torch.save: one torch.save per file; dcp: torch.distributed.checkpoint.save with every rank in a gloo group;
# safetensors: safetensors.torch.save_file for the .safetensors files and torch.save for the others
SaverKind = Literal["torch.save", "dcp", "safetensors"]


@dataclass(frozen=True, slots=True)
class Saver:
    """How validate and the probe's replay save a framework's files (savers/saver.py)."""

    kind: SaverKind
    how: str  # the one line `validate` reports as its saver


@dataclass(frozen=True, slots=True)
class Framework:
    layout: Layout
    saver: Saver
    extractors: tuple[type[Extractor], ...]  # what diagnose reads this framework's logs with
    no_extractor: str | None = None  # why there is none, where `extractors` is empty

    def __post_init__(self) -> None:
        if bool(self.extractors) == bool(self.no_extractor):
            raise ValueError(f"{self.name}: give log extractors, or no_extractor with the reason there is none")

    @property
    def name(self) -> str:
        return self.layout.name


_DCP = Saver("dcp", "torch.distributed.checkpoint.save (gloo)")

# One line per framework. The order is the order in which diagnose feeds a log's lines to the extractors.
FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        # DCP prints nothing of its own; torchtitan, which saves with it, prints each save's time
        Framework(LAYOUTS["dcp"], _DCP, (Torchtitan,)),
        Framework(LAYOUTS["megatron"], _DCP, (Megatron,)),
        Framework(LAYOUTS["deepspeed"], Saver("torch.save", "torch.save per rank file"), (DeepSpeed,)),
        Framework(
            LAYOUTS["hf"],
            Saver("safetensors", "safetensors.torch.save_file shards + torch.save optimizer/RNG"),
            (HfTrainer,),
        ),
        Framework(LAYOUTS["lightning"], Saver("torch.save", "torch.save of one .ckpt"), (Lightning,)),
        Framework(
            LAYOUTS["dlio"],
            Saver("torch.save", "torch.save per rank file (DLIO's random tensors)"),
            (),
            no_extractor="no sample of what DLIO prints per save has been checked (tests/fixtures/logs holds "
            "none); --pattern reads its log",
        ),
    )
}

# every built-in log extractor, once, in the registry's order
LOG_EXTRACTORS: tuple[type[Extractor], ...] = tuple(
    dict.fromkeys(cls for f in FRAMEWORKS.values() for cls in f.extractors)
)


def framework_of(name: str) -> Framework:
    """The record of the framework a plan names (a plan file may have been edited by hand)."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise InputError(f"unknown framework {name!r}{did_you_mean(name, list(FRAMEWORKS))}") from None
