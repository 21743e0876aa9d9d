"""Driving fio: declarative jobs in, parsed JSON out.

fio quirks handled here (shared reference storage-and-fio.md, fixtures in tests/fixtures/fio):
- text (error lines, client banners) can precede the JSON on stdout: parse from the first '{';
- --status-interval prints one whole JSON document per interval: the last one is final;
- a failed job sets `error` to an errno and fio exits non-zero;
- ':' separates entries in `directory`/`filename`: a literal colon is escaped as '\\:';
- the filecreate engine records its creates in the read direction in fio 3.33.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ckplan import children, errors, scratch
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed
from ckplan.probe import jobfiles
from ckplan.probe.engine import RunNote, SmallRun, Stream
from ckplan.profile import Latency

if TYPE_CHECKING:
    from ckplan.probe.engine import StreamPath

MiB = 2**20
PAGE_CACHE = "page-cache"  # the bandwidth path of one writer's copy into the page cache
DEFAULT_PORT = 8765  # fio --server's
RUN_TIMEOUT_S = 3600  # a single-host fio run that takes longer has hung
MAX_OPTION_CHARS = 4096  # fio refuses an option's value longer than this ("value exceeds max length")
MAX_JOBS = 4096  # fio refuses more jobs than this in one run ("maximum number of jobs reached", FIO_MAX_JOBS)


@dataclass
class FioJob:
    """One fio job section: name plus options, written as a job file."""

    name: str
    options: dict[str, str | int] = field(default_factory=dict)

    def render(self) -> str:
        return "".join([f"[{self.name}]\n"] + [f"{key}={value}\n" for key, value in self.options.items()])


def check_job_path(path: Path | str) -> None:
    """fio cuts a job file's option values at ';' and '#' (its comment characters), escaped or not."""
    if bad := sorted({c for c in str(path) if c in ";#"}):
        raise InputError(
            f"fio cannot use a path containing {' or '.join(repr(c) for c in bad)} in a job file: {path}; "
            "probe a directory whose path has neither"
        )


def check_ready(path: Path, emit_jobs: Path | None) -> None:
    """Before a fio probe writes a byte: fio is installed, `path` can stand in a job file, `emit_jobs` can take them."""
    fio_binary()
    check_job_path(path)
    if emit_jobs is not None:
        jobfiles.check_dir(emit_jobs)


def escape_path(path: Path | str) -> str:
    """fio splits `directory` on ':'; escape literal colons (spaces and commas need nothing in a job file)."""
    check_job_path(path)
    return str(path).replace("\\", "\\\\").replace(":", "\\:")


def fio_binary() -> str:
    if not (exe := shutil.which("fio")):
        raise EnvironmentProblem(
            "fio is not installed; install it with `apt-get install fio` (Debian/Ubuntu) or `dnf install fio` (RHEL/Fedora)"
        )
    return exe


def fio_version() -> str:
    return subprocess.run(
        [fio_binary(), "--version"], capture_output=True, text=True, check=False, preexec_fn=children.preexec()
    ).stdout.strip()


def json_documents(text: str) -> list[dict]:
    """Every JSON document in fio's stdout, skipping any text before, between or after them."""
    decoder = json.JSONDecoder()
    docs, pos = [], text.find("{")
    while pos != -1:
        try:
            doc, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            doc, end = None, pos + 1
        if isinstance(doc, dict):
            docs.append(doc)
        pos = text.find("{", end)
    return docs


class FioError(MeasurementFailed):
    """fio failed while measuring: the target filled up, fio died, a job reported an errno (exit code 4)."""

    def __init__(self, message: str, errno_value: int | None = None):
        super().__init__(message)
        self.errno = errno_value


def job_errors(doc: dict) -> list[int]:
    jobs = doc.get("jobs", []) + [c for c in doc.get("client_stats", []) if c.get("jobname") != "All clients"]
    return [int(j.get("error", 0)) for j in jobs if int(j.get("error", 0))]


