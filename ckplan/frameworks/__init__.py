"""What ckplan knows of each framework, one module per framework, joined by one registry.

A framework's module (frameworks/<name>.py) holds its save layout and restore reads (frameworks/layout.py's
interface), its log extractor (frameworks/logs.py's) and its `FRAMEWORK` record (frameworks/framework.py), which
names its saver and its recorder adapters. Code outside these modules asks the record (`framework_of(name)`) and
never compares a framework's name (tests/test_structure.py checks it). This package sits on the bottom floor: it
imports only what describes a model (ckplan/model/), units, errors and the schema.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ckplan.errors import InputError, did_you_mean
from ckplan.frameworks import accelerate, dcp, deepspeed, dlio, hf, lightning, megatron
from ckplan.frameworks.framework import Framework
from ckplan.frameworks.logs import Extractor
from ckplan.frameworks.names import Named

# One line per framework. The order is the order in which `size --from` asks each framework whether a directory
# holds its checkpoint (a framework whose saves hold another's files before that one: HF Trainer's hold DeepSpeed's
# or DCP's, Megatron's DCP's), and the order in which diagnose feeds a log's lines to the extractors.
FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        dlio.FRAMEWORK,
        accelerate.FRAMEWORK,
        hf.FRAMEWORK,
        megatron.FRAMEWORK,
        deepspeed.FRAMEWORK,
        dcp.FRAMEWORK,
        lightning.FRAMEWORK,
    )
}

# every built-in log extractor, once, in the registry's order
LOG_EXTRACTORS: tuple[type[Extractor], ...] = tuple(
    dict.fromkeys(cls for f in FRAMEWORKS.values() for cls in f.extractors)
)

# a checkpoint directory's name, any framework's: (its prefix, the step)
STEP_DIR = re.compile("(" + "|".join(re.escape(p) for f in FRAMEWORKS.values() for p in f.names.step_dirs) + r")(\d+)")
# files a save writes beside its checkpoint directory, any framework's
SAVE_SIBLINGS: tuple[str, ...] = tuple(n for f in FRAMEWORKS.values() for n in f.names.siblings)


def read_name(path: str, size: int) -> tuple[Named, str | None]:
    """The file as the first framework's names that read it read it, with that framework's name; else a plain
    record, written by rank 0, and None."""
    p = PurePosixPath(path)
    for fw in FRAMEWORKS.values():
        if (named := fw.names.read(p, size)) is not None:
            return named, fw.name
    return Named(path=path, bytes=size), None


def framework_of(name: str) -> Framework:
    """The record of the framework a plan names (a plan file may have been edited by hand)."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise InputError(f"unknown framework {name!r}{did_you_mean(name, sorted(FRAMEWORKS))}") from None
