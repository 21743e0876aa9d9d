"""Probe a mounted filesystem with fio and ckplan's replay writer, producing a StorageProfile."""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
import socket
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ckplan.errors import InputError
from ckplan.probe import fio, jobfiles, replay, target
from ckplan.probe.base import (
    PRESETS,
    SCRATCH_PREFIX,
    SHARED_TARGET,
    MiB,
    PreparedTarget,
    Preset,
    Progress,
    Silent,
    noise_notes,
    writer_counts,
)
from ckplan.profile import (
    BandwidthPoint,
    Latency,
    Measurement,
    Replay,
    SmallFiles,
    Spread,
    StorageProfile,
)
from ckplan.savers.calibrate import ESTIMATE_S

if TYPE_CHECKING:
    from ckplan.probe.clean import CleanResult
    from ckplan.profile import TargetKind

DEFAULT_SMALL_FILE_RANGE = (4 * 1024, 256 * 1024)  # RNG states (~15 KB) up to index/metadata files
# Files per writer in one small-file run, unless the plan's busiest rank writes more. Creates
# slow down as a directory grows (/dev/shm here, alternating runs: median 17.4k files/s with
# 5,000 files, 14.5k with 36,000), so a count sized by time alone would make the rate depend on how fast the
# calibration ran; a save's directory rarely holds more files than this per rank.
SMALL_FILES_PER_WRITER_CAP = 1024
# one writer's page-cache copy sample: well under the kernel's dirty limits (10% of memory starts writeback),
# so it measures the copy and not the device
PAGE_CACHE_SAMPLE_BYTES = 256 * MiB
MIN_RUNTIME_S = 1.0  # shortest runtime cap of a bandwidth run, however tight the budget
UNSIZED_DEFAULT_BYTES = 2**30  # what the probe may write on a filesystem that reports no size, unless --max-bytes
# the latency runs' file, unless the byte budget is smaller: far more 4 KiB fsynced writes than a disk
# does in a run's time; on memory-backed targets, where fsync costs nothing, the size ends the run first
LATENCY_FILE_BYTES = 64 * MiB
# Held back from the byte budget for ckplan's own files in the scratch directory (its marker, fio's job
# files, directories); the data files are sized in whole pages or MiB, so filesystem rounding cannot
# take them past the budget either: the whole probe stays within half the free space or --max-bytes.
SCRATCH_RESERVE_BYTES = MiB
PAGE_BYTES = 4096


@dataclass(frozen=True)
class ProbeJob:
    """A checked probe: the target is a writable directory, fio exists, and the sizes fit."""

    path: Path
    mount: target.Mount
    preset: Preset
    writers: int
    bytes_per_writer: int
    budget_bytes: int  # what one phase's files may take: the byte budget less the scratch reserve
    plan: object | None
    replay_files: tuple
    scale: float
    name: str | None
    notes: tuple[str, ...]
    calibrate: bool = True  # measure this machine's serialisers (needs PyTorch; skipped without it)
    emit_jobs: Path | None = None  # write every fio run's job file and run.sh here (ckplan.probe.jobfiles)

    @property
    def estimated_seconds(self) -> float:
        # the bandwidth budget is wall time already; every other fio run (direct-I/O check, small-file
        # calibration and warm-up, its measured runs, two latency runs) costs ~0.4 s beyond its own time
        p = self.preset
        return (
            p.bandwidth_budget_s
            + p.small_files_budget_s
            + 2 * p.latency_runtime_s
            + 0.4 * (p.small_files_repeats + 5)
            + (ESTIMATE_S[p.name] if self.calibrate else 0)
        )


