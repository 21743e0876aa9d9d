"""`ckplan clean`: remove what a killed probe left behind."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from ckplan import scratch
from ckplan.errors import InputError
from ckplan.schema import Model


class CleanResult(Model):
    target: str
    removed: list[str]
    kept: list[str]  # probes that may still be running: other hosts', live S3 ones (remove with --force)
    why: dict[str, str] = {}  # kept entry -> why, where more is known than "another host's"


def clean_target(path: Path, force: bool = False) -> CleanResult:
    if not path.is_dir():
        raise InputError(f"{path} is not a directory")
    removed, kept, why = [], [], {}
    for found in scratch.scratch_dirs(path):
        elsewhere = found.host not in (None, socket.gethostname())
        if found.live and not elsewhere:
            continue  # a probe running on this host
        if found.live and not force:  # its heartbeat is fresh: a probe running on another host
            kept.append(str(found.path))
            why[str(found.path)] = (
                f"a probe on {found.host} (pid {found.pid}) rewrote its marker within the last "
                f"{scratch.STALE_AFTER_S:.0f} s"
            )
            continue
        shutil.rmtree(found.path, ignore_errors=True)
        removed.append(str(found.path))
    return CleanResult(target=str(path), removed=removed, kept=kept, why=why)
