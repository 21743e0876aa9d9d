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
import errno
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

from ckplan import children
from ckplan.errors import InputError, MeasurementFailed
from ckplan.probe import jobfiles

MiB = 2**20
INSTALL_HINT = (
    "fio is not installed; install it with `apt-get install fio` (Debian/Ubuntu) or `dnf install fio` (RHEL/Fedora)"
)


@dataclass
class FioJob:
    """One fio job section: name plus options, written as a job file."""

    name: str
    options: dict[str, str | int] = field(default_factory=dict)

    def render(self) -> str:
        lines = [f"[{self.name}]"]
        for key, value in self.options.items():
            lines.append(f"{key}={value}")
        return "\n".join(lines) + "\n"


def check_job_path(path: Path | str) -> None:
    """fio cuts a job file's option values at ';' and '#' (its comment characters), escaped or not."""
    bad = sorted({c for c in str(path) if c in ";#"})
    if bad:
        raise InputError(
            f"fio cannot use a path containing {' or '.join(repr(c) for c in bad)} in a job file: {path}; "
            "probe a directory whose path has neither"
        )


def escape_path(path: Path | str) -> str:
    """fio splits `directory` on ':'; escape literal colons (spaces and commas need nothing in a job file)."""
    check_job_path(path)
    return str(path).replace("\\", "\\\\").replace(":", "\\:")


def fio_binary() -> str:
    exe = shutil.which("fio")
    if not exe:
        from ckplan.errors import EnvironmentProblem

        raise EnvironmentProblem(INSTALL_HINT)
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
            pos = text.find("{", pos + 1)
            continue
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


def describe_errno(code: int, what: str, failed: str = "fio failed") -> str:
    if code == errno.ENOSPC:
        return f"the target filled up (ENOSPC) during {what}; nothing was left behind"
    if code == errno.EROFS:
        return f"the target is read-only (EROFS) during {what}"
    if code == errno.EACCES or code == errno.EPERM:
        return f"permission denied during {what}"
    if code == errno.EINVAL:
        return f"the target refused the I/O mode (EINVAL) during {what}"
    return f"{failed} during {what}: {os.strerror(code)} (errno {code})"


def write_bytes(doc: dict) -> int:
    return sum(int(j["write"]["io_bytes"]) for j in doc.get("jobs", []))


def run_fio(
    jobs: list[FioJob],
    workdir: Path,
    what: str,
    global_options: dict | None = None,
    on_status: Callable[[int, float], None] | None = None,
    timeout_s: float = 3600,
    note: jobfiles.Note | None = None,
) -> dict:
    """Run jobs and return fio's final JSON document.

    `on_status(bytes_written, elapsed_s)` is called about once a second with
    live figures from fio's --status-interval documents. `note` says what the
    run is for, in the job file `probe --emit-jobs` writes of it.
    """
    exe = fio_binary()
    jobfile = workdir / f"{jobs[0].name}.fio"
    # Jobs run as threads of the one fio process, not as forked processes: fio puts each job process in
    # a session of its own, so neither stop()'s killpg nor the parent-death signal reached them, and
    # after `kill -9` of ckplan they wrote on until their runtime ended. As threads they die with fio.
    # Threads and processes measured alike here (alternating runs, /var/tmp and /dev/shm: within the
    # runs' own scatter); the I/O calls are the same.
    glob = FioJob("global", {"thread": 1, **(global_options or {})})
    text = glob.render() + "".join(j.render() for j in jobs)
    try:
        jobfile.write_text(text)
    except OSError as exc:  # the target filled up (or went away) between two runs
        raise FioError(
            describe_errno(exc.errno, what) if exc.errno else f"cannot write fio's job file: {exc}", exc.errno
        ) from None
    cmd = [exe, "--output-format=json", "--status-interval=1", str(jobfile)]
    if note is not None:
        jobfiles.record(cmd, {str(jobfile): text}, note)
    start = time.monotonic()
    chunks: list[bytes] = []
    with tempfile.TemporaryFile() as err:
        # its own session: Ctrl-C reaches ckplan, which stops fio and removes the scratch directory
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, start_new_session=True, preexec_fn=children.preexec()
        )
        reader = threading.Thread(target=_drain, args=(proc, chunks), daemon=True)
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
                if time.monotonic() - start > timeout_s:
                    raise FioError(f"fio did not finish {what} within {timeout_s:.0f} s")
            proc.wait()
        finally:
            stop(proc)
            jobfile.unlink(missing_ok=True)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    docs = json_documents(b"".join(chunks).decode(errors="replace"))
    final = docs[-1] if docs else None
    codes = job_errors(final) if final else []
    if codes:
        raise FioError(describe_errno(codes[0], what), codes[0])
    if proc.returncode < 0:  # killed by a signal: its stderr, if any, is not the reason
        raise FioError(f"fio was {children.exit_reason(proc.returncode)} during {what}")
    if proc.returncode != 0 or final is None:
        line = next((ln for ln in stderr.splitlines() if ln.strip()), f"fio exited {proc.returncode}")
        code = errno.EINVAL if "O_DIRECT" in stderr or "direct=1" in stderr else None
        raise FioError(f"fio failed during {what}: {line.strip()}", code)
    return final