def prepare_probe(
    path: Path,
    *,
    preset: str = "default",
    writers: int | None = None,
    plan=None,
    scale: float = 1.0,
    max_bytes: int | None = None,
    name: str | None = None,
    mounts_text: str | None = None,
    calibrate: bool = True,
    emit_jobs: Path | None = None,
) -> ProbeJob:
    """Every check that can fail before a byte is written."""
    settings = PRESETS[preset]
    fio.fio_binary()
    path = path.expanduser()
    target.check_target(path)
    fio.check_job_path(path.resolve())
    mount = target.mount_of(path, target.parse_mounts(mounts_text or Path("/proc/self/mounts").read_text()))
    max_writers = writers or (plan.max_writers_per_node if plan else os.cpu_count() or 1)
    if max_writers < 1:
        raise InputError("--writers must be ≥ 1")
    free = target.free_bytes(path)
    notes: list[str] = []
    if free is None:
        free = 2 * (max_bytes or UNSIZED_DEFAULT_BYTES)
        notes.append(f"the filesystem reports no size; the probe wrote at most {free // 2 / 1e9:.2f} GB (--max-bytes)")
    budget = free_budget = free // 2
    if max_bytes is not None:
        budget = min(budget, max_bytes)
    data = max(0, budget - SCRATCH_RESERVE_BYTES)  # what every phase's files may take, one phase at a time
    replay_files: list[replay.FileToWrite] = []
    if plan is not None:
        _, share = replay.node_share(plan.manifest)
        replay_files = replay.scaled_files(share, scale)
        need = sum(-(-f.bytes // PAGE_BYTES) * PAGE_BYTES for f in replay_files)
        if need > data:
            fit = data / sum(f.bytes for f in share)
            raise InputError(
                f"replaying the plan at --scale {scale:g} writes {need / 1e9:.2f} GB but the probe may use "
                f"{budget / 1e9:.2f} GB here (half the free space or --max-bytes); try --scale {fit * 0.9:.2g}"
            )
    per_writer = min(settings.bytes_per_writer, data // max_writers // MiB * MiB)  # whole 1 MiB blocks
    if per_writer < 4 * MiB:
        raise InputError(
            f"too little free space on {path}: the probe may use {budget / 1e6:.1f} MB "
            f"(half the free space, {free_budget / 1e6:.1f} MB, or --max-bytes), and needs at least "
            f"{4 * max_writers + SCRATCH_RESERVE_BYTES // MiB} MiB for {max_writers} writers"
        )
    stale = target.leftovers(path)
    if stale:
        notes.append(
            f"found {len(stale)} scratch director{'y' if len(stale) == 1 else 'ies'} from a killed probe: "
            f"remove with `ckplan clean {path}`"
        )
    from ckplan.savers.calibrate import torch_available
    from ckplan.savers.saver import max_save_processes

    calibrate = calibrate and torch_available()
    if plan is not None and torch_available() and len({f.writer for f in replay_files}) > max_save_processes():
        notes.append(
            f"the replay's {len({f.writer for f in replay_files})} ranks are more save processes than this machine "
            f"runs at once ({max_save_processes()}, 4 per CPU core): ckplan's own writer replays raw bytes instead "
            "of the framework's saver, and the serialiser time is added from the calibration"
        )
    if emit_jobs is not None:  # the last check, so that a refused probe leaves no directory behind
        emit_jobs = jobfiles.check_dir(emit_jobs)  # JobWriter creates it when it writes the first job file
    return ProbeJob(
        path=path,
        mount=mount,
        preset=settings,
        writers=max_writers,
        bytes_per_writer=per_writer,
        budget_bytes=data,
        plan=plan,
        replay_files=tuple(replay_files),
        scale=scale,
        name=name,
        notes=tuple(notes),
        calibrate=calibrate,
        emit_jobs=emit_jobs,
    )


def run_probe(job: ProbeJob, progress: Progress | None = None) -> StorageProfile:
    """Measure bandwidth against writers on both write paths, small-file rate, fsync latency, this machine's
    serialisers (where PyTorch is installed) and, with a plan, a replay."""
    progress = progress or Silent()
    settings, path = job.preset, job.path
    started = time.monotonic()
    raw: list[dict] = []
    notes = list(job.notes)
    calibration = None
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    tool = fio.fio_version()
    writer = None
    if job.emit_jobs is not None:
        writer = jobfiles.JobWriter(
            job.emit_jobs,
            about=f"the probe of {path.resolve()} on {socket.gethostname()} at {date}",
            fio_version=tool,
            local_target=path.resolve(),
        )
    with target.ScratchDir(path) as scratch, jobfiles.emitting(writer):
        if writer is not None:
            writer.scratch = fio.escape_path(scratch.path)
        others = _OtherProbes(path, scratch.path)
        try:
            direct = _direct_io_works(scratch.path)
            if not direct:
                notes.append(
                    "the target refused O_DIRECT (EINVAL): only the buffered write path was measured; "
                    "direct-I/O writers are predicted on it"
                )
            curves, page_cache, runtime_s = _bandwidth(
                scratch.path, settings, job.writers, job.bytes_per_writer, direct, progress, raw
            )
            others.look()
            small = _small_files(scratch.path, settings, job.writers, job.budget_bytes, job.plan, progress, raw)
            others.look()
            fsync_lat, sync_write_lat = _latency(scratch.path, settings, job.budget_bytes, progress, raw)
            others.look()
            if job.calibrate:
                from ckplan.savers.calibrate import calibrate
                from ckplan.savers.saver import max_save_processes

                jobfiles.other(
                    "calibration", "PyTorch's serialisers into /dev/null, not fio; `ckplan calibrate` runs it again"
                )
                calibration = calibrate(settings.name, min(job.writers, max_save_processes()), progress)
            else:
                notes.append(
                    "serialisers not calibrated (PyTorch is not installed, or --no-calibrate): "
                    "predictions use the named defaults"
                )
            if job.plan is not None:
                jobfiles.other(
                    "replay",
                    "the plan's files written by the framework's saver or ckplan's own writer, not fio; "
                    "`ckplan validate` times the same saves",
                )
            replayed = (
                _replay(
                    scratch.path, job.plan, list(job.replay_files), job.scale, settings, direct, calibration, progress
                )
                if job.plan is not None
                else None
            )
        except OSError as exc:  # ckplan's own file operations on the target (mkdir, job files) mid-run
            raise replay.oserror_message(exc, "the probe") from None
        others.look()
    notes += others.notes()
    bandwidth = curves["buffered"]
    best = max(p.bytes_per_s for p in bandwidth)
    mount = job.mount
    return StorageProfile(
        target_kind="filesystem",
        name=job.name or f"{socket.gethostname()}:{path}",
        target=str(path.resolve()),
        fs_type=mount.fs_type,
        storage_class=mount.storage_class,
        mount_point=mount.mount_point,
        mount_options=mount.options,
        shared=mount.storage_class in target.SHARED_CLASSES,
        direct_io=direct,
        buffered_bandwidth=bandwidth,
        direct_bandwidth=curves.get("direct", []),
        page_cache_write=page_cache,
        best_write_bytes_per_s=best,
        small_files=small,
        fsync_latency=fsync_lat,
        sync_write_latency=sync_write_lat,
        replay=replayed,
        calibration=calibration,
        notes=notes + noise_notes(bandwidth, small, replayed, direct=curves.get("direct")),
        raw_fio=raw,
        measurement=Measurement(
            tool=tool,
            date=date,
            host=socket.gethostname(),
            preset=settings.name,
            duration_s=time.monotonic() - started,
            bandwidth_bytes_per_writer=job.bytes_per_writer,
            runtime_cap_s=runtime_s,
            repeats=settings.repeats,
            jobs_dir=str(job.emit_jobs) if writer else None,
            jobs=writer.jobs if writer else [],
        ),
    )


class _OtherProbes:
    """Other live probes writing to the same target: they share its bandwidth, so each one's figures
    come out low (two quick probes at once each measured about a third). Seen through their scratch
    directories, looked at between phases; on this host a probe is live while its pid runs (the test
    `ckplan clean` uses), and another host's directory counts where it appeared during this probe."""

    def __init__(self, path: Path, own: Path):
        self.path, self.own = path, own
        self.pids: dict[int, None] = {}  # in the order seen
        self.hosts: dict[str, None] = {}
        self.before = {s.path for s in self._scan()}
        self.look()

    def _scan(self) -> list:
        return [s for s in target.scratch_dirs(self.path, (SCRATCH_PREFIX,)) if s.path != self.own]

    def look(self) -> None:
        for s in self._scan():
            if s.live and s.pid is not None:
                self.pids[s.pid] = None
            elif s.host not in (None, socket.gethostname()) and s.path not in self.before:
                self.hosts[s.host] = None

    def notes(self) -> list[str]:
        out = [
            f"another ckplan probe (pid {pid}) was writing to this target during the probe; {SHARED_TARGET}"
            for pid in self.pids
        ]
        return out + [
            f"a ckplan probe on host {host} started writing to this target during the probe; {SHARED_TARGET}"
            for host in self.hosts
        ]


def _direct_io_works(scratch: Path) -> bool:
    job = fio.FioJob(
        "direct-check",
        {
            "directory": fio.escape_path(scratch),
            "rw": "write",
            "bs": "1M",
            "size": "1M",
            "ioengine": "psync",
            "direct": 1,
            "unlink": 1,
        },
    )
    note = jobfiles.Note(
        "direct-I/O check",
        "whether the target takes O_DIRECT: one 1 MiB write with direct=1",
        "direct_io: true unless fio fails with EINVAL (then only the buffered path is measured); not kept in raw_fio",
        "fio's exit status, and jobs[0].error (22 = EINVAL)",
    )
    try:
        fio.run_fio([job], scratch, "the direct I/O check", note=note)
    except fio.FioError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    return True


def _bandwidth(scratch, settings, max_writers, per_writer, direct, progress, raw):
    """Large sequential writes at 1, 2, 4 … writers on each write path, and one writer's copy into the page
    cache without a flush; returns the curves, the page-cache rate and each run's runtime cap.

    Both paths are measured because savers take different ones: torch.save, DCP and safetensors write
    through the page cache and fsync at the end (buffered), FastPersist writes with O_DIRECT (direct), and
    the two sustain different rates (issue 13's alternating fio runs on the development VM's disk, 2 writers:
    direct 1.49-1.59 GB/s, buffered 0.79-1.77 GB/s). Every buffered run ends with an fsync (end_fsync=1), inside fio's runtime.

    One unrecorded warm-up run on the buffered path at the most writers comes first: the first writes after
    idle run slow for reasons that are not the storage's sustained rate (a VM faulting its memory back in
    from the host, an SSD leaving a power state, a rate limiter's burst credit), and the buffered path
    showed it most. It also measures what a run costs beyond its runtime cap (fio's start, the final
    flush, unlinking the files: ~2 s for 3.6 GB on an ext4 mounted with `discard`), so that the runtime cap
    of the measured runs keeps the whole phase within its budget. The repeats then go round all points of
    both paths in turn, so drift during the phase hits every point alike.
    """
    counts = writer_counts(max_writers)
    paths = ["buffered", "direct"] if direct else ["buffered"]

    def run(path: str, w: int, label: str, runtime: float, figure: str, name: str = "bw") -> float:
        progress.phase(f"bandwidth, {path}: {w} writer(s), {label}", runtime)
        flush = {"end_fsync": 1, "runtime": f"{runtime}s", "size": per_writer}
        measures = (
            f"sequential 1 MiB writes by {w} writer(s), one file each, "
            + ("with O_DIRECT" if path == "direct" else "through the page cache")
            + ", ending with an fsync (end_fsync=1) inside the runtime cap"
        )
        if path == "page-cache":  # a sample that fits in the dirty limits, never flushed: unlinked while dirty
            flush = {"size": min(per_writer, PAGE_CACHE_SAMPLE_BYTES)}
            measures = (
                "one writer's copy of a sample into the page cache, never flushed (its file is unlinked while dirty)"
            )
        job = fio.FioJob(
            f"{name}-{path}-{w}",
            {
                "directory": fio.escape_path(scratch),
                "rw": "write",
                "bs": "1M",
                **flush,
                "numjobs": w,
                "ioengine": "psync",
                "direct": int(path == "direct"),
                "fallocate": "none",
                "group_reporting": 1,
                "unlink": 1,
            },
        )
        note = jobfiles.Note(
            f"bandwidth, {path}",
            measures,
            figure,
            "jobs[0].write.bw_bytes, in bytes/s (group_reporting sums the writers)",
            raw_fio=len(raw),
            group="bandwidth",
            warm_up=name == "warm-up",
        )
        doc = fio.run_fio(
            [job], scratch, f"the bandwidth phase ({path}, {w} writers)", on_status=progress.update, note=note
        )
        raw.append(doc)
        return float(doc["jobs"][0]["write"]["bw_bytes"])

    started = time.monotonic()
    run(
        "buffered",
        max_writers,
        "warm-up (not counted)",
        settings.warm_up_s,
        name="warm-up",
        figure="none: a warm-up, not counted (the first writes after idle run slow); how long it took beyond its runtime "
        "sets the measured runs' runtime cap (measurement.runtime_cap_s)",
    )
    spent = time.monotonic() - started
    runs = settings.repeats * len(counts) * len(paths)
    runtime_s = round(
        max(MIN_RUNTIME_S, (settings.bandwidth_budget_s - spent) / runs - max(0.0, spent - settings.warm_up_s)), 1
    )
    values: dict[tuple[str, int], list[float]] = {(path, w): [] for path in paths for w in counts}
    copies: list[float] = []
    of = f"the profile keeps the median of its {settings.repeats} run(s), with their min…max (spread)"
    for r in range(settings.repeats):
        for path in paths:
            for w in counts:
                values[path, w].append(
                    run(
                        path,
                        w,
                        f"run {r + 1}/{settings.repeats}",
                        runtime_s,
                        f"{path}_bandwidth (writers={w}).bytes_per_s: run {r + 1} of {settings.repeats}; {of}",
                    )
                )
        copies.append(
            run(
                "page-cache",
                1,
                f"no flush, run {r + 1}/{settings.repeats}",
                0,
                f"page_cache_write.bytes_per_s: run {r + 1} of {settings.repeats}; {of}",
            )
        )
    curves = {
        path: [
            BandwidthPoint(writers=w, bytes_per_s=Spread.of(values[path, w]).median, spread=Spread.of(values[path, w]))
            for w in counts
        ]
        for path in paths
    }
    page_cache = BandwidthPoint(writers=1, bytes_per_s=Spread.of(copies).median, spread=Spread.of(copies))
    return curves, page_cache, runtime_s


def _small_file_range(plan) -> tuple[int, int]:
    if plan is None:
        return DEFAULT_SMALL_FILE_RANGE
    sizes = [f.bytes for f in plan.manifest if f.kind == "small"]
    if not sizes:
        return DEFAULT_SMALL_FILE_RANGE
    return max(4096, min(sizes)), max(4096, min(max(sizes), 16 * MiB))


def _small_files(scratch, settings, writers, budget, plan, progress, raw) -> SmallFiles:
    """Create, write, fsync and close many small files from every writer at once.

    fio 3.33 ignores `runtime` between the files of a many-file job, so the
    file count is sized from a short calibration run to fit the time budget;
    every file then completes and files/s is exact. A second, longer calibration
    run is the warm-up (the first run after idle is the slow one) and sizes the
    measured runs more closely. The measured runs are many and short: once warm,
    their run-to-run scatter is larger than any trend (docs/benchmarks.md), so a
    median of more runs moves less.
    """
    low, high = _small_file_range(plan)
    bs = min(64 * 1024, low)
    space_cap = max(8, budget // (writers * high))
    files_per_rank = Counter(f.rank for f in plan.manifest) if plan is not None else Counter()
    count_cap = max([SMALL_FILES_PER_WRITER_CAP, *files_per_rank.values()])

    def run(nrfiles: int, label: str, figure: str) -> tuple[float, float]:
        progress.phase(
            f"small files: create, write, fsync, close ({writers} writers){label}", settings.small_files_runtime_s
        )
        directory = scratch / "small"
        directory.mkdir()
        try:
            job = fio.FioJob(
                "smallfiles",
                {
                    "directory": fio.escape_path(directory),
                    "rw": "write",
                    "bs": bs,
                    "filesize": f"{low}-{high}" if high > low else low,
                    "nrfiles": nrfiles,
                    "openfiles": 1,
                    "create_on_open": 1,
                    "fsync_on_close": 1,
                    "file_service_type": "sequential",
                    "fallocate": "none",
                    "ioengine": "psync",
                    "numjobs": writers,
                },
            )
            note = jobfiles.Note(
                "small files",
                f"{writers} writer(s) each creating, writing, fsyncing and closing {nrfiles} files of "
                f"{low}-{high} bytes, one after another, in a fresh directory",
                figure,
                "files/s = the files in the directory after the run (ckplan counts them: fio counts no creates) × 1000 "
                "÷ the longest jobs[].write.runtime (ms); ops/s = (3 × files + the sum of jobs[].write.total_ios) × 1000 "
                "÷ the same runtime",
                raw_fio=len(raw),
                count_files_in="small",
                warm_up="warm-up" in label,
            )
            doc = fio.run_fio([job], scratch, "the small-file phase", on_status=progress.update, note=note)
            files = sum(1 for _ in os.scandir(directory))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        raw.append(doc)
        runtime_s = max(max(int(j["write"]["runtime"]) for j in doc["jobs"]) / 1000, 1e-3)
        write_calls = sum(int(j["write"]["total_ios"]) for j in doc["jobs"])
        # per file: create, fsync, close (fio counts none of them), plus its write() calls
        return files / runtime_s, (3 * files + write_calls) / runtime_s

    def files_per_writer(rate: float, seconds: float) -> int:
        return int(max(8, min(count_cap, space_cap, rate * seconds / writers)))

    rate, _ = run(
        min(32, space_cap), " calibration", "none: a calibration run, not counted; its rate sizes the warm-up's nrfiles"
    )
    rate, _ = run(
        files_per_writer(rate, settings.warm_up_s / 3),
        " warm-up (not counted)",
        "none: a warm-up, not counted; its rate sizes the measured runs' nrfiles",
    )
    nrfiles = files_per_writer(rate, settings.small_files_runtime_s)
    rates, ops = [], []
    repeats = settings.small_files_repeats
    for r in range(repeats):
        rate, op = run(
            nrfiles,
            f", run {r + 1}/{repeats}",
            f"small_files.files_per_s and ops_per_s: run {r + 1} of {repeats}; the profile keeps the median, "
            "with the files/s min…max (spread)",
        )
        rates.append(rate)
        ops.append(op)
    spread = Spread.of(rates)
    return SmallFiles(
        files_per_s=spread.median,
        ops_per_s=Spread.of(ops).median,
        file_bytes_min=low,
        file_bytes_max=high,
        writers=writers,
        spread=spread,
    )


def _latency(scratch, settings, budget, progress, raw) -> tuple[Latency, Latency]:
    progress.phase("latency: 4 KiB write + fsync", settings.latency_runtime_s)
    # within the byte budget as every other phase (fio allocates the whole file up front)
    size = min(LATENCY_FILE_BYTES, budget // MiB * MiB)
    common = {
        "directory": fio.escape_path(scratch),
        "rw": "write",
        "bs": "4k",
        "size": size,
        "ioengine": "psync",
        "runtime": f"{settings.latency_runtime_s}s",
        "percentile_list": "50:99:99.9",
        "unlink": 1,
    }
    pct = "percentile['50.000000'], ['99.000000'], ['99.900000'], mean and N, in ns"
    note = jobfiles.Note(
        "latency, fsync",
        "4 KiB writes by one writer, each followed by an fsync",
        "fsync_latency (p50_s, p99_s, p999_s, mean_s, samples)",
        f"jobs[0].sync.lat_ns: {pct}",
        raw_fio=len(raw),
    )
    doc = fio.run_fio(
        [fio.FioJob("fsync-lat", {**common, "fsync": 1})],
        scratch,
        "the fsync latency phase",
        on_status=progress.update,
        note=note,
    )
    raw.append(doc)
    p50, p99, p999, mean, n = fio.percentiles_s(doc["jobs"][0]["sync"], "lat_ns")
    fsync_lat = Latency(p50_s=p50, p99_s=p99, p999_s=p999, mean_s=mean, samples=n)
    progress.phase("latency: 4 KiB O_SYNC writes", settings.latency_runtime_s)
    note = jobfiles.Note(
        "latency, O_SYNC writes",
        "4 KiB O_SYNC writes by one writer",
        "sync_write_latency (p50_s, p99_s, p999_s, mean_s, samples)",
        f"jobs[0].write.clat_ns: {pct}",
        raw_fio=len(raw),
    )
    doc = fio.run_fio(
        [fio.FioJob("sync-write-lat", {**common, "sync": 1})],
        scratch,
        "the sync-write latency phase",
        on_status=progress.update,
        note=note,
    )
    raw.append(doc)
    p50, p99, p999, mean, n = fio.percentiles_s(doc["jobs"][0]["write"], "clat_ns")
    return fsync_lat, Latency(p50_s=p50, p99_s=p99, p999_s=p999, mean_s=mean, samples=n)


def _replay(scratch, plan, files, scale, settings, direct_ok, calibration, progress) -> Replay:
    """One node's share of the plan, written the way the plan's writer writes: a warm-up, then the repeats.

    Buffered writers are replayed through the framework's own saver (torch.save, safetensors, DCP, one
    process per rank; ckplan.savers.saver) where PyTorch is installed: on a fast target the serialiser is
    most of the save, and raw bytes leave it out. Otherwise, and for direct-I/O writers (whose saver is
    not here to run), ckplan's own writer writes raw bytes through the plan's write path and the busiest
    writer's serialiser time is added from the calibration (or the named defaults). The first run is not
    counted: it was the slowest every time (issue 13: 3.45 s against 1.46-1.65 s for the next three of the same
    two 1.2 GB files on the development VM's disk).
    """
    from ckplan.planning.savetime import machine_figures, writer_loads
    from ckplan.savers.calibrate import torch_available
    from ckplan.savers.saver import max_save_processes

    total = sum(f.bytes for f in files)
    writers = len({f.writer for f in files})
    node, share = replay.node_share(plan.manifest)
    full_bytes = sum(f.bytes for f in share)
    path = plan.write_path if direct_ok else "buffered"
    machine = machine_figures(calibration)
    fixed = machine.coordination_seconds.value if plan.coordinated_save else 0.0
    repeats = settings.repeats
    if path == "buffered" and torch_available() and writers <= max_save_processes():
        from ckplan.savers.saver import files_by_rank, run_saves

        method = "framework saver"
        progress.phase(
            f"replay: {len(files)} files, {writers} writers, scale {scale:g}, {plan.setup.framework}'s saver, "
            f"warm-up + {repeats} runs",
            0,
        )
        root = scratch / "replay"
        try:
            walls, _ = run_saves(
                root, files_by_rank(share, scale), plan.setup.framework, repeats + 1, "sync", what="the replay"
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        times, serialize = walls[1:], 0.0
    else:
        method = "raw bytes"
        times = []
        for r in range(repeats + 1):
            label = "warm-up (not counted)" if r == 0 else f"run {r}/{repeats}"
            progress.phase(
                f"replay ({path} writes): {len(files)} files, {writers} writers, scale {scale:g}, {label}", 0
            )
            root = scratch / f"replay-{r}"
            written = [0]
            start = time.monotonic()

            def on_bytes(n: int) -> None:
                written[0] += n
                progress.update(written[0], time.monotonic() - start)

            try:
                seconds = replay.write_files(root, files, on_bytes, direct=path == "direct")
            except OSError as exc:
                raise replay.oserror_message(exc, "the replay") from None
            finally:
                shutil.rmtree(root, ignore_errors=True)
            if r:
                times.append(seconds)
        serialize = max(ser for _, ser in writer_loads(plan, node, machine.rates()).values())
    spread = Spread.of(times)
    scaled_part = max(0.0, spread.median - (fixed if method == "framework saver" else 0.0))
    return Replay(
        method=method,
        write_path=path,
        seconds=spread.median,
        bytes=total,
        files=len(files),
        writers=writers,
        scale=scale,
        plan_fingerprint=plan.fingerprint,
        full_scale_seconds=fixed + scaled_part * full_bytes / total + serialize,
        fixed_seconds=fixed,
        serialize_seconds=serialize,
        spread=spread,
    )


class FilesystemTarget(PreparedTarget):
    """A directory on a file system, measured with fio from this host (probe/interface.py's ProbeTarget)."""

    kind: TargetKind = "filesystem"

    def _prepare(self) -> ProbeJob:
        s = self.spec
        return prepare_probe(
            Path(s.path),
            preset=s.preset,
            writers=s.writers,
            plan=s.plan,
            scale=s.scale,
            max_bytes=s.max_bytes,
            name=s.name,
            calibrate=s.calibrate,
            emit_jobs=s.emit_jobs,
        )

    def _run(self, job: ProbeJob, progress: Progress | None) -> StorageProfile:
        return run_probe(job, progress)

    def clean(self, force: bool = False) -> CleanResult:
        from ckplan.probe.clean import clean_target

        return clean_target(Path(self.spec.path), force)