def write_bytes(doc: dict) -> int:
    return sum(int(j["write"]["io_bytes"]) for j in doc.get("jobs", []))


def run_fio(
    jobs: list[FioJob],
    workdir: Path,
    what: str,
    on_status: Callable[[int, float], None] | None = None,
    record: Callable[[list[str], dict[str, str]], None] | None = None,
) -> dict:
    """Run jobs and return fio's final JSON document; `on_status(bytes_written, elapsed_s)` about once a second,
    from fio's --status-interval documents; `record(command, {job file: text})` as it starts (`probe --emit-jobs`)."""
    exe = fio_binary()
    jobfile = workdir / f"{jobs[0].name}.fio"
    # Jobs as threads of the one fio process: fio puts each job process in a session of its own, beyond
    # stop()'s killpg and the parent-death signal, so after `kill -9` of ckplan they wrote on. Threads measured
    # as processes did (alternating runs, /var/tmp and /dev/shm).
    text = FioJob("global", {"thread": 1}).render() + "".join(j.render() for j in jobs)
    try:
        jobfile.write_text(text)
    except OSError as exc:  # the target filled up (or went away) between two runs
        raise FioError(
            errors.describe_errno(exc.errno, what) if exc.errno else f"cannot write fio's job file: {exc}", exc.errno
        ) from None
    cmd = [exe, "--output-format=json", "--status-interval=1", str(jobfile)]
    if record is not None:
        record(cmd, {str(jobfile): text})
    start = time.monotonic()
    chunks: list[bytes] = []
    with tempfile.TemporaryFile() as err:
        # its own session: Ctrl-C reaches ckplan, which stops fio and removes the scratch directory
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, start_new_session=True, preexec_fn=children.preexec()
        )
        reader = threading.Thread(target=_drain, args=(proc.stdout, chunks), daemon=True)
        reader.start()
        try:
            seen = 0
            while reader.is_alive():
                reader.join(timeout=0.2)
                if on_status and len(chunks) > seen:
                    seen = len(chunks)
                    docs = [d for d in json_documents(b"".join(chunks[-64:]).decode(errors="replace")) if "jobs" in d]
                    if docs:
                        on_status(write_bytes(docs[-1]), time.monotonic() - start)
                if time.monotonic() - start > RUN_TIMEOUT_S:
                    raise FioError(f"fio did not finish {what} within {RUN_TIMEOUT_S:.0f} s")
            proc.wait()
        finally:
            stop(proc)
            jobfile.unlink(missing_ok=True)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    docs = json_documents(b"".join(chunks).decode(errors="replace"))
    final = docs[-1] if docs else None
    if final and (codes := job_errors(final)):
        raise FioError(errors.describe_errno(codes[0], what), codes[0])
    if proc.returncode < 0:  # killed by a signal: its stderr, if any, is not the reason
        raise FioError(f"fio was {children.exit_reason(proc.returncode)} during {what}")
    if proc.returncode != 0 or final is None:
        line = next((ln for ln in stderr.splitlines() if ln.strip()), f"fio exited {proc.returncode}")
        code = errno.EINVAL if "O_DIRECT" in stderr or "direct=1" in stderr else None
        raise FioError(f"fio failed during {what}: {line.strip()}", code)
    return final


def _drain(stdout: io.BufferedReader, chunks: list[bytes]) -> None:
    for data in iter(lambda: stdout.read1(65536), b""):
        chunks.append(data)


