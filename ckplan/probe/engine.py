"""The probe engine: what a probe measures and how, written once; each kind of target is a backend behind it
(probe/backends/: a `Backend` prepares and opens a target, a `Session` does what a target must do).

A prepared probe (every check that can fail runs before a byte is written) runs, on every target alike: bandwidth
(`_bandwidth`), reads (the same rounds, cold), small files, latency, the serialisers' calibration (PyTorch installed),
and with a plan its replay and read replay (the late phases: a failure in one of them leaves a profile of the others
that names it in `failed_phases`). Each phase starts with an unrecorded warm-up (the first writes after idle
run slow: a VM faulting its memory back in, an SSD leaving a power state, a rate limiter's burst credit), then its
repeats into a `Spread`.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed
from ckplan.profile import (
    BandwidthPoint,
    FailedPhase,
    HostPlacement,
    Latency,
    LatePhase,
    Measurement,
    ReadReplay,
    Replay,
    SmallFiles,
    Spread,
    StorageProfile,
)
from ckplan.savers.raw import FileToWrite
from ckplan.schema import Model
from ckplan.sizing.plan import scaled_file_bytes

if TYPE_CHECKING:
    from ckplan.profile import Calibration, TargetKind
    from ckplan.savers.restore import NodeLoads
    from ckplan.sizing.plan import CheckpointPlan

MiB = 2**20
T = TypeVar("T")
StreamPath = Literal["buffered", "direct", "page-cache", "read"]
NOISY_RANGE = 0.10  # repeats spanning more than this are flagged: the bar for two probes to agree
MIN_RUNTIME_S = 1.0  # shortest runtime cap of a bandwidth run, however tight the budget
PAGE_CACHE_SAMPLE_BYTES = 256 * MiB  # one writer's page-cache copy: well under the kernel's dirty limits
LATENCY_FILE_BYTES = 64 * MiB  # the latency runs' file, unless the byte budget is smaller
DEFAULT_SMALL_FILE_RANGE = (4 * 1024, 256 * 1024)  # RNG states (~15 KB) up to index and metadata files
SMALL_FILE_BOUNDS = (4 * 1024, 16 * MiB)  # a plan's small files are measured within these sizes
# held back from the byte budget for ckplan's own files (its marker, fio's job files, directories); the data
# files are sized in whole pages or MiB, so rounding cannot take them past the budget either
SCRATCH_RESERVE_BYTES = MiB
MIN_BYTES_PER_WRITER = 4 * MiB  # one writer's smallest bandwidth run
PAGE_BYTES = 4096
# every target's note that another live probe shared the target ends so; the CLI repeats such notes on stderr
SHARED_TARGET = "the bandwidth measured here was shared with it: probe again when it is done"


@dataclass(frozen=True)
class Preset:
    """Every figure that sizes a probe: time budgets split over the points and repeats (longer runs per point
    give steadier figures), and the counts each phase takes."""

    name: str
    bytes_per_writer: int  # upper bound per writer for a bandwidth point; the runtime cap usually ends it first
    bandwidth_budget_s: float  # the warm-up and every bandwidth point and repeat together
    read_budget_s: float  # the same for the reads, each run's lay-out of its files included
    small_files_budget_s: float  # all small-file repeats together
    latency_runtime_s: float  # each latency run
    repeats: int  # bandwidth points and replays
    warm_up_s: float  # the unrecorded bandwidth run before the measured ones (a third of it for small files)
    small_files_repeats: int
    # Files per writer in one small-file run, unless the plan's busiest rank writes more. Creates slow down as a
    # directory grows (/dev/shm here, alternating runs: median 17.4k files/s with 5,000 files, 14.5k with 36,000),
    # so a count sized by time alone would make the rate depend on how fast the calibration ran.
    small_files_per_writer_cap: int = 1024
    small_files_calibration: int = 32  # files per writer in the run that sizes the warm-up

    @property
    def small_files_runtime_s(self) -> float:
        return self.small_files_budget_s / self.small_files_repeats

    @property
    def measuring_s(self) -> float:
        """The measured phases' time budgets together."""
        return self.bandwidth_budget_s + self.read_budget_s + self.small_files_budget_s + 2 * self.latency_runtime_s


PRESETS = {
    "quick": Preset("quick", 256 * MiB, 6.0, 3.0, 2.0, 1.0, 1, warm_up_s=1.0, small_files_repeats=1),
    "default": Preset("default", 2048 * MiB, 36.0, 18.0, 12.0, 3.0, 3, warm_up_s=3.0, small_files_repeats=5),
    "thorough": Preset("thorough", 8192 * MiB, 180.0, 90.0, 40.0, 10.0, 5, warm_up_s=10.0, small_files_repeats=9),
}


