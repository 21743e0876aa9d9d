"""`ckplan clean`: remove what a killed probe left behind."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from ckplan.errors import InputError
from ckplan.probe import target
from ckplan.schema import Model


class CleanResult(Model):
    target: str
    removed: list[str]
    kept: list[str]  # probes that may still be running: other hosts', live S3 ones (remove with --force)
    why: dict[str, str] = {}  # kept entry -> why, where more is known than "another host's"


def clean_target(path: Path, force: bool = False) -> CleanResult:
    if not path.is_dir():
        raise InputError(f"{path} is not a directory")
    removed, kept = [], []
    for found in target.scratch_dirs(path):
        if found.live:
            continue
        if found.host not in (None, socket.gethostname()) and not force:
            kept.append(str(found.path))
            continue
        shutil.rmtree(found.path, ignore_errors=True)
        removed.append(str(found.path))
    return CleanResult(target=str(path), removed=removed, kept=kept)
