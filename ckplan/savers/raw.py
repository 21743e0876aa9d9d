"""ckplan's own parallel writer, the raw-bytes saver beside the framework savers (saver.py): the probe's replay
where no framework saver runs, and the benchmarks' writer. It replays a plan's file manifest as a framework saves
it, one thread per writer (os.write and os.fsync release the GIL), each file written to a temporary name, fsynced
and renamed into place, then every directory touched fsynced: the durable-save sequence of DCP's FileSystemWriter
and of careful torch.save wrappers."""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ckplan.confine import confined_path

CHUNK_BYTES = 4 * 2**20  # one write() call; large enough that syscall cost is noise
DIRECT_ALIGN = 4096  # O_DIRECT offsets and lengths: a multiple of the logical block size (512 and 4K disks)


class Cancelled(Exception):
    pass


@dataclass(frozen=True)
class FileToWrite:
    path: str  # relative to the save directory
    bytes: int
    rank: int  # the rank writing it
    kind: str  # the manifest's kind (weights, optimizer, …): the framework saver picks its tensors' dtype by it


def write_files(
    root: Path, files: list[FileToWrite], on_progress: Callable[[int], None] | None = None, direct: bool = False
) -> float:
    """Write every file durably, one thread per writer; the wall time in seconds. `on_progress` is told the bytes
    written so far. `direct` writes with O_DIRECT, as DeepSpeed FastPersist does: whole aligned blocks from a
    page-aligned buffer, a file's last partial block through an ordinary descriptor."""
    by_writer: dict[int, list[FileToWrite]] = defaultdict(list)
    for f in files:
        by_writer[f.rank].append(f)
    root.mkdir(parents=True, exist_ok=True)
    finals = {f.path: confined_path(root, f.path) for f in files}  # every directory made, and inside root
    dirs = sorted({p.parent for p in finals.values()})
    block = memoryview(mmap.mmap(-1, CHUNK_BYTES))  # page-aligned, as O_DIRECT needs
    block[:] = os.urandom(CHUNK_BYTES)  # incompressible, like trained weights
    lock, cancel = threading.Lock(), threading.Event()
    done = [0]

    def progress(n: int) -> None:
        if on_progress:
            with lock:
                done[0] += n
                on_progress(done[0])

    def write_in_turn(writer_files: list[FileToWrite]) -> None:
        for f in writer_files:
            final = finals[f.path]
            tmp = final.with_name(final.name + ".tmp")
            aligned = f.bytes - f.bytes % DIRECT_ALIGN if direct else 0
            segments = [(os.O_DIRECT, 0, aligned)] if aligned else []
            if f.bytes > aligned or not segments:
                segments.append((0, aligned, f.bytes))
            for flags, start, end in segments:
                trunc = os.O_TRUNC if start == 0 else 0
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | flags | trunc, 0o600)
                try:
                    os.lseek(fd, start, os.SEEK_SET)
                    left = end - start
                    while left > 0:
                        if cancel.is_set():
                            raise Cancelled()
                        n = os.write(fd, block[: min(left, CHUNK_BYTES)])
                        left -= n
                        progress(n)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.rename(tmp, final)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(by_writer)) as pool:
        futures = [pool.submit(write_in_turn, fs) for fs in by_writer.values()]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            cancel.set()  # the other writers stop at their next chunk; leaving the pool waits for them
            raise
    for d in dirs:
        fsync_path(d)
    return time.perf_counter() - start


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory's fsync makes its new names durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
