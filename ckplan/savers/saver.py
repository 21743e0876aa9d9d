"""Real checkpoint saves with PyTorch, one process per writer rank, as the frameworks do them.

Each framework's record (ckplan/frameworks/<name>.py) names its saver, one of:
- torch.save: per-rank state dicts, one call per file;
- dcp: torch.distributed.checkpoint.save, every rank in a gloo process group;
- safetensors: safetensors shards (safetensors.torch.save_file) plus torch.save of the other files
  (HF Trainer's optimizer.pt and RNG states).
Async: DCP's async_save; for the others, a snapshot (clone) of the state, then the save from a
background thread, as frameworks without async_save do it.
Every file is fsynced before the rank reports done (DCP does it itself), so the
time is to durability. The parent times from the barrier release to the last rank's end.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

from ckplan.savers.raw import fsync_path
from ckplan.scratch import remove_tree
from ckplan.sizing.plan import scaled_file_bytes

TENSOR_BYTES = 64 * 2**20  # tensors are at most this big; a file holds several, like a real state dict
SMALL_KINDS = ("small",)
# Save processes per CPU core, at most: each imports torch (~90 MB resident) and they share the cores, so past a
# few per core a save's time measures CPU contention, not the storage, and memory runs out first (64 processes
# reached 5.9 GiB on the 2-core development VM within 29 s).
SAVE_PROCESSES_PER_CPU = 4


def max_save_processes() -> int:
    """The most save processes (one per rank) ckplan starts at once on this machine."""
    return SAVE_PROCESSES_PER_CPU * (os.cpu_count() or 1)


def check_save_processes(count: int, what: str) -> None:
    """Refuse, before anything starts, a save that needs more processes than max_save_processes."""
    from ckplan.errors import InputError

    if count > max_save_processes():
        raise InputError(
            f"{what} needs {count:,} save processes (one per rank), more than this machine runs at once: "
            f"{SAVE_PROCESSES_PER_CPU} per CPU core, {max_save_processes()} here (each imports torch and they "
            "share the cores)"
        )


def files_by_rank(files, scale: float = 1.0) -> dict[int, list[dict]]:
    """A node's manifest files, scaled, grouped by the rank that writes them (the save processes' input)."""
    out: dict[int, list[dict]] = defaultdict(list)
    for f in files:
        out[f.rank].append({"path": f.path, "bytes": scaled_file_bytes(f.bytes, scale), "kind": f.kind, "rank": f.rank})
    return dict(sorted(out.items()))


def _dtype(kind: str):
    import torch

    return torch.bfloat16 if kind == "weights" else torch.float32 if kind in ("optimizer", "mixed") else torch.uint8


def build_state(files: list[dict], fill: bool = True) -> dict[str, dict]:
    """For each file, a state dict of real tensors with the file's dtype and (scaled) byte count; `fill=False` leaves
    them uninitialised, as the tensors a load copies into."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out = {}
    for f in files:
        dtype = _dtype(f["kind"])
        itemsize = torch.tensor([], dtype=dtype).element_size()
        left, tensors, i = max(f["bytes"], itemsize), {}, 0
        while left > 0:
            n = min(left, TENSOR_BYTES) // itemsize or 1
            t = torch.empty(n, dtype=dtype)
            if fill and dtype == torch.uint8:
                t.random_(0, 255, generator=gen)
            elif fill:
                t.normal_(0, 0.02, generator=gen)
            tensors[f"t{i}"] = t
            left -= n * itemsize
            i += 1
        out[f["path"]] = tensors
    return out


def dcp_state(rank: int, state: dict[str, dict]) -> dict:
    """One rank's flat DCP state dict: keys unique per rank, so DCP writes each rank's own bytes into its own file."""
    return {f"r{rank}.{i}.{k}": v for i, t in enumerate(state.values()) for k, v in t.items()}


def save_files(root: Path, state: dict[str, dict], saver: str) -> None:
    import torch

    from ckplan.confine import confined_path

    root.mkdir(parents=True, exist_ok=True)
    for rel, tensors in state.items():
        path = confined_path(root, rel)
        if saver == "safetensors" and rel.endswith(".safetensors"):
            from safetensors.torch import save_file

            save_file(tensors, str(path))
        else:
            torch.save(tensors, path)
        fsync_path(path)


def _failure(exc: BaseException, root: str) -> tuple[int | None, str]:
    """(errno, one line) for a save that raised. torch.save's own writer drops the errno ("file write
    failed"), so a target with no space left at that moment is taken as the cause."""
    import errno

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return seen.errno, str(seen)
        seen = seen.__cause__ or seen.__context__
    try:
        full = os.statvfs(root if os.path.isdir(root) else os.path.dirname(root)).f_bavail == 0
    except OSError:
        full = False
    lines = str(exc).strip().splitlines()
    return (errno.ENOSPC if full else None), f"{type(exc).__name__}: {lines[0] if lines else ''}"