def stop(proc: subprocess.Popen) -> None:
    """End fio (its jobs are its threads); it runs in its own session so Ctrl-C reaches us first."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


def percentiles_s(section: dict, key: str = "clat_ns") -> tuple[float, float, float, float, int]:
    """(p50, p99, p99.9, mean, samples) in seconds from a fio latency section."""
    lat = section.get(key, {})
    pct = lat.get("percentile", {})
    at = [next((v / 1e9 for k, v in pct.items() if abs(float(k) - p) < 1e-6), float("nan")) for p in (50, 99, 99.9)]
    return at[0], at[1], at[2], lat.get("mean", 0) / 1e9, int(lat.get("N", 0))


def bandwidth_job(path: str, writers: int, size: int, seconds: float, warm_up: bool = False) -> tuple[FioJob, str]:
    """A bandwidth run's job (writes by the buffered or direct path, PAGE_CACHE's copy, or cold reads) and what it
    measures, in words; a warm-up's job is named so in the raw fio output."""
    options: dict[str, str | int] = {"rw": "write", "bs": "1M", "size": size, "numjobs": writers, "ioengine": "psync"}
    options["direct"] = int(path == "direct")
    if path == PAGE_CACHE:
        measures = "one writer's copy of a sample into the page cache, never flushed (its file is unlinked while dirty)"
    elif path == "read":
        # invalidate=1: fio drops the file's cached pages (posix_fadvise DONTNEED) before the timed reads, without
        # root. Here (ext4 on virtio, 512 MiB) such reads ran at 0.56-1.9 GB/s, a warm re-read at 8.7-8.9 GB/s,
        # and direct=1 at 1.7 GB/s: the pages are gone, so this is the storage's rate, where O_DIRECT is refused too.
        options.update(rw="read", invalidate=1, runtime=f"{seconds}s")
        measures = (
            f"cold sequential 1 MiB reads by {writers} reader(s), one file each, laid out by fio before the timed "
            "reads, their cached pages dropped first (invalidate=1)"
        )
    else:
        options.update(end_fsync=1, runtime=f"{seconds}s")
        how = "with O_DIRECT" if path == "direct" else "through the page cache"
        measures = (
            f"sequential 1 MiB writes by {writers} writer(s), one file each, {how}, ending with an fsync "
            "(end_fsync=1) inside the runtime cap"
        )
    name = f"{'warm-up' if warm_up else 'bw'}-{path}-{writers}"
    return FioJob(name, {**options, "fallocate": "none", "group_reporting": 1, "unlink": 1}), measures


def small_files_job(writers: int, low: int, high: int, nrfiles: int) -> tuple[FioJob, str]:
    """Every writer creating, writing, fsyncing and closing `nrfiles` files of low…high bytes, one after another.
    fio 3.33 ignores `runtime` between the files of a many-file job, so every file completes."""
    options: dict[str, str | int] = dict(
        rw="write", bs=min(64 * 1024, low), filesize=f"{low}-{high}" if high > low else low, nrfiles=nrfiles
    )
    options.update(openfiles=1, create_on_open=1, fsync_on_close=1, file_service_type="sequential")
    measures = (
        f"{writers} writer(s) each creating, writing, fsyncing and closing {nrfiles} files of {low}-{high} bytes, "
        "one after another"
    )
    return FioJob("smallfiles", {**options, "fallocate": "none", "ioengine": "psync", "numjobs": writers}), measures


def latency_job(kind: str, size: int, seconds: float) -> tuple[FioJob, str, str]:
    """A latency run's job (fsync or o_sync), what it measures and the section of fio's JSON that holds the figure."""
    fsync = kind == "fsync"
    options: dict[str, str | int] = {"rw": "write", "bs": "4k", "size": size, "ioengine": "psync"}
    options["runtime"] = f"{seconds}s"
    options.update({"percentile_list": "50:99:99.9", "unlink": 1, "fsync" if fsync else "sync": 1})
    job = FioJob("fsync-lat" if fsync else "sync-write-lat", options)
    measures = "4 KiB writes by one writer, each followed by an fsync" if fsync else "4 KiB O_SYNC writes by one writer"
    return job, measures, "sync.lat_ns" if fsync else "write.clat_ns"


def file_parts(size: int) -> list[tuple[int, int, str]]:
    """(offset, length, bs) of the jobs that write a file of `size` bytes: its whole MiB, then the rest."""
    head, tail = size - size % MiB, size % MiB
    return [(0, head, "1M")] * bool(head) + [(head, tail, str(tail))] * bool(tail)


