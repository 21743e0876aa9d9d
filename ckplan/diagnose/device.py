"""Live device counters behind a path: iostat's write MB/s, IOPS, %util and w_await, from psutil.

psutil's Linux disk counters (from /proc/diskstats) carry write_count,
write_bytes, write_time (ms spent on writes) and busy_time (ms the device had
I/O in flight), so each figure is a difference between two samples:
  write MB/s = Δwrite_bytes ÷ Δt        IOPS = Δwrite_count ÷ Δt
  %util      = Δbusy_time ÷ Δt           w_await = Δwrite_time ÷ Δwrite_count
GPU utilisation comes from `nvidia-smi` when one is present.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ckplan.errors import InputError
from ckplan.schema import Model
from ckplan.version import __version__

UTIL_SATURATED = 90.0  # %util at which a device counts as saturated (iostat's rule of thumb)
AWAIT_SLOW_MS = 300.0  # write await that signals a queue building up behind the device


class Sample(Model):
    t: float  # seconds since the start
    write_bytes_per_s: float
    write_iops: float
    util_percent: float
    w_await_ms: float
    gpu_util_percent: float | None = None


class Figure(Model):
    peak: float
    p99: float
    median: float


class WatchResult(Model):
    kind: Literal["ckplan.watch"] = "ckplan.watch"
    ckplan_version: str = __version__
    device: str
    target: str
    interval_s: float
    duration_s: float
    samples: list[Sample]
    write_bytes_per_s: Figure
    write_iops: Figure
    util_percent: Figure
    w_await_ms: Figure
    gpu_util_percent: Figure | None
    saturated_s: float  # time with %util ≥ UTIL_SATURATED
    slow_await_s: float  # time with w_await ≥ AWAIT_SLOW_MS


def device_of(target: str) -> str:
    """The block device name (as in /proc/diskstats) behind a path, or a device given directly."""
    import psutil

    from ckplan.filesystem import mount_of, parse_mounts

    disks = psutil.disk_io_counters(perdisk=True) or {}
    name = target.removeprefix("/dev/")
    if name in disks:
        return name
    path = Path(target)
    if not path.exists():
        raise InputError(f"{target} is neither a path nor a block device")
    mount = mount_of(path, parse_mounts(Path("/proc/self/mounts").read_text()))
    source = os.path.realpath(mount.source) if mount.source.startswith("/dev/") else mount.source
    dev = source.removeprefix("/dev/")
    if dev not in disks:
        raise InputError(
            f"no block device behind {target} ({mount.fs_type} from {mount.source}); "
            "watch a path on a local disk or name the device"
        )
    return dev


def gpu_util() -> float | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
        values = [float(v) for v in out.split()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return sum(values) / len(values) if values else None


def watch(
    target: str, interval_s: float, duration_s: float | None, on_sample: Callable[[Sample], None] | None = None
) -> WatchResult:
    """Sample until `duration_s` (or Ctrl-C), then summarise."""
    import psutil

    if interval_s <= 0:
        raise InputError("‹interval› must be > 0")
    dev = device_of(target)
    samples: list[Sample] = []
    prev, prev_t = psutil.disk_io_counters(perdisk=True)[dev], time.monotonic()
    start = prev_t
    try:
        while duration_s is None or prev_t - start < duration_s:
            time.sleep(interval_s)
            now, now_t = psutil.disk_io_counters(perdisk=True)[dev], time.monotonic()
            dt = now_t - prev_t
            writes = now.write_count - prev.write_count
            sample = Sample(
                t=now_t - start,
                write_bytes_per_s=(now.write_bytes - prev.write_bytes) / dt,
                write_iops=writes / dt,
                util_percent=min(100.0, (now.busy_time - prev.busy_time) / (dt * 10)),
                w_await_ms=(now.write_time - prev.write_time) / writes if writes else 0.0,
                gpu_util_percent=gpu_util(),
            )
            samples.append(sample)
            if on_sample:
                on_sample(sample)
            prev, prev_t = now, now_t
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the watch; the summary still prints
    if not samples:
        raise InputError("no samples: the watch ended before the first interval")
    return summarise(dev, target, interval_s, samples)


def _figure(values: list[float]) -> Figure:
    ordered = sorted(values)
    return Figure(
        peak=ordered[-1],
        p99=ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        median=statistics.median(ordered),
    )


def summarise(dev: str, target: str, interval_s: float, samples: list[Sample]) -> WatchResult:
    gpu = [s.gpu_util_percent for s in samples if s.gpu_util_percent is not None]
    step = samples[-1].t / len(samples)
    return WatchResult(
        device=dev,
        target=target,
        interval_s=interval_s,
        duration_s=samples[-1].t,
        samples=samples,
        write_bytes_per_s=_figure([s.write_bytes_per_s for s in samples]),
        write_iops=_figure([s.write_iops for s in samples]),
        util_percent=_figure([s.util_percent for s in samples]),
        w_await_ms=_figure([s.w_await_ms for s in samples]),
        gpu_util_percent=_figure(gpu) if gpu else None,
        saturated_s=step * sum(s.util_percent >= UTIL_SATURATED for s in samples),
        slow_await_s=step * sum(s.w_await_ms >= AWAIT_SLOW_MS for s in samples),
    )


def record(result: WatchResult, path: Path) -> None:
    """The timeline as CSV (by suffix) or JSON."""
    try:
        if path.suffix == ".csv":
            fields = list(Sample.model_fields)
            rows = [",".join(fields)] + [
                ",".join("" if getattr(s, f) is None else f"{getattr(s, f):.6g}" for f in fields)
                for s in result.samples
            ]
            path.write_text("\n".join(rows) + "\n")
        else:
            path.write_text(result.model_dump_json(indent=2))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
