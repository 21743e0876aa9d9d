"""Writes confined to one directory (or key prefix): a plan's manifest names the files a save writes, and a plan
may arrive from anywhere, so nothing it names may land outside the scratch directory ckplan made for it.

A plan's paths are checked where it is read (relative, normalised: CheckpointPlan); every writer checks again
here, against the directory as it is on disk, so that a symlink planted on the way or a plan built in memory
cannot take a write elsewhere either.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ckplan.errors import InputError
from ckplan.frameworks.layout import manifest_path_error


def _refuse(relative: str, why: str) -> InputError:
    return InputError(f"refusing to write the plan's file {relative[:200]!r}: {why}")


def confined_path(root: Path, relative: str) -> Path:
    """`root/relative`, its parent directories made (none followed through a symlink), refusing a path that is
    not a normalised relative one or that resolves outside `root`. The final name must not be a symlink."""
    why = manifest_path_error(relative)
    if why is not None:
        raise _refuse(relative, f"the path {why}")
    base = os.path.realpath(root)
    parent = base
    *dirs, name = relative.split("/")
    for part in dirs:
        parent = os.path.join(parent, part)
        with contextlib.suppress(FileExistsError):
            os.mkdir(parent, 0o755)
        if os.path.islink(parent) or not os.path.isdir(parent):
            raise _refuse(relative, f"{parent} is a symlink or not a directory")
    final = os.path.join(parent, name)
    if os.path.islink(final):
        raise _refuse(relative, f"{final} is a symlink")
    if os.path.commonpath([os.path.realpath(parent), base]) != base:
        raise _refuse(relative, f"it resolves outside {base}")
    return Path(final)


def confined_key(prefix: str, relative: str) -> str:
    """An object key under `prefix` for a plan's file: the same path rule as on a filesystem, since some S3
    clients and gateways resolve `..` in a key's URL."""
    why = manifest_path_error(relative)
    if why is not None:
        raise _refuse(relative, f"the path {why}")
    return prefix + relative
