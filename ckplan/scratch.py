"""Scratch directories and their owner markers: where a probe, a validation or a calibration writes, and how a
live one is told from one a `kill -9` left behind.

Every scratch directory (and every S3 probe's key prefix) is named `PREFIX-HOST-PID-RANDOM` and holds a marker,
MARKER, naming the host and pid that own it. The owner rewrites it every HEARTBEAT_S; it is live while that
heartbeat is under STALE_AFTER_S old and, on this host, its pid still runs. The pid answers at once for a probe
of this host killed a moment ago; the heartbeat's age is all there is for another host's, and it also catches a
dead probe's pid reused by an unrelated process here. `ckplan clean` and the probes' other-probe notes read it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckplan.errors import InputError
from ckplan.readers import read_regular

SCRATCH_PREFIX = ".ckplan-probe-"  # every probe's scratch directory or object prefix starts so; `clean` looks for it
CALIBRATE_PREFIX = "ckplan-calibrate-"  # the calibration's DCP saves, in /dev/shm where it exists
SCRATCH_PREFIXES = (SCRATCH_PREFIX, CALIBRATE_PREFIX)
MARKER = "ckplan-probe.json"
HEARTBEAT_S = 5.0  # how often a running owner rewrites its marker
# A marker older than this belongs to an owner that is gone. It must outlast a heartbeat that takes its full retries
# at an S3 endpoint's default 30 s timeout, or a slow endpoint would make a live probe look dead.
STALE_AFTER_S = 120.0
MAX_MARKER_BYTES = 4096  # a marker is ~80 bytes; anything bigger was not written by ckplan
# remove_tree holds one descriptor per directory level it is inside; a tree deeper than this is emptied from its
# top, its deeper directories moved up there, so no depth costs more descriptors or any recursion
MAX_HELD_LEVELS = 64


def scratch_name(prefix: str = SCRATCH_PREFIX) -> str:
    """A new scratch directory's or key prefix's name: unique, and naming its host and pid for people."""
    return f"{prefix}{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def marker_text() -> str:
    """What a scratch directory's MARKER holds: the host and pid of its owner (a multi-host probe names the host and
    pid that drive it)."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()})


def owner(info: object) -> tuple[str | None, int | None]:
    """(host, pid) from a parsed marker; (None, None) for anything ckplan did not write."""
    if not isinstance(info, dict):
        return None, None
    pid = info.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None, None
    return str(info.get("host")), pid


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: a pid past a C long names no process
        return False
    except PermissionError:
        return True
    return True


def probe_alive(host: str | None, pid: int | None, age_s: float, here: str | None = None) -> bool:
    """An owner is live while its heartbeat is fresh and, on this host, its pid still runs."""
    if age_s > STALE_AFTER_S or pid is None:
        return False
    if host == (here or socket.gethostname()):
        return pid_alive(pid)
    return True


class Heartbeat:
    """Calls `beat` every HEARTBEAT_S from a daemon thread until stopped (`check` after each, when given)."""

    def __init__(self, beat, name: str):
        self.beat, self.stop = beat, threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self.beat()
            except Exception:  # noqa: BLE001 — a missed beat only ages the marker; the owner's own work reports errors
                continue

    def start(self) -> Heartbeat:
        self.thread.start()
        return self

    def end(self) -> None:
        self.stop.set()
        self.thread.join(timeout=HEARTBEAT_S)


class ScratchDir:
    """A uniquely named directory under `parent`, removed on exit, error, Ctrl-C or SIGTERM, its marker rewritten
    every HEARTBEAT_S while it is in use."""

    def __init__(self, parent: Path, prefix: str = SCRATCH_PREFIX):
        self.parent = parent
        self.path = parent / scratch_name(prefix)
        self.heartbeat: Heartbeat | None = None

    def __enter__(self) -> ScratchDir:
        try:
            self.path.mkdir(mode=0o700)
            (self.path / MARKER).write_text(marker_text())
        except OSError as exc:
            remove_tree(self.path)
            raise InputError(f"cannot create a scratch directory in {self.parent}: {exc.strerror}") from None
        self.heartbeat = Heartbeat(lambda: os.utime(self.path / MARKER), "ckplan-scratch-heartbeat").start()
        return self

    def __exit__(self, *exc) -> None:
        if self.heartbeat is not None:
            self.heartbeat.end()
        remove_tree(self.path)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def remove_tree(path: Path) -> None:
    """Remove `path` and everything under it, as far as permissions allow, never following a symbolic link (a link
    is removed, not what it points at) and with no limit on depth: directories are opened relative to their parent
    with O_NOFOLLOW, so a link swapped in for a directory is not entered, and nothing recurses."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    try:
        top = os.open(path, _DIRECTORY)
    except OSError:
        return
    try:
        while _empty(top):
            pass
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _empty(top: int) -> bool:
    """One pass emptying the directory open as `top`; True when it moved directories up to `top` that a further
    pass must empty."""
    moved = False
    # each level: the directory's descriptor, its listing, and its name in the level above
    levels: list[tuple[int, Any, str]] = [(top, os.scandir(top), "")]
    try:
        while levels:
            fd, entries, name = levels[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                levels.pop()
                if levels:
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        os.rmdir(name, dir_fd=levels[-1][0])
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if not is_dir:
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
            elif len(levels) < MAX_HELD_LEVELS:
                try:
                    child = os.open(entry.name, _DIRECTORY, dir_fd=fd)
                except OSError:
                    continue
                levels.append((child, os.scandir(child), entry.name))
            else:
                with contextlib.suppress(OSError):
                    os.rename(entry.name, f".deep-{secrets.token_hex(8)}", src_dir_fd=fd, dst_dir_fd=top)
                    moved = True
    finally:
        for i, (fd, entries, _) in enumerate(levels):
            entries.close()
            if i:
                os.close(fd)
    return moved


@dataclass(frozen=True)
class Scratch:
    """A scratch directory found under a target, with what its marker says about its owner."""

    path: Path
    host: str | None
    pid: int | None
    live: bool


def scratch_dirs(parent: Path, prefixes: tuple[str, ...] = SCRATCH_PREFIXES) -> list[Scratch]:
    """Every ckplan scratch directory directly under `parent`, judged by its marker."""
    out = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(prefixes) or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            # another user can plant a directory of this name, its marker a FIFO or a link to /dev/zero
            text, st = read_regular(entry / MARKER, "scratch marker", MAX_MARKER_BYTES, follow=False)
            age = max(0.0, now - st.st_mtime)
            host, pid = owner(json.loads(text))
        except (InputError, ValueError, RecursionError):
            host, pid, age = None, None, float("inf")
        out.append(Scratch(entry, host, pid, probe_alive(host, pid, age)))
    return out


def leftovers(parent: Path) -> list[Path]:
    """Scratch directories under `parent` whose owner is gone."""
    return [s.path for s in scratch_dirs(parent) if not s.live]
