"""Every path ckplan will write (--out, --save's profile directory, --chart, --record, --emit-jobs, a report's
directory), checked before the work whose result it would hold: a probe or a validation runs for minutes, and a
path found unwritable after it loses the measurement.

A check writes nothing that stays: it opens an existing file for writing without truncating it, and creates a new
one only to remove it at once (a directory gets an unnamed temporary file). It refuses what a write would block on
or destroy: a FIFO waits for a reader, a socket takes no file, a block device is a disk. A character device
(/dev/null) takes a write. Files under a kernel file system (/proc, /sys) are refused by the file system's type:
root may open /proc/version for writing, and a write there fails only once made, or changes the kernel.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from ckplan.errors import InputError

# file systems whose files are the kernel's, not storage; devtmpfs (/dev) is left out: /dev/null takes a write
KERNEL_FILE_SYSTEMS = frozenset(
    {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "configfs", "bpf", "pstore", "efivarfs"}
)

_REFUSED_KINDS = (
    (stat.S_ISFIFO, "a FIFO (a write would wait for a reader)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISBLK, "a block device (a disk, not a file)"),
)


def check_output_file(path: Path, what: str) -> None:
    """Refuse a file ckplan cannot write, or should not: one line naming `what` (the flag) and why."""
    path = path.expanduser()
    _check_file_system(path, what)
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a parent that is a file (ENOTDIR), a name too long (ENAMETOOLONG), a loop
        raise InputError(f"cannot write {what} {path}: {exc.strerror}") from None
    if st is None:
        try:  # the parent exists, is a directory, and takes a new file of this name
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.unlink(path)
        except OSError as exc:
            raise InputError(f"cannot write {what} {path}: {exc.strerror}") from None
        return
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {path} is a directory; give a file name")
    for test, kind in _REFUSED_KINDS:
        if test(st.st_mode):
            raise InputError(f"{what} {path} is {kind}; give a regular file")
    if stat.S_ISREG(st.st_mode):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))  # neither truncated nor changed
        except OSError as exc:
            raise InputError(f"cannot write {what} {path}: {exc.strerror}") from None


def check_output_dir(path: Path, what: str) -> None:
    """Refuse a directory ckplan cannot write files into, or cannot create (its nearest existing ancestor)."""
    path = path.expanduser()
    _check_file_system(path, what)
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        if existing == path:
            raise InputError(f"{what} {path} is not a directory: give a new directory, or one to write into")
        raise InputError(f"cannot create the {what} directory {path}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        if existing == path:
            raise InputError(f"cannot write into the {what} directory {path}: {exc.strerror}") from None
        raise InputError(f"cannot create the {what} directory {path} in {existing}: {exc.strerror}") from None


def _check_file_system(path: Path, what: str) -> None:
    kind = file_system_type(path)
    if kind in KERNEL_FILE_SYSTEMS:
        raise InputError(f"{what} {path} is on a {kind} file system, the kernel's, not storage: give a file on a disk")


def file_system_type(path: Path) -> str | None:
    """The type of the file system holding `path` (or, for a path not made yet, its nearest existing ancestor), from
    /proc/self/mountinfo; None where that cannot be read (not Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    existing = Path(os.path.abspath(path))
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    where = os.path.realpath(existing)
    best, kind = "", None
    for line in lines:
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])  # \040 is a space
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the deepest mount, and the last of those mounted on one point
            best, kind = point, fields[fields.index("-", 6) + 1]
    return kind
