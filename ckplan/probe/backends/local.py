"""The local backend: a directory on a filesystem mounted here, measured with fio from this host; its replay runs
the framework's own saver (one process per rank) or ckplan's own writer (probe/replay.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from ckplan import scratch
from ckplan.probe import fio, jobfiles, replay, target
from ckplan.probe.engine import (
    Facts,
    FileToWrite,
    Progress,
    RunNote,
    SmallRun,
    Stream,
    StreamPath,
    TargetSpec,
)
from ckplan.profile import Latency, TargetKind

UNSIZED_DEFAULT_BYTES = 2**30  # what the probe may write on a filesystem that reports no size, unless --max-bytes


class LocalBackend:
    kind: TargetKind = "filesystem"

    def __init__(self, spec: TargetSpec):
        self.spec = spec
        self.path = Path(spec.path).expanduser()

    def prepare(self, spec: TargetSpec) -> Facts:
        fio.fio_binary()
        target.check_target(self.path)
        fio.check_job_path(self.path.resolve())
        mount = target.mount_of(self.path, target.parse_mounts(Path("/proc/self/mounts").read_text()))
        notes = []
        free = target.free_bytes(self.path)
        if free is None:
            free = 2 * (spec.max_bytes or UNSIZED_DEFAULT_BYTES)
            notes.append(
                f"the filesystem reports no size; the probe wrote at most {free // 2 / 1e9:.2f} GB (--max-bytes)"
            )
        stale = scratch.leftovers(self.path)
        if stale:
            notes.append(
                f"found {len(stale)} scratch director{'y' if len(stale) == 1 else 'ies'} from a killed probe: "
                f"remove with `ckplan clean {self.path}`"
            )
        if spec.emit_jobs is not None:  # the last check, so that a refused probe leaves no directory behind
            jobfiles.check_dir(spec.emit_jobs)  # the JobWriter creates it when it writes the first job file
        return Facts(
            target=str(self.path.resolve()),
            name=f"{socket.gethostname()}:{self.path}",
            fs_type=mount.fs_type,
            storage_class=mount.storage_class,
            shared=mount.storage_class in target.SHARED_CLASSES,
            tool=fio.fio_version(),
            mount_point=mount.mount_point,
            mount_options=mount.options,
            free_bytes=free,
            notes=tuple(notes),
        )

    @contextlib.contextmanager
    def open(self, facts: Facts, progress: Progress) -> Iterator[LocalSession]:
        writer = None
        if self.spec.emit_jobs is not None:
            where = f"the probe of {self.path.resolve()} on {socket.gethostname()}"
            writer = jobfiles.JobWriter(
                self.spec.emit_jobs.absolute(), about=where, fio_version=facts.tool, local_target=self.path.resolve()
            )
        with scratch.ScratchDir(self.path) as area, jobfiles.emitting(writer):
            if writer is not None:
                writer.scratch = fio.escape_path(area.path)
            try:
                yield LocalSession(area.path, progress, writer)
            except OSError as exc:  # ckplan's own file operations on the target (mkdir, job files) mid-run
                raise replay.oserror_message(exc, "the probe") from None

    def clean(self, force: bool = False):
        from ckplan.probe.clean import clean_target

        return clean_target(self.path, force)


class LocalSession:
    hosts = 1
    page_cache = True

    def __init__(self, root: Path, progress: Progress, writer: jobfiles.JobWriter | None):
        self.root, self.progress, self.writer = root, progress, writer
        self.raw: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.jobs = writer.jobs if writer else []
        self.write_paths: tuple[Literal["buffered", "direct"], ...] = ("buffered", "direct")
        if not self._direct_io_works():
            self.write_paths = ("buffered",)
            self.notes.append(
                "the target refused O_DIRECT (EINVAL): only the buffered write path was measured; direct-I/O "
                "writers are predicted on it"
            )

    def _fio(self, job: fio.FioJob, what: str, note: jobfiles.Note | None, keep: bool = True) -> dict:
        doc = fio.run_fio([job], self.root, what, on_status=self.progress.update, note=note)
        if keep:
            self.raw.append(doc)
        return doc

    def _note(self, note: RunNote, measures: str, read: str, **extra: Any) -> jobfiles.Note:
        return jobfiles.Note(
            note.phase, measures, note.figure, read, raw_fio=len(self.raw), group=note.group, warm_up=note.warm_up,
            **extra,
        )  # fmt: skip

    def _direct_io_works(self) -> bool:
        job, _ = fio.bandwidth_job("direct", 1, 2**20, 0)
        job = fio.FioJob("direct-check", {**job.options, "runtime": "5s", "directory": fio.escape_path(self.root)})
        note = jobfiles.Note(
            "direct-I/O check",
            "whether the target takes O_DIRECT: one 1 MiB write with direct=1",
            "direct_io: true unless fio fails with EINVAL (then only the buffered path is measured); not kept in raw_fio",
            "fio's exit status, and jobs[0].error (22 = EINVAL)",
        )
        try:
            self._fio(job, "the direct I/O check", note, keep=False)
        except fio.FioError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise
        return True

    def stream(self, path: StreamPath, writers: int, hosts: int, size: int, seconds: float, note: RunNote) -> Stream:
        job, measures = fio.bandwidth_job(path, writers, size, seconds, note.warm_up)
        job.options["directory"] = fio.escape_path(self.root)
        read = "jobs[0].write.bw_bytes, in bytes/s (group_reporting sums the writers)"
        doc = self._fio(job, f"the bandwidth phase ({path}, {writers} writers)", self._note(note, measures, read))
        rate = float(doc["jobs"][0]["write"]["bw_bytes"])
        return Stream({socket.gethostname(): rate}, rate)

    def small_files(self, writers: int, low: int, high: int, files_per_writer: int, note: RunNote) -> SmallRun:
        directory = self.root / "small"
        directory.mkdir()
        job, measures = fio.small_files_job(writers, low, high, files_per_writer)
        job.options["directory"] = fio.escape_path(directory)
        read = (
            "files/s = the files in the directory after the run (ckplan counts them: fio counts no creates) × 1000 ÷ "
            "the longest jobs[].write.runtime (ms); ops/s = (3 × files + the sum of jobs[].write.total_ios) × 1000 ÷ "
            "the same runtime"
        )
        try:
            doc = self._fio(job, "the small-file phase", self._note(note, measures + ", in a fresh directory", read,
                                                                     count_files_in="small"))  # fmt: skip
            files = sum(1 for _ in os.scandir(directory))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        seconds = max(max(int(j["write"]["runtime"]) for j in doc["jobs"]) / 1000, 1e-3)
        ops = 3 * files + sum(int(j["write"]["total_ios"]) for j in doc["jobs"])  # create, fsync, close + writes
        host = socket.gethostname()
        return SmallRun({host: files / seconds}, {host: ops / seconds}, files, seconds)

    def latency(self, kind: Literal["fsync", "o_sync"], seconds: float, size: int, note: RunNote) -> Latency:
        job, measures, section = fio.latency_job(kind, size, seconds)
        job.options["directory"] = fio.escape_path(self.root)
        read = f"jobs[0].{section}: percentile['50.000000'], ['99.000000'], ['99.900000'], mean and N, in ns"
        doc = self._fio(job, f"the {kind} latency phase", self._note(note, measures, read))
        part, key = section.split(".")
        p50, p99, p999, mean, n = fio.percentiles_s(doc["jobs"][0][part], key)
        return Latency(p50_s=p50, p99_s=p99, p999_s=p999, mean_s=mean, samples=n)

    def write_files(self, nodes: list[list[FileToWrite]], path: str, run: int) -> tuple[float, int]:
        if run == 0:
            self.phase_ran("replay", "the plan's files written by ckplan's own writer, not fio")
        root = self.root / f"replay-{run}"
        written = [0]

        def on_bytes(n: int) -> None:
            written[0] += n
            self.progress.update(written[0], 0)

        try:
            seconds = replay.write_files(root, nodes[0], on_bytes, direct=path == "direct")
        except OSError as exc:
            raise replay.oserror_message(exc, "the replay") from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return seconds, sum(f.bytes for f in nodes[0])

    def save_files(self, files: list[FileToWrite], framework: str, runs: int) -> list[float]:
        from ckplan.savers.saver import files_by_rank, run_saves

        self.phase_ran("replay", "the plan's files written by the framework's saver, not fio; `ckplan validate` "
                       "times the same saves")  # fmt: skip
        root = self.root / "replay"
        try:
            walls, _ = run_saves(root, files_by_rank(files), framework, runs, "sync", what="the replay")
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return walls

    def others(self) -> list[str]:
        return [
            f"{s.path} (host {s.host}, pid {s.pid})"
            for s in scratch.scratch_dirs(self.root.parent, (scratch.SCRATCH_PREFIX,))
            if s.live and s.path != self.root
        ]

    def phase_ran(self, phase: str, why: str) -> None:
        jobfiles.other(phase, why)