def file_jobs(files: list[tuple[str, int, int]], prefix: str) -> list[FioJob]:
    """Write exactly these files, (path, bytes, writer): each writer's one after another (`wait_for` chains them),
    the writers at once, each file created as it is opened and fsynced once written, as a durable save does, so
    that its create, fsync and close fall inside the job's runtime as they fall inside a saver's time. A file is its
    whole MiB blocks in 1 MiB writes, then the rest in one write (fio takes only whole blocks of `bs`). A writer's
    run of files under 1 MiB of one size is one job over a list of filenames, opened one at a time in order: one job
    a file would add fio's start and its wait between chained jobs to every file, where a saver has neither."""
    jobs: list[FioJob] = []
    last: dict[int, str] = {}
    runs: dict[int, tuple[int, list[str]]] = {}  # writer → the size and escaped paths of its open run of small files

    def add(writer: int, options: dict[str, str | int], fsync: bool) -> None:
        name = f"{prefix}{writer}-{len(jobs)}"  # the writer first: a run's figures are summed per writer
        options.update(rw="write", ioengine="psync", fallocate="none", create_on_open=1)
        if fsync:
            options["fsync_on_close"] = 1
        if writer in last:
            options["wait_for"] = last[writer]
        last[writer] = name
        jobs.append(FioJob(name, options))

    def close_run(writer: int) -> None:
        if (run := runs.pop(writer, None)) is not None:
            size, paths = run
            one_at_a_time: dict[str, str | int] = {"openfiles": 1, "file_service_type": "sequential"}
            add(writer, {"filename": ":".join(paths), "bs": size, "filesize": size, **one_at_a_time}, fsync=True)

    for path, size, writer in files:
        parts, escaped = file_parts(size), escape_path(path)
        if size < MiB:
            run_size, paths = runs.get(writer, (size, []))
            if run_size != size or len(":".join([*paths, escaped])) >= MAX_OPTION_CHARS:
                close_run(writer)
                paths = []
            runs[writer] = (size, [*paths, escaped])
            continue
        close_run(writer)
        for k, (offset, length, bs) in enumerate(parts):
            add(writer, {"filename": escaped, "bs": bs, "size": length, "offset": offset}, fsync=k == len(parts) - 1)
    for writer in list(runs):
        close_run(writer)
    return jobs


