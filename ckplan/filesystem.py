"""A directory's filesystem: where it is mounted, what it is, whether ckplan may write there, its free space.

Shared by every command that writes on or reads about a target directory (the probe's filesystem and hosts
backends, validate's saves, diagnose's device lookup), so none of them reaches into another's package for it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ckplan.errors import InputError

# fs type -> storage class; fuse.* maps to 'fuse' unless FUSE_CLASSES names it
FS_CLASSES = {
    "ext4": "local-disk",
    "ext3": "local-disk",
    "xfs": "local-disk",
    "btrfs": "local-disk",
    "zfs": "local-disk",
    "f2fs": "local-disk",
    "overlay": "local-disk",
    "tmpfs": "tmpfs",
    "ramfs": "tmpfs",
    "nfs": "nfs",
    "nfs4": "nfs",
    "lustre": "lustre",
    "gpfs": "gpfs",
    "ceph": "cephfs",
    "cephfs": "cephfs",
    "beegfs": "beegfs",
    "wekafs": "weka",
    "9p": "virtual",
    "virtiofs": "virtual",
}
# FUSE clients of known shared network filesystems: their own class, not the generic 'fuse'
FUSE_CLASSES = {
    "fuse.glusterfs": "glusterfs",
    "fuse.ceph-fuse": "cephfs",
    "fuse.ceph": "cephfs",
}
# never stored in a profile
SECRET_OPTIONS = {"secret", "password", "pass", "token", "key", "credentials", "secretfile"}
SHARED_CLASSES = {"nfs", "lustre", "gpfs", "cephfs", "beegfs", "weka", "glusterfs", "fuse", "s3"}


@dataclass(frozen=True)
class Mount:
    source: str
    mount_point: str
    fs_type: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def storage_class(self) -> str:
        if self.fs_type.startswith("fuse"):
            return FUSE_CLASSES.get(self.fs_type, "fuse")
        cls = FS_CLASSES.get(self.fs_type, "unknown")
        if cls == "local-disk" and "nvme" in self.source:
            return "local-nvme"
        return cls


def _unescape(field_text: str) -> str:
    """/proc/mounts escapes space, tab, newline and backslash as octal (\\040)."""
    out, i = [], 0
    while i < len(field_text):
        if field_text[i] == "\\" and field_text[i + 1 : i + 4].isdigit():
            out.append(chr(int(field_text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field_text[i])
            i += 1
    return "".join(out)


def parse_mounts(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        options = {}
        for opt in parts[3].split(","):
            key, _, value = opt.partition("=")
            options[key] = "<redacted>" if key.lower() in SECRET_OPTIONS else value
        mounts.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2], options))
    return mounts


def mount_of(path: Path, mounts: list[Mount]) -> Mount:
    """The mount holding `path`: the longest mount point that is a prefix; the last one mounted wins."""
    real = str(path.resolve())
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        inside = real == mp or real.startswith(mp + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    if best is None:
        raise InputError(f"cannot find the mount holding {path}")
    return best


def check_target(path: Path) -> None:
    """Refuse anything but an existing, writable directory on a read-write filesystem."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(f"target {path} does not exist") from None
    except PermissionError:
        raise InputError(f"cannot access target {path}: permission denied") from None
    if stat.S_ISBLK(st.st_mode) or stat.S_ISCHR(st.st_mode):
        raise InputError(
            f"target {path} is a device; ckplan probes a directory on a mounted filesystem, never a raw device"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"target {path} is not a directory")
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        raise InputError(f"target {path} is on a read-only filesystem")
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"target {path} is not writable by this user")


def free_bytes(path: Path) -> int | None:
    """Free bytes, or None where the filesystem reports no size at all (ramfs, some FUSE targets)."""
    st = os.statvfs(path)
    if st.f_blocks == 0:
        return None
    return st.f_bavail * st.f_frsize
