"""Real checkpoint loads, cold, one process per reader rank, the way each framework reads its files on resume.

- torch.save files (.pt, .bin, .ckpt, .pth): `torch.load(path, map_location="cpu")`, as DeepSpeed's
  engine, HF Trainer's optimizer.pt and Lightning's `pl_load` do;
- safetensors: `safetensors.torch.load_file(path)`. It maps the file and returns tensors backed by that mapping,
  with a readahead of the whole file started, so it may return before the bytes are read: every page of every
  tensor is then touched (one byte per page), so the time includes the read as HF's `load_state_dict` would
  pay it, without a copy of its own;
- DCP: `torch.distributed.checkpoint.load` with every rank in a gloo group, each rank's state dict its share of
  the saved keys (preallocated, as a training process has them), every `.distcp` file read through DCP's
  own FileSystemReader.
Other files (JSON, `latest`) are read whole with plain reads.

Cold: before every load each file's cached pages are dropped, fsync then POSIX_FADV_DONTNEED, which needs no root.
On a filesystem in memory (tmpfs, /dev/shm) the pages are the file and cannot be dropped: the loads there are
loads from memory, and `drop_cached_pages` says so. The parent times from the barrier release to the last rank's
end, as the saves do.
"""

from __future__ import annotations

import os
from pathlib import Path

PAGE_BYTES = 4096


def drop_cached_pages(path: Path) -> None:
    """Write back, then drop, the file's pages from the page cache (a no-op on tmpfs, whose pages are the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def in_memory_filesystem(path: Path) -> bool:
    """The directory lives on a filesystem in memory (tmpfs, ramfs): dropping its pages would drop the data, so
    the kernel keeps them and every load there is a load from memory."""
    from ckplan import filesystem

    mount = filesystem.mount_of(path, filesystem.parse_mounts(Path("/proc/self/mounts").read_text()))
    return mount.storage_class == "tmpfs"


def touch_pages(tensors) -> None:
    """Read one byte of every page of each tensor: a lazily mapped tensor's bytes are then in memory."""
    for t in tensors:
        if t.numel():
            t.reshape(-1).view(dtype=__import__("torch").uint8)[::PAGE_BYTES].sum()