class Progress(Protocol):
    """What the probe reports while it runs; the CLI draws it with rich."""

    def phase(self, name: str, budget_s: float) -> None: ...
    def update(self, bytes_written: int, elapsed_s: float) -> None: ...


class Silent:
    def phase(self, name: str, budget_s: float) -> None:
        pass

    def update(self, bytes_written: int, elapsed_s: float) -> None:
        pass


@dataclass(frozen=True)
class TargetSpec:
    """What to probe or clean, parsed: a directory, s3://bucket/prefix, or a directory as many hosts see it."""

    path: str
    preset: str = "default"
    writers: int | None = None
    plan: CheckpointPlan | None = None
    scale: float = 1.0
    max_bytes: int | None = None  # the byte budget: the most the probe keeps on the target at once
    name: str | None = None  # the profile's name (--save)
    calibrate: bool = True  # measure this machine's serialisers (PyTorch installed)
    emit_jobs: Path | None = None  # write every fio job file and command line that ran here (fio backends)
    notice: Callable[[str], None] | None = None  # where a backend says what it found (the hosts Slurm gave)
    # the options of one backend, an instance of its module's own class, whose `kind` picks that backend
    # (probe/backends); None: a directory on this host, or an object store's URL with the defaults
    options: Any = None
    labels: dict[str, str] = field(default_factory=dict)  # what the caller says about where it ran (--label)

    @property
    def writers_per_host(self) -> int:
        """--writers, else the plan's most writers per node, else this host's CPU count."""
        return self.writers or (self.plan.max_writers_per_node if self.plan else os.cpu_count() or 1)


class CleanResult(Model):
    """What `ckplan clean` removed from a target, and what it kept."""

    target: str
    removed: list[str]
    kept: list[str]  # probes that may still be running: other hosts', live S3 ones (remove with --force)
    why: dict[str, str] = {}  # kept entry -> why, where more is known than "another host's"


@dataclass(frozen=True)
class RunNote:
    """What one run is for, in the profile's terms; fio backends add how it ran and write it into `--emit-jobs`'
    job files."""

    phase: str  # e.g. "bandwidth, buffered"
    figure: str  # the profile figure it produced, or why it produced none (a warm-up, a calibration)
    warm_up: bool = False  # a warm-up: the group's later job files say to run it first, as the probe did
    group: str | None = None  # the runs that share a warm-up (default: the phase)
    measures: str = ""  # what the run does to the target (fio backends)
    read: str = ""  # where the figure is in fio's JSON output
    raw_fio: int | None = None  # index of this run's output in the profile's raw_fio
    name: str | None = None  # the job file name's stem after the number (default: the first job's name)
    # a directory under CKPLAN_JOB_DIR that run.sh makes fresh, counts the files of after the run (into
    # NNN-NAME.files) and removes: the small-file phase, whose files ckplan counts itself
    count_files_in: str | None = None


@dataclass(frozen=True)
class Stream:
    """One bandwidth run: bytes/s of every host that wrote, and of them all together."""

    per_host: dict[str, float]
    total: float


@dataclass(frozen=True)
class SmallRun:
    """One small-file run: files written, the operations the target served for them (per file its create, write
    calls, fsync and close; per object its PUT), and the longest writer's time, for every host and in all."""

    files_per_s: dict[str, float]  # per host
    ops_per_s: dict[str, float]  # per host
    files: int
    seconds: float


@dataclass(frozen=True)
class Facts:
    """What a backend found while preparing: the target as the profile records it, and what it may hold."""

    target: str
    name: str  # the profile's default name
    fs_type: str
    storage_class: str
    shared: bool
    tool: str
    hosts: int = 1
    mount_point: str | None = None
    mount_options: dict[str, str] = field(default_factory=dict)
    free_bytes: int | None = None  # None: not known here (an object store; shared storage the driver cannot see)
    notes: tuple[str, ...] = ()
    placement: tuple[HostPlacement, ...] = ()  # per host, the node its agent reported (multi-host, asked)


