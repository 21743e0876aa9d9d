"""`ckplan clean`: remove what a killed probe left behind."""

from __future__ import annotations

import json
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
    for entry in target.leftovers(path):
        try:
            host = json.loads((entry / target.MARKER).read_text()).get("host")
        except (OSError, ValueError):
            host = None
        if host not in (None, socket.gethostname()) and not force:
            kept.append(str(entry))
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(str(entry))
    return CleanResult(target=str(path), removed=removed, kept=kept)