class FioSession:
    """What the fio backends' sessions (local, hosts) share; a backend runs a job on its hosts (`run_job`) and finds
    each host's figures in fio's output (`entries`)."""

    page_cache = True
    on = ""  # how a run's note says where it ran
    hosts_in_name = False  # a bandwidth run's job file names how many hosts ran it
    stats = "jobs[]"  # where fio's output holds each host's figures, for the job files' notes

    def __init__(self, writer: jobfiles.JobWriter | None):
        self.raw: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.writer = writer
        self.jobs = writer.jobs if writer else []
        self.write_paths: tuple[Literal["buffered", "direct"], ...] = ("buffered", "direct")

    @property
    def direct_io(self) -> bool:
        return "direct" in self.write_paths

    def run_job(self, job: FioJob, what: str, note: RunNote, hosts: int = 0) -> dict:
        """One run of `job` on the first `hosts` hosts (0: all), its output kept in raw."""
        raise NotImplementedError

    def entries(self, doc: dict, jobname: str) -> list[tuple[str, dict]]:
        """(host, its stats) of every job named `jobname` in fio's output."""
        raise NotImplementedError

    def per_host(
        self, doc: dict, jobname: str, key: str, combine=lambda a, b: a + b, direction: str = "write"
    ) -> dict[str, float]:
        """One figure of a job per host (a host's jobs combined: summed, or the max)."""
        out: dict[str, float] = {}
        for host, stats in self.entries(doc, jobname):
            value = float(stats[direction][key])
            out[host] = combine(out[host], value) if host in out else value
        return out

    def check_direct_io(self) -> None:
        """Only the buffered path where the target refuses O_DIRECT (EINVAL): one 1 MiB write with direct=1."""
        job = FioJob("direct-check", {**bandwidth_job("direct", 1, MiB, 0)[0].options, "runtime": "5s"})
        note = RunNote(
            "direct-I/O check",
            "direct_io: true unless fio fails with EINVAL (then only the buffered path is measured); not kept in raw_fio",
            measures=self.on + "whether the target takes O_DIRECT: one 1 MiB write with direct=1",
            read=f"fio's exit status, and {self.stats}.error (22 = EINVAL)",
        )
        try:
            self.run_job(job, "the direct I/O check", note)
            del self.raw[-1]  # a check, not a measurement: not in raw_fio
        except FioError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self.write_paths = ("buffered",)
            self.notes.append(
                f"{'a host' if self.on else 'the target'} refused O_DIRECT (EINVAL): only the buffered write path was "
                "measured; direct-I/O writers are predicted on it"
            )

    def note(self, note: RunNote, measures: str, read: str, **extra: Any) -> RunNote:
        return dataclasses.replace(note, measures=self.on + measures, read=read, raw_fio=len(self.raw), **extra)

    def stream(self, path: StreamPath, writers: int, hosts: int, size: int, seconds: float, note: RunNote) -> Stream:
        job, measures = bandwidth_job(path, writers, size, seconds, note.warm_up)
        way = "read" if path == "read" else "write"
        read = f"{self.stats} named {job.name}: {way}.bw_bytes per host, in bytes/s (group_reporting sums the jobs)"
        note = self.note(note, measures, read, name=f"{job.name}-{hosts}h" if self.hosts_in_name else None)
        doc = self.run_job(job, f"the bandwidth phase ({path}, {writers} writers)", note, hosts)
        rates = self.per_host(doc, job.name, "bw_bytes", direction=way)
        agg = [c for c in doc.get("client_stats", []) if c.get("jobname") == "All clients"]
        return Stream(rates, float(agg[0][way]["bw_bytes"]) if agg else sum(rates.values()))

    def latency(self, kind: Literal["fsync", "o_sync"], seconds: float, size: int, note: RunNote) -> Latency:
        job, measures, section = latency_job(kind, size, seconds)
        read = f"{self.stats} named {job.name}: {section} percentiles 50, 99, 99.9, mean and N, in ns; the worst p99's"
        doc = self.run_job(job, f"the {kind} latency phase", self.note(note, measures, read))
        part, key = section.split(".")
        worst = max((percentiles_s(stats[part], key) for _, stats in self.entries(doc, job.name)), key=lambda p: p[1])
        return Latency(p50_s=worst[0], p99_s=worst[1], p999_s=worst[2], mean_s=worst[3], samples=worst[4])

    def small_run(self, doc: dict, jobname: str, files: dict[str, int]) -> SmallRun:
        """A small-file run's rates from each host's files: per file its create, fsync and close, plus the write
        calls, over the host's longest writer's runtime."""
        seconds = {h: max(t / 1000, 1e-3) for h, t in self.per_host(doc, jobname, "runtime", max).items()}
        calls = self.per_host(doc, jobname, "total_ios")
        rates = {h: files[h] / t for h, t in seconds.items()}
        ops = {h: (3 * files[h] + calls[h]) / t for h, t in seconds.items()}
        return SmallRun(rates, ops, sum(files.values()), max(seconds.values()))

    def others_in(self, root: Path, mine: Callable[[Path], bool]) -> list[str]:
        """The live probes' scratch directories in `root`, but this probe's own."""
        found = scratch.scratch_dirs(root, (scratch.SCRATCH_PREFIX,))
        return [f"{s.path} (host {s.host}, pid {s.pid})" for s in found if s.live and not mine(s.path)]

    def phase_ran(self, phase: str, why: str) -> None:
        if self.writer is not None:
            self.writer.other(phase, why)