class Session(Protocol):
    """A backend opened on its target, its scratch area made; everything it writes goes inside it."""

    hosts: int  # hosts writing at once when a call names them all
    write_paths: tuple[Literal["buffered", "direct"], ...]  # the paths the target takes, buffered first
    direct_io: bool | None  # whether it takes O_DIRECT writes; None: it has no such thing (an object store)
    page_cache: bool  # one writer's copy into a page cache can be measured apart from the flush
    notes: list[str]  # what the backend says about how it measured
    raw: list[dict[str, Any]]  # every fio output, for the profile's audit trail

    # sequential writes by w writers on each of h hosts, for a byte and time budget; path "read": sequential reads,
    # cold (no cache between the reader and the storage holds them), of files it lays out first, untimed
    def stream(
        self, path: StreamPath, writers: int, hosts: int, bytes_per_writer: int, seconds: float, note: RunNote
    ) -> Stream: ...
    def small_files(self, writers: int, low: int, high: int, files_per_writer: int, note: RunNote) -> SmallRun: ...
    def latency(
        self, kind: Literal["fsync", "o_sync"], seconds: float, file_bytes: int, note: RunNote
    ) -> Latency | None: ...
    def write_files(self, nodes: list[list[FileToWrite]], path: str, run: int) -> tuple[float, int]: ...
    def save_files(self, files: list[FileToWrite], framework: str, runs: int) -> list[float] | None: ...
    # the last save_files' files loaded cold the framework's way, `runs` times; None where the backend cannot
    def load_files(self, loads: NodeLoads, runs: int) -> list[float] | None: ...
    def others(self) -> list[str]: ...
    def phase_ran(self, phase: str, why: str) -> None: ...  # a phase that ran no fio, for `--emit-jobs`' run.sh


class Backend(Protocol):
    kind: TargetKind

    def prepare(self, spec: TargetSpec) -> Facts: ...
    def open(self, facts: Facts, progress: Progress) -> AbstractContextManager[Session]: ...
    def clean(self, force: bool = False) -> CleanResult: ...


def writer_counts(max_writers: int) -> list[int]:
    """1, 2, 4 … below `max_writers`, then `max_writers`."""
    return [2**i for i in range(max_writers.bit_length()) if 2**i < max_writers] + [max_writers]


def scaled_files(files: list[Any], scale: float) -> list[FileToWrite]:
    """A plan's manifest files at `scale`, at least one byte each."""
    return [FileToWrite(f.path, scaled_file_bytes(f.bytes, scale), f.rank, f.kind) for f in files]


def replay_nodes(plan: CheckpointPlan, hosts: int) -> list[int]:
    """The nodes a replay writes: the busiest (it bounds a save), and with many hosts one per host, busiest first."""
    return [n.node for n in sorted(plan.nodes, key=lambda n: (-n.bytes, n.node))[:hosts]]


@dataclass(frozen=True)
class Job:
    """A prepared probe: the checks have passed and every size is fixed."""

    spec: TargetSpec
    facts: Facts
    preset: Preset
    writers: int
    bytes_per_writer: int
    data_bytes: int | None  # what one phase's files may take; None: no byte bound but the runtime cap
    replay: list[list[FileToWrite]]  # one list per host (node), at scale; empty without a plan
    calibrate: bool
    notes: tuple[str, ...]

    @property
    def estimated_seconds(self) -> float:
        from ckplan.savers.calibrate import ESTIMATE_S

        p = self.preset
        hosts = len(writer_counts(self.facts.hosts)) if self.facts.hosts > 1 else 0
        overhead = 0.4 * (p.small_files_repeats + 6 + hosts)  # each non-bandwidth run's start and end
        return p.measuring_s + overhead + (ESTIMATE_S[p.name] if self.calibrate else 0)