def _drain(proc: subprocess.Popen, chunks: list[bytes]) -> None:
    assert proc.stdout is not None
    while True:
        data = proc.stdout.read1(65536)  # type: ignore[attr-defined]  # a pipe opened in binary mode: a BufferedReader
        if not data:
            return
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

    def at(p: str) -> float:
        for k, v in pct.items():
            if abs(float(k) - float(p)) < 1e-6:
                return v / 1e9
        return float("nan")

    return at("50"), at("99"), at("99.9"), lat.get("mean", 0) / 1e9, int(lat.get("N", 0))


# --- the jobs the fio backends (local, hosts) run: one definition each -------------------------------------------

PAGE_CACHE = "page-cache"


def bandwidth_job(path: str, writers: int, size: int, seconds: float, warm_up: bool = False) -> tuple[FioJob, str]:
    """Sequential 1 MiB writes, one file per writer: buffered or direct, ending with an fsync inside the runtime
    cap; or (PAGE_CACHE) one writer's copy of a sample into the page cache, never flushed (unlinked while dirty).
    Returns the job and what it measures, in words; a warm-up's job is named so in the raw fio output."""
    if path == PAGE_CACHE:
        flush: dict[str, str | int] = {"size": size}
        measures = "one writer's copy of a sample into the page cache, never flushed (its file is unlinked while dirty)"
    else:
        flush = {"end_fsync": 1, "runtime": f"{seconds}s", "size": size}
        how = "with O_DIRECT" if path == "direct" else "through the page cache"
        measures = (
            f"sequential 1 MiB writes by {writers} writer(s), one file each, {how}, ending with an fsync "
            "(end_fsync=1) inside the runtime cap"
        )
    options = {
        "rw": "write",
        "bs": "1M",
        **flush,
        "numjobs": writers,
        "ioengine": "psync",
        "direct": int(path == "direct"),
    }
    name = f"{'warm-up' if warm_up else 'bw'}-{path}-{writers}"
    job = FioJob(name, {**options, "fallocate": "none", "group_reporting": 1, "unlink": 1})
    return job, measures


def small_files_job(writers: int, low: int, high: int, nrfiles: int) -> tuple[FioJob, str]:
    """Every writer creating, writing, fsyncing and closing `nrfiles` files of low…high bytes, one after another.
    fio 3.33 ignores `runtime` between the files of a many-file job, so every file completes."""
    job = FioJob(
        "smallfiles",
        {
            "rw": "write",
            "bs": min(64 * 1024, low),
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
    measures = (
        f"{writers} writer(s) each creating, writing, fsyncing and closing {nrfiles} files of {low}-{high} bytes, "
        "one after another"
    )
    return job, measures


def latency_job(kind: str, size: int, seconds: float) -> tuple[FioJob, str, str]:
    """One writer's 4 KiB writes, each followed by an fsync (fsync) or each O_SYNC (o_sync); the job, what it
    measures and the latency section of fio's JSON that holds the figure."""
    sync, section = ({"fsync": 1}, "sync.lat_ns") if kind == "fsync" else ({"sync": 1}, "write.clat_ns")
    options: dict[str, str | int] = {
        "rw": "write",
        "bs": "4k",
        "size": size,
        "ioengine": "psync",
        "runtime": f"{seconds}s",
    }
    job = FioJob(
        "fsync-lat" if kind == "fsync" else "sync-write-lat",
        {**options, "percentile_list": "50:99:99.9", "unlink": 1, **sync},
    )
    measures = (
        "4 KiB writes by one writer, each followed by an fsync"
        if kind == "fsync"
        else "4 KiB O_SYNC writes by one writer"
    )
    return job, measures, section


def file_jobs(files: list[tuple[str, int, int]], prefix: str) -> list[FioJob]:
    """Write exactly these files, (path, bytes, writer): each writer's one after another (`wait_for` chains them),
    the writers at once. A file is its whole MiB blocks in 1 MiB writes, then the rest in one write (fio takes only
    whole blocks of `bs`), and is fsynced once written, as a durable save does."""
    jobs: list[FioJob] = []
    last: dict[int, str] = {}
    for i, (path, size, writer) in enumerate(files):
        head, tail = size - size % MiB, size % MiB
        parts = [(0, head, "1M")] if head else []
        parts += [(head, tail, str(tail))] if tail else []
        for k, (offset, length, bs) in enumerate(parts):
            name = f"{prefix}{i}-{k}"
            options: dict[str, str | int] = {"filename": escape_path(path), "rw": "write", "bs": bs, "size": length}
            options.update(offset=offset, ioengine="psync", fallocate="none")
            if k == len(parts) - 1:
                options["fsync_on_close"] = 1
            if writer in last:
                options["wait_for"] = last[writer]
            last[writer] = name
            jobs.append(FioJob(name, options))
    return jobs
