"""The local backend: a directory on a filesystem mounted here, measured with fio from this host; its replay runs
the framework's own saver (one process per rank) or ckplan's own writer (savers/raw.py)."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ckplan import filesystem, scratch
from ckplan.errors import InputError, oserror_message
from ckplan.probe import fio, jobfiles
from ckplan.probe.engine import CleanResult, Facts, FileToWrite, Progress, RunNote, SmallRun, TargetSpec
from ckplan.profile import TargetKind
from ckplan.savers import raw

if TYPE_CHECKING:
    from ckplan.savers.restore import NodeLoads

UNSIZED_DEFAULT_BYTES = 2**30  # what the probe may write on a filesystem that reports no size, unless --max-bytes


class LocalBackend:
    kind: TargetKind = "filesystem"

    def __init__(self, spec: TargetSpec):
        self.spec = spec
        self.path = Path(spec.path).expanduser()

    def prepare(self, spec: TargetSpec) -> Facts:
        filesystem.check_target(self.path)
        fio.check_ready(self.path.resolve(), spec.emit_jobs)
        mount = filesystem.mount_of(self.path, filesystem.parse_mounts(Path("/proc/self/mounts").read_text()))
        notes = []
        if (free := filesystem.free_bytes(self.path)) is None:
            free = 2 * (spec.max_bytes or UNSIZED_DEFAULT_BYTES)
            notes.append(
                f"the filesystem reports no size; the probe wrote at most {free // 2 / 1e9:.2f} GB (--max-bytes)"
            )
        if stale := scratch.leftovers(self.path):
            notes.append(
                f"found {len(stale)} scratch director{'y' if len(stale) == 1 else 'ies'} from a killed probe: "
                f"remove with `ckplan clean {self.path}`"
            )
        return Facts(
            target=str(self.path.resolve()),
            name=f"{socket.gethostname()}:{self.path}",
            fs_type=mount.fs_type,
            storage_class=mount.storage_class,
            shared=mount.storage_class in filesystem.SHARED_CLASSES,
            tool=fio.fio_version(),
            mount_point=mount.mount_point,
            mount_options=mount.options,
            free_bytes=free,
            notes=tuple(notes),
        )

    @contextlib.contextmanager
    def open(self, facts: Facts, progress: Progress) -> Iterator[LocalSession]:
        where, emit = f"the probe of {self.path.resolve()} on {socket.gethostname()}", self.spec.emit_jobs
        writer = jobfiles.JobWriter(emit, where, facts.tool, local_target=self.path.resolve()) if emit else None
        with scratch.ScratchDir(self.path) as area:
            if writer is not None:
                writer.scratch = fio.escape_path(area.path)
            try:
                session = LocalSession(area.path, progress, writer)
                session.check_direct_io()
                yield session
            except OSError as exc:  # ckplan's own file operations on the target (mkdir, job files) mid-run
                raise oserror_message(exc, "the probe") from None

    def clean(self, force: bool = False) -> CleanResult:
        """Remove the scratch directories killed probes left in the target; a live one is kept (another host's
        unless `force`)."""
        if not self.path.is_dir():
            raise InputError(f"{self.path} is not a directory")
        removed, why = [], {}
        for found in scratch.scratch_dirs(self.path):
            here = found.host in (None, socket.gethostname())  # a live one here is a probe running: left unnamed
            if not found.live or (force and not here):
                scratch.remove_tree(found.path)
                removed.append(str(found.path))
            elif not here:  # its heartbeat is fresh: a probe running on another host
                why[str(found.path)] = (
                    f"a probe on {found.host} (pid {found.pid}) rewrote its marker within the last "
                    f"{scratch.STALE_AFTER_S:.0f} s"
                )
        return CleanResult(target=str(self.path), removed=removed, kept=list(why), why=why)


class LocalSession(fio.FioSession):
    hosts = 1

    def __init__(self, root: Path, progress: Progress, writer: jobfiles.JobWriter | None):
        super().__init__(writer)
        self.root, self.progress = root, progress

    def run_job(self, job: fio.FioJob, what: str, note: RunNote, hosts: int = 0) -> dict:
        job.options.setdefault("directory", fio.escape_path(self.root))
        record = None if self.writer is None else functools.partial(self.writer.record, note=note)
        doc = fio.run_fio([job], self.root, what, on_status=self.progress.update, record=record)
        self.raw.append(doc)
        return doc

    def entries(self, doc: dict, jobname: str) -> list[tuple[str, dict]]:
        return [(socket.gethostname(), j) for j in doc["jobs"] if j.get("jobname") == jobname]

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
            small = self.note(note, measures + ", in a fresh directory", read, count_files_in="small")
            doc = self.run_job(job, "the small-file phase", small)
            files = sum(1 for _ in os.scandir(directory))
        finally:
            scratch.remove_tree(directory)
        return self.small_run(doc, job.name, {socket.gethostname(): files})

    def write_files(self, nodes: list[list[FileToWrite]], path: str, run: int) -> tuple[float, int]:
        if run == 0:
            self.phase_ran("replay", "the plan's files written by ckplan's own writer, not fio")
        root = self.root / f"replay-{run}"
        try:
            seconds = raw.write_files(root, nodes[0], lambda done: self.progress.update(done, 0), path == "direct")
        except OSError as exc:
            raise oserror_message(exc, "the replay") from None
        finally:
            scratch.remove_tree(root)
        return seconds, sum(f.bytes for f in nodes[0])

    def save_files(self, files: list[FileToWrite], framework: str, runs: int) -> list[float]:
        from ckplan.savers.saver import files_by_rank, run_saves

        self.phase_ran(
            "replay",
            "the plan's files written by the framework's saver, not fio; `ckplan validate` times the same saves",
        )
        root = self.root / "replay"
        scratch.remove_tree(root)
        # the last save stays for the read replay to load (the scratch area goes, with it, when the probe ends)
        walls, _ = run_saves(root, files_by_rank(files), framework, runs, "sync", what="the replay", keep_last=True)
        self.saved = root / f"save-{runs - 1}"
        return walls

    def load_files(self, loads: NodeLoads, runs: int) -> list[float]:
        from ckplan.savers.restore import load_saved

        self.phase_ran("read replay", "the replay's last save loaded by the framework's loaders, not fio")
        try:
            return load_saved(loads, self.saved, runs, "the read replay")
        finally:
            scratch.remove_tree(self.saved.parent)

    def others(self) -> list[str]:
        return self.others_in(self.root.parent, lambda path: path == self.root)