def worker(
    rank: int,
    world: int,
    files: list[dict],
    saver: str,
    root: str,
    repeats: int,
    mode: str,
    port: int,
    barrier,
    results,
    keep_last: bool = False,
) -> None:
    from ckplan.children import worker_dies_with_parent

    worker_dies_with_parent()
    try:
        _save_repeats(rank, world, files, saver, root, repeats, mode, port, barrier, results, keep_last)
    except BaseException as exc:  # reported to the parent, which stops the other ranks
        import threading

        if not isinstance(exc, threading.BrokenBarrierError):  # another rank failed first and reports it
            results.put(("error", rank, *_failure(exc, root)))
            barrier.abort()  # ranks waiting at the barrier stop waiting for this one
        raise SystemExit(1) from None


def _save_repeats(
    rank: int,
    world: int,
    files: list[dict],
    saver: str,
    root: str,
    repeats: int,
    mode: str,
    port: int,
    barrier,
    results,
    keep_last: bool,
) -> None:
    import torch

    torch.set_num_threads(1)
    state = build_state(files)
    use_dcp = saver == "dcp"
    if use_dcp:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        flat = dcp_state(rank, state)
    for r in range(repeats):
        directory = Path(root) / f"save-{r}"
        barrier.wait()
        start = time.perf_counter()
        blocking = None
        if use_dcp:
            writer = dcp.FileSystemWriter(str(directory), sync_files=True)
            if mode == "async":
                future = dcp.async_save(flat, storage_writer=writer)
                blocking = time.perf_counter() - start
                future.result()  # type: ignore[union-attr]  # torch 2.13's async_save returns a Future here
            else:
                dcp.save(flat, storage_writer=writer)
        elif mode == "async":
            # where the framework has no async_save: snapshot the state (a copy in host memory, which is the
            # blocking part), then torch.save the snapshot from a background thread
            import threading

            snapshot = {path: {k: t.clone() for k, t in tensors.items()} for path, tensors in state.items()}
            blocking = time.perf_counter() - start
            persist = threading.Thread(target=save_files, args=(directory, snapshot, saver))
            persist.start()
            persist.join()
        else:
            save_files(directory, state, saver)
        end = time.perf_counter()
        results.put(("ok", rank, r, start, end, blocking))
        barrier.wait()
        if rank == 0 and not (keep_last and r == repeats - 1):
            remove_tree(directory)
    if use_dcp:
        dist.destroy_process_group()


def span(intervals: list[tuple[float, float]]) -> float:
    """Wall time of ranks working at once: the first (start) to the last (end)."""
    return max(e for _, e in intervals) - min(st for st, _ in intervals)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a gloo group's rendezvous."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failure_check(what: str, action: str):
    """For children.collect: raise MeasurementFailed for a rank's ("error", rank, errno, line) report."""
    from ckplan.errors import MeasurementFailed, describe_errno

    def check(item) -> None:
        if item[0] == "error":
            _, rank, code, line = item
            raise MeasurementFailed(
                describe_errno(code, what, failed=f"rank {rank}'s {action} failed")
                if code
                else f"rank {rank}'s {action} failed during {what}: {line}"
            )

    return check


def run_saves(
    root: Path,
    files_by_rank: dict[int, list[dict]],
    framework: str,
    repeats: int,
    mode: str,
    what: str = "the saves",
    keep_last: bool = False,
) -> tuple[list[float], list[float]]:
    """Run `framework`'s saver `repeats` times, each into `root`/save-N, removed after it unless it is the last and
    `keep_last` (what a restore then loads); return wall times (first start to last end) and async blocking times.
    A save process that fails or dies raises MeasurementFailed naming `what`, and the others are stopped."""
    import multiprocessing as mp

    from ckplan.children import collect, stop_all
    from ckplan.errors import MeasurementFailed
    from ckplan.frameworks import framework_of

    saver = framework_of(framework).saver.kind
    check_save_processes(len(files_by_rank), what)
    ctx = mp.get_context("spawn")
    world = len(files_by_rank)
    barrier, results = ctx.Barrier(world), ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=worker, args=(i, world, files, saver, str(root), repeats, mode, port, barrier, results, keep_last)
        )
        for i, files in enumerate(files_by_rank.values())
    ]
    for p in procs:
        p.start()
    try:
        rows = collect(
            results,
            procs,
            world * repeats,
            3600,
            lambda why: MeasurementFailed(f"a save process stopped during {what}: {why}"),
            failure_check(what, "save"),
        )
        for p in procs:
            p.join()
    finally:
        stop_all(procs)
    if any(p.exitcode for p in procs):
        raise MeasurementFailed(f"a save process failed during {what} (exit codes {[p.exitcode for p in procs]})")
    by_repeat = defaultdict(list)
    for _, _rank, r, start, end, blocking in rows:
        by_repeat[r].append((start, end, blocking))
    walls = [span([(s, e) for s, e, _ in v]) for _, v in sorted(by_repeat.items())]
    blocking = [max(b for _, _, b in v) for _, v in sorted(by_repeat.items()) if all(b is not None for _, _, b in v)]
    return walls, blocking
