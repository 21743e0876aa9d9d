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

import contextlib
import os
import threading
import time
from pathlib import Path

PAGE_BYTES = 4096
MAX_READ_BYTES = 2**40  # a saved file read whole: the cap only stops a file that never ends


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
    import torch

    for t in tensors:
        if t.numel():
            t.reshape(-1).view(dtype=torch.uint8)[::PAGE_BYTES].sum()


def _load(item: dict, torch, dcp, state) -> object:
    """One file (or a rank's DCP checkpoint) loaded the framework's way; the result is kept until the clock stops."""
    fmt, path = item["format"], item["path"]
    if fmt == "dcp":
        dcp.load(state, storage_reader=dcp.FileSystemReader(path))
        return None
    if fmt == "safetensors":
        from safetensors.torch import load_file

        tensors = load_file(path)
        touch_pages(tensors.values())
        return tensors
    if fmt == "torch.save":
        return [torch.load(path, map_location="cpu") for _ in range(item["times"])]
    from ckplan.readers import read_regular

    # the saved file, read as itself: a link or FIFO put in its place is refused, not followed or waited on
    return [read_regular(Path(path), "saved file", MAX_READ_BYTES, follow=False)[0] for _ in range(item["times"])]


def load_worker(index: int, world: int, items: list[dict], port: int, repeats: int, barrier, results) -> None:
    from ckplan.children import worker_dies_with_parent
    from ckplan.savers.saver import _failure

    worker_dies_with_parent()
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        torch.set_num_threads(1)
        state: dict = {}
        dcp_items = [i for i in items if i["format"] == "dcp"]
        if dcp_items:
            from ckplan.savers.saver import build_state, dcp_state

            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            dist.init_process_group("gloo", rank=index, world_size=world)
            # the tensors a training process loads into: allocated and written once, as a live model's are
            for item in dcp_items:
                for writer, files in item["writers"].items():
                    state |= dcp_state(int(writer), build_state(files, fill=False))
            for t in state.values():
                t.zero_()
        for r in range(repeats):
            barrier.wait()
            start = time.perf_counter()
            loaded = [_load(item, torch, dcp, state) for item in items]
            end = time.perf_counter()
            del loaded
            results.put(("ok", index, r, start, end))
        if dcp_items:
            dist.destroy_process_group()
    except BaseException as exc:  # reported to the parent, which stops the other ranks
        if not isinstance(exc, threading.BrokenBarrierError):
            results.put(("error", index, *_failure(exc, str(Path(items[0]["path"]).parent) if items else "/")))
            barrier.abort()
        raise SystemExit(1) from None


def run_loads(
    loads_by_rank: dict[int, list[dict]], repeats: int, drop: list[Path], what: str = "the loads"
) -> list[float]:
    """Load each rank's items `repeats` times, one process per rank, all ranks at once, every file in `drop` dropped
    from the page cache before each load; return the wall times (first start to last end). Each item is
    {"format": torch.save | safetensors | raw | dcp, "path": a file (a DCP checkpoint's directory), "times": reads
    of the file, and for dcp "writers": {save rank: that rank's saved file dicts}, the keys this rank loads}."""
    import multiprocessing as mp

    from ckplan.children import collect, stop_all
    from ckplan.errors import MeasurementFailed
    from ckplan.savers.saver import check_save_processes, failure_check, free_port, span

    check_save_processes(len(loads_by_rank), what)
    ctx = mp.get_context("spawn")
    world = len(loads_by_rank)
    barrier, results = ctx.Barrier(world + 1), ctx.Queue()  # the parent joins it once the pages are dropped
    port = free_port()
    procs = [
        ctx.Process(target=load_worker, args=(i, world, items, port, repeats, barrier, results))
        for i, items in enumerate(loads_by_rank.values())
    ]
    for p in procs:
        p.start()
    walls = []
    try:
        for _ in range(repeats):
            for path in drop:
                drop_cached_pages(path)
            with contextlib.suppress(
                threading.BrokenBarrierError
            ):  # a rank failed before the start: its report follows
                barrier.wait(timeout=600)
            rows = collect(
                results,
                procs,
                world,
                3600,
                lambda why: MeasurementFailed(f"a load process stopped during {what}: {why}"),
                failure_check(what, "load"),
            )
            walls.append(span([(start, end) for _, _, _, start, end in rows]))
        for p in procs:
            p.join()
    finally:
        stop_all(procs)
    if any(p.exitcode for p in procs):
        raise MeasurementFailed(f"a load process failed during {what} (exit codes {[p.exitcode for p in procs]})")
    return walls