def prepare(spec: TargetSpec, backend: Backend) -> Job:
    """Every check that can fail before a byte is written: the backend's, then the byte budget and the replay."""
    preset = PRESETS[spec.preset]
    least = MIN_BYTES_PER_WRITER + SCRATCH_RESERVE_BYTES
    if spec.max_bytes is not None and spec.max_bytes < least:  # refused before the target is touched
        raise InputError(
            f"‹max_bytes› of {spec.max_bytes:,} bytes is too little: a probe needs at least {least // MiB} MiB "
            f"({MIN_BYTES_PER_WRITER // MiB} MiB for one writer and {SCRATCH_RESERVE_BYTES // MiB} MiB for its scratch)"
        )
    facts = backend.prepare(spec)
    plan = spec.plan
    writers = spec.writers_per_host
    notes = list(facts.notes)
    budget = None if facts.free_bytes is None else facts.free_bytes // 2
    if spec.max_bytes is not None:
        budget = spec.max_bytes if budget is None else min(budget, spec.max_bytes)
    data = None if budget is None else max(0, budget - SCRATCH_RESERVE_BYTES)
    replay: list[list[FileToWrite]] = []
    if plan is not None:
        nodes = replay_nodes(plan, facts.hosts)
        replay = [scaled_files([f for f in plan.manifest if f.node == n], spec.scale) for n in nodes]
        need = sum(-(-f.bytes // PAGE_BYTES) * PAGE_BYTES for files in replay for f in files)
        if budget is not None and data is not None and need > data:
            full = sum(f.bytes for f in plan.manifest if f.node in nodes)
            raise InputError(
                f"replaying the plan at ‹scale› {spec.scale:g} writes {need / 1e9:.2f} GB but the probe may use "
                f"{budget / 1e9:.2f} GB here (half the free space or ‹max_bytes›); try ‹scale› {data / full * 0.9:.2g}"
            )
    per_writer = preset.bytes_per_writer
    if data is not None:
        per_writer = min(per_writer, data // (writers * facts.hosts) // MiB * MiB)  # whole 1 MiB blocks
        if per_writer < MIN_BYTES_PER_WRITER and budget is not None:
            least = MIN_BYTES_PER_WRITER * writers * facts.hosts + SCRATCH_RESERVE_BYTES
            raise InputError(
                f"too little free space on {facts.target}: the probe may use {budget / 1e6:.1f} MB (half the free space "
                f"or ‹max_bytes›), and needs at least {least // MiB} MiB "
                f"for {writers} writer(s) on {facts.hosts} host(s)"
            )
    from ckplan.savers.calibrate import check_torch_saves, torch_available

    calibrate = spec.calibrate and torch_available()
    if not calibrate:
        notes.append(
            "serialisers not calibrated (PyTorch is not installed, or --no-calibrate): predictions use the named "
            "defaults"
        )
    if torch_available():
        # what the torch processes of the late phases will need, checked now: without it they fail after every
        # other phase has run (the calibration's DCP saves and safetensors need numpy, which torch does not require)
        if calibrate:
            check_torch_saves("the probe's calibration", ("dcp",), ", or probe with --no-calibrate")
        if plan is not None:
            from ckplan.frameworks import framework_of

            kind = framework_of(plan.setup.framework).saver.kind
            check_torch_saves(f"the probe's replay of a {plan.setup.framework} plan ({kind} saves)", (kind,))
    return Job(spec, facts, preset, writers, per_writer, data, replay, calibrate, tuple(notes))


# what a failed late phase leaves the profile without, and what the planner uses instead
MISSING = {
    "calibration": "this machine's serialiser and deserialiser speeds: predictions use the named defaults "
    "(`ckplan calibrate` measures them)",
    "replay": "the replay of the plan: predictions use the save-time model (and no read replay ran)",
    "read replay": "the read replay of the plan: predictions use the load-time model",
}
# the failures of a late phase after which the probe keeps what it measured: a measurement that failed (a save
# process died, the target filled up), the environment (no scratch space for the calibration), a file's error. A bug
# (any other exception) still ends the probe with exit 1 and its traceback under --debug.
LATE_FAILURES = (MeasurementFailed, EnvironmentProblem, OSError)


def run(job: Job, backend: Backend, progress: Progress | None = None) -> StorageProfile:
    """Run the phases on `backend` and assemble the StorageProfile."""
    progress = progress or Silent()
    started = time.monotonic()
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    notes = list(job.notes)
    others: dict[str, None] = {}
    failed: list[FailedPhase] = []
    with backend.open(job.facts, progress) as session:

        def look() -> None:
            others.update(dict.fromkeys(session.others()))

        look()
        bandwidth = _bandwidth(job, session, progress)
        notes += bandwidth.notes
        look()
        reads = _bandwidth(job, session, progress, bandwidth)
        look()
        small, aggregate_files = _small_files(job, session, progress)
        look()
        fsync, sync_write = _latencies(job, session, progress)
        look()

        calibration, replayed, read_replay = _late_phases(job, session, progress, notes, failed)
        look()
        notes += session.notes
    if others:
        notes.append(f"another probe of this target ran at the same time ({'; '.join(others)}); {SHARED_TARGET}")
    assert fsync is not None, "every backend times durable small writes"
    curves = bandwidth.curves
    facts = {k: getattr(job.facts, k) for k in ("target", "fs_type", "storage_class", "mount_point", "shared", "hosts")}
    return StorageProfile(
        **facts,
        target_kind=backend.kind,
        name=job.spec.name or job.facts.name,
        mount_options=job.facts.mount_options,
        placement=list(job.facts.placement),
        labels=job.spec.labels,
        direct_io=session.direct_io,
        buffered_bandwidth=bandwidth.curves["buffered"],
        direct_bandwidth=bandwidth.curves.get("direct", []),
        page_cache_write=bandwidth.page_cache,
        aggregate_bandwidth=bandwidth.aggregate,
        read_bandwidth=reads.curves["read"],
        aggregate_read_bandwidth=reads.aggregate,
        best_write_bytes_per_s=max(p.bytes_per_s for p in bandwidth.curves["buffered"]),
        small_files=small,
        aggregate_files_per_s=aggregate_files,
        fsync_latency=fsync,
        sync_write_latency=sync_write,
        replay=replayed,
        read_replay=read_replay,
        calibration=calibration,
        failed_phases=failed,
        notes=notes
        + noise_notes(curves["buffered"], small, replayed, curves.get("direct"), reads.curves["read"], read_replay),
        raw_fio=session.raw,
        measurement=Measurement(
            tool=job.facts.tool,
            date=date,
            host=socket.gethostname(),
            preset=job.preset.name,
            duration_s=time.monotonic() - started,
            bandwidth_bytes_per_writer=job.bytes_per_writer,
            runtime_cap_s=bandwidth.runtime_s,
            repeats=job.preset.repeats,
            jobs_dir=str(job.spec.emit_jobs) if job.spec.emit_jobs else None,
            jobs=getattr(session, "jobs", []),
        ),
    )


def _late_phases(
    job: Job, session: Session, progress: Progress, notes: list[str], failed: list[FailedPhase]
) -> tuple[Calibration | None, Replay | None, ReadReplay | None]:
    """The calibration, the replay and the read replay. Each one's figure is optional, so a failure in one keeps
    what the others measured (minutes of it) in a profile that names the phase and the gap (into `failed` and
    `notes`); the CLI writes that profile, then exits 4."""

    def late(phase: LatePhase, measure: Callable[[], T]) -> T | None:
        try:
            return measure()
        except LATE_FAILURES as exc:
            error = str(exc) or type(exc).__name__
            failed.append(FailedPhase(phase=phase, error=error, missing=MISSING[phase]))
            notes.append(f"incomplete: the {phase} failed ({error}); the profile lacks {MISSING[phase]}")
            return None

    calibration = None
    if job.calibrate:
        from ckplan.savers.calibrate import calibrate
        from ckplan.savers.saver import max_save_processes

        why = "PyTorch's serialisers into /dev/null, not fio; `ckplan calibrate` runs it again"
        session.phase_ran("calibration", why)
        calibration = late(
            "calibration", lambda: calibrate(job.preset.name, min(job.writers, max_save_processes()), progress)
        )
        if calibration is not None and job.facts.hosts > 1:
            notes.append(f"serialisers calibrated on the probing host {calibration.host}, not on the hosts")
    replayed = late("replay", lambda: _replay(job, session, calibration, progress)) if job.replay else None
    read_replay: ReadReplay | str | None = None
    if replayed is not None:
        done = replayed
        read_replay = late("read replay", lambda: _read_replay(job, session, done, progress))
    if isinstance(read_replay, str):
        notes.append(read_replay)
        read_replay = None
    return calibration, replayed, read_replay


@dataclass
class _Bandwidth:
    curves: dict[str, list[BandwidthPoint]]
    page_cache: BandwidthPoint | None
    aggregate: list[BandwidthPoint]
    runtime_s: float
    notes: list[str]  # what the run of every host at once showed: the straggler


def _point(values: list[float], writers: int, hosts: int = 1) -> BandwidthPoint:
    spread = Spread.of(values)
    return BandwidthPoint(writers=writers, hosts=hosts, bytes_per_s=spread.median, spread=spread)


def _bandwidth(job: Job, session: Session, progress: Progress, written: _Bandwidth | None = None) -> _Bandwidth:
    """The warm-up, then every point of every path, the page-cache copy and the host scaling, round by round. Given
    the write phase's figures, the read phase: the same rounds and reader counts, reading cold files each run lays
    out first, each reader's what a writer wrote in half the runtime there (so that a read seldom reaches the cap,
    and its lay-out and read fit the runtime together)."""
    p, w, hosts, per_writer = job.preset, job.writers, session.hosts, job.bytes_per_writer
    counts, host_counts = writer_counts(w), writer_counts(hosts) if hosts > 1 else []
    of = f"the profile keeps the median of its {p.repeats} run(s), with their min…max (spread)"
    paths: tuple[StreamPath, ...] = session.write_paths if written is None else ("read",)
    who, group, read = ("writer", "bandwidth", "") if written is None else ("reader", "read", "read")

    def stream(path: StreamPath, writers: int, on: int, seconds: float, label: str, note: RunNote) -> Stream:
        where = f" on {on} host(s)" if hosts > 1 else ""
        progress.phase(f"bandwidth, {path}: {writers} {who}(s){where}, {label}", seconds)
        size = min(per_writer, PAGE_CACHE_SAMPLE_BYTES) if path == "page-cache" else per_writer
        if written is not None:
            rate = next(b.bytes_per_s for b in written.curves["buffered"] if b.writers == writers) / writers
            size = max(MIN_BYTES_PER_WRITER, min(size, int(rate * seconds / 2) // MiB * MiB))
        return session.stream(path, writers, on, size, seconds, note)

    started = time.monotonic()
    warm = RunNote(
        f"bandwidth, {paths[0]}",
        "none: a warm-up, not counted (the first writes after idle run slow); how long it took beyond its runtime "
        "sets the measured runs' runtime cap (measurement.runtime_cap_s)",
        warm_up=True,
        group=group,
    )
    stream(paths[0], w, hosts, p.warm_up_s, "warm-up (not counted)", warm)
    spent = time.monotonic() - started
    runs = p.repeats * (len(counts) * len(paths) + len(host_counts))
    budget = p.bandwidth_budget_s if written is None else p.read_budget_s
    runtime = round(max(MIN_RUNTIME_S, (budget - spent) / runs - max(0.0, spent - p.warm_up_s)), 1)
    values: dict[tuple[str, int], list[float]] = {}
    notes: list[str] = []
    for r in range(p.repeats):
        label = f"run {r + 1} of {p.repeats}"
        for path in paths:
            for n in counts:
                figure = f"{path}_bandwidth (writers={n}).bytes_per_s: the slowest host's, {label}; {of}"
                got = stream(path, n, hosts, runtime, label, RunNote(f"bandwidth, {path}", figure, group=group))
                values.setdefault((path, n), []).append(min(got.per_host.values()))
                if hosts > 1 and path == "buffered" and n == w and r == 0:  # a save waits for the slowest: name it
                    rates = got.per_host
                    fast, slow = max(rates, key=rates.__getitem__), min(rates, key=rates.__getitem__)
                    notes.append(
                        f"per host at {w} writers: "
                        + ", ".join(f"{h} {v / 1e6:.0f} MB/s" for h, v in sorted(rates.items()))
                        + f"; straggler {slow} at {rates[slow] / rates[fast]:.0%} of {fast}; "
                        f"all hosts {got.total / 1e6:.0f} MB/s"
                    )
        if session.page_cache and written is None:
            figure = f"page_cache_write.bytes_per_s: {label}; {of}"
            got = stream("page-cache", 1, hosts, 0, f"no flush, {label}", RunNote("bandwidth, page-cache", figure))
            values.setdefault(("page-cache", 1), []).append(min(got.per_host.values()))
        for h in host_counts:
            field = f"aggregate_{read}_bandwidth" if read else "aggregate_bandwidth"
            figure = f"{field} (hosts={h}).bytes_per_s: all hosts together, {label}; {of}"
            got = stream(paths[0], w, h, runtime, label, RunNote(f"{read} host scaling, {h} host(s)".lstrip(), figure))
            values.setdefault(("hosts", h), []).append(got.total)
    curves: dict[str, list[BandwidthPoint]] = {path: [_point(values[path, n], n) for n in counts] for path in paths}
    page_cache = _point(values["page-cache", 1], 1) if session.page_cache and written is None else None
    aggregate = [_point(values["hosts", h], w, h) for h in host_counts]
    return _Bandwidth(curves, page_cache, aggregate, runtime, notes)


def _small_files(job: Job, session: Session, progress: Progress) -> tuple[SmallFiles, float | None]:
    """A calibration run sizes the warm-up's file count, the warm-up the measured runs', so that each takes about
    its share of the budget; once warm, the run-to-run scatter is larger than any trend, so a median of more, short
    runs moves less. With many hosts, the profile keeps the slowest host's rate and the sum over hosts."""
    p, plan, writers = job.preset, job.spec.plan, job.writers * session.hosts
    # the sizes: the plan's small files, within SMALL_FILE_BOUNDS
    sizes = [f.bytes for f in plan.manifest if f.kind == "small"] if plan is not None else []
    low, high = DEFAULT_SMALL_FILE_RANGE
    if sizes:
        low, high = (min(max(SMALL_FILE_BOUNDS[0], x), SMALL_FILE_BOUNDS[1]) for x in (min(sizes), max(sizes)))
    busiest_rank = max(Counter(f.rank for f in plan.manifest).values()) if plan is not None else 0
    cap = max(p.small_files_per_writer_cap, busiest_rank)
    space = cap if job.data_bytes is None else max(8, job.data_bytes // (writers * high))

    def run(files: int, label: str, figure: str, warm_up: bool = False) -> SmallRun:
        progress.phase(
            f"small files: create, write, fsync, close ({job.writers} writers){label}", p.small_files_runtime_s
        )
        note = RunNote("small files", figure, warm_up=warm_up)
        return session.small_files(job.writers, low, high, files, note)

    def count(got: SmallRun, seconds: float) -> int:
        return int(max(8, min(cap, space, got.files / got.seconds * seconds / writers)))

    first = run(min(p.small_files_calibration, space), " calibration", "none: a calibration run, sizes the warm-up")
    warm = run(
        count(first, p.warm_up_s / 3), " warm-up (not counted)", "none: a warm-up, sizes the measured runs", True
    )
    files = count(warm, p.small_files_runtime_s)
    rates, ops, sums = [], [], []
    for r in range(p.small_files_repeats):
        figure = (
            f"small_files.files_per_s and ops_per_s: run {r + 1} of {p.small_files_repeats}, the slowest host's; "
            "the profile keeps the median, with the files/s min…max (spread)"
        )
        got = run(files, f", run {r + 1} of {p.small_files_repeats}", figure)
        slowest = min(got.files_per_s, key=lambda h: got.files_per_s[h])
        rates.append(got.files_per_s[slowest])
        ops.append(got.ops_per_s[slowest])
        sums.append(sum(got.files_per_s.values()))
    spread = Spread.of(rates)
    small = SmallFiles(
        files_per_s=spread.median,
        ops_per_s=Spread.of(ops).median,
        file_bytes_min=low,
        file_bytes_max=high,
        writers=job.writers,
        spread=spread,
    )
    return small, Spread.of(sums).median if session.hosts > 1 else None


def _latencies(job: Job, session: Session, progress: Progress) -> list[Latency | None]:
    """One writer's durable 4 KiB writes: each followed by an fsync, and each O_SYNC. Every host writes its own
    file: together they stay inside the byte budget."""
    share = None if job.data_bytes is None else job.data_bytes // job.facts.hosts // MiB * MiB
    size = LATENCY_FILE_BYTES if share is None else min(LATENCY_FILE_BYTES, share)
    kinds: tuple[tuple[Literal["fsync", "o_sync"], str, str, str], ...] = (
        ("fsync", "4 KiB write + fsync", "fsync", "fsync_latency"),
        ("o_sync", "4 KiB O_SYNC writes", "O_SYNC writes", "sync_write_latency"),
    )
    latencies = []
    for kind, what, phase, figure in kinds:
        progress.phase(f"latency: {what}", job.preset.latency_runtime_s)
        note = RunNote(f"latency, {phase}", f"{figure} (p50_s, p99_s, p999_s, mean_s, samples): the worst host's")
        latencies.append(session.latency(kind, job.preset.latency_runtime_s, size, note))
    return latencies


def full_scale_seconds(
    measured: float, fixed: float, serialize: float, bytes_ratio: float, framework_saver: bool
) -> float:
    """A replay at scale, extrapolated to full size: the fixed cost per save (a collective save's coordination,
    which does not grow with the bytes) + the rest × full bytes ÷ replayed bytes (bandwidth-bound), + the busiest
    writer's serialisation at full size where the replay wrote raw bytes (a framework saver's run holds both its
    fixed cost and its serialisation already)."""
    scaled = max(0.0, measured - (fixed if framework_saver else 0.0))
    return fixed + scaled * bytes_ratio + (0.0 if framework_saver else serialize)


def _replay(job: Job, session: Session, calibration: Calibration | None, progress: Progress) -> Replay:
    """The replay of the plan's busiest node(s): a warm-up (the first of four runs of two 1.2 GB files took 3.45 s,
    the next 1.46-1.65 s), then the repeats. Buffered writers go through the framework's own saver where the backend
    can run it, as on a fast target the serialiser is most of the save; else raw bytes through the plan's write path,
    plus the busiest writer's serialisation from the calibration (or the named defaults)."""
    from ckplan.planning.savetime import coordination_seconds, machine_figures, writer_loads
    from ckplan.savers.calibrate import torch_available
    from ckplan.savers.saver import max_save_processes

    plan, scale, repeats = job.spec.plan, job.spec.scale, job.preset.repeats
    assert plan is not None
    nodes = replay_nodes(plan, session.hosts)
    files = [f for fs in job.replay for f in fs]
    written = sum(f.bytes for f in files)
    writers = max(len({f.rank for f in fs}) for fs in job.replay)
    path = plan.write_path if plan.write_path in session.write_paths else "buffered"
    machine = machine_figures(calibration)
    fixed = coordination_seconds(plan, machine)
    saver = path == "buffered" and torch_available() and writers <= max_save_processes()
    where = f"{len(files)} files, {writers} writers" + (f" per host on {len(nodes)} hosts" if len(nodes) > 1 else "")
    progress.phase(f"replay ({path}): {where}, scale {scale:g}, warm-up + {repeats} runs", 0)
    walls = session.save_files(job.replay[0], plan.setup.framework, repeats + 1) if saver else None
    saver = walls is not None  # a backend without the framework's saver writes raw bytes
    if walls is None:
        runs = [session.write_files(job.replay, path, r) for r in range(repeats + 1)]
        walls, written = [seconds for seconds, _ in runs], runs[-1][1]
    serialize = 0.0 if saver else max(ser for n in nodes for _, ser in writer_loads(plan, n, machine.rates()).values())
    spread = Spread.of(walls[1:])
    full_bytes = sum(f.bytes for f in plan.manifest if f.node in nodes)
    return Replay(
        method="framework saver" if saver else "raw bytes",
        write_path=path,
        seconds=spread.median,
        bytes=written,
        files=len(files),
        writers=writers,
        scale=scale,
        plan_fingerprint=plan.fingerprint,
        full_scale_seconds=full_scale_seconds(spread.median, fixed, serialize, full_bytes / written, saver),
        fixed_seconds=fixed,
        serialize_seconds=serialize,
        spread=spread,
        nodes=len(nodes),
    )


def _read_replay(job: Job, session: Session, replay: Replay, progress: Progress) -> ReadReplay | str:
    """The busiest restore node's ranks load the replay's last save cold, as the framework reads it on resume: a
    warm-up load, then the repeats, extrapolated to the node's full restore bytes (the loaders' runs hold their
    deserialisation). Where the plan, the replay or the backend cannot, the one line saying why."""
    from ckplan.savers.restore import node_loads
    from ckplan.savers.saver import files_by_rank

    plan, repeats = job.spec.plan, job.preset.repeats
    assert plan is not None
    if plan.restore is None:
        return f"no read replay: {plan.setup.framework}'s reads on resume are not known for this plan"
    if replay.method != "framework saver":
        return (
            "no read replay: the framework's loaders read the framework saver's files, and the replay here wrote raw "
            "bytes (no framework saver on this target or write path)"
        )
    try:
        loads = node_loads(plan, files_by_rank(job.replay[0]))
    except InputError as exc:
        return f"no read replay: {exc}"
    if loads.missing:
        return (
            f"no read replay: restore node {loads.node} reads {len(loads.missing):,} file(s) the replayed node does "
            f"not write ({loads.missing[0]}, …)"
        )
    progress.phase(f"read replay: {len(loads.files)} files, {len(loads.by_rank)} readers, warm-up + {repeats}", 0)
    walls = session.load_files(loads, repeats + 1)
    if walls is None:
        return "no read replay: this target's backend cannot run the framework's loaders"
    spread = Spread.of(walls[1:])
    return ReadReplay(
        method="framework loader",
        seconds=spread.median,
        bytes=loads.bytes,
        files=len(loads.files),
        readers=len(loads.by_rank),
        scale=job.spec.scale,
        plan_fingerprint=plan.fingerprint,
        full_scale_seconds=full_scale_seconds(spread.median, 0.0, 0.0, plan.restore.node_bytes / loads.bytes, True),
        spread=spread,
    )


def noise_notes(bandwidth, small_files=None, replay=None, direct=None, read=None, read_replay=None) -> list[str]:
    """Warn, as hyperfine does on outliers, where a figure's own repeats disagree by more than NOISY_RANGE: a second
    probe of such a target can differ by as much, whatever the probe does."""
    best = max(bandwidth, key=lambda b: b.bytes_per_s)
    figures = [(f"the {best.writers}-writer {'buffered ' if direct else ''}bandwidth", best.spread)]
    for who, what, curve in (("writer", "direct", direct), ("reader", "read", read)):
        if curve:
            top = max(curve, key=lambda b: b.bytes_per_s)
            figures.append((f"the {top.writers}-{who} {what} bandwidth", top.spread))
    timed = {"the small-file rate": small_files, "the replay's save time": replay}
    timed["the read replay's load time"] = read_replay
    figures += [(label, got.spread) for label, got in timed.items() if got is not None]
    return [
        f"{label} varied by {spread.relative_range:.0%} across its {spread.repeats} repeats (min…max): this target "
        "is noisy now, and a second probe may differ as much; the median is used (--thorough runs more, longer repeats)"
        for label, spread in figures
        if spread is not None and spread.repeats > 1 and spread.relative_range > NOISY_RANGE
    ]


def incomplete(profile: StorageProfile, kept: list[str]) -> MeasurementFailed | None:
    """The error a probe ends in, after its profile is kept (`kept`: where it went), when a late phase failed."""
    if not profile.failed_phases:
        return None
    failures = "; ".join(f"the {f.phase} failed: {f.error}" for f in profile.failed_phases)
    phases = " and the ".join(f.phase for f in profile.failed_phases)
    return MeasurementFailed(
        f"{failures}. The profile keeps every other phase's figures, without the {phases} (its failed_phases say "
        f"what stands in), {' and '.join(kept) or 'on stdout'}"
    )


def shared_target_warnings(notes: list[str]) -> list[str]:
    """The notes that say another probe ran at the same time, whatever the target."""
    return [n for n in notes if n.endswith(SHARED_TARGET)]
