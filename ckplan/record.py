"""Save records: the training job times its own saves, one JSON line per save per rank.

A record file holds one `SaveRecord` per line (format "ckplan.save-record", version 1; README "Save records").
`ckplan diagnose RECORD.jsonl` and `ckplan validate --record` read it. This module imports no framework: the
adapters live in ckplan/recorders/ and are imported only when one is named (`from ckplan.record import
TrainerRecorder` imports transformers then, `import ckplan.record` never does).

Writing: every line is one os.write of the whole line on a file descriptor opened with O_APPEND, so the ranks of a
job can share one record file on a local or POSIX-coherent file system (each write lands whole at the end). NFS
does not make O_APPEND atomic across clients: there, put `{rank}` in the path (`saves-{rank}.jsonl`) for one file
per rank, and give diagnose all of them.

What a line counts (bytes, files): read from disk after this rank's save (for an async save, after its persist).
- counted "directory" (HF Trainer, DCP, DeepSpeed: every rank writes into one directory): the save's whole
  directory as this rank saw it then. A directory only grows during a save, and the rank that finished last saw
  every other rank's files complete, so the step's bytes are the largest count among its lines (diagnose takes
  that; no clock comparison between hosts is needed).
- counted "own files" (torch.save, Lightning's CheckpointIO: a rank writes files of its own): the files this rank's
  call wrote; the step's bytes are the sum over its lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ckplan.schema import Bytes, Finite, Int, Model, Seconds
from ckplan.units import MAX_GPUS

FORMAT: Literal["ckplan.save-record"] = "ckplan.save-record"
VERSION: Literal[1] = 1
Framework = Literal["hf", "accelerate", "lightning", "dcp", "deepspeed", "torch.save", "other"]
Counted = Literal["directory", "own files"]
# the rounding a JSON float of epoch seconds allows between `seconds` and end − start (doubles near 1.8e9 s are
# exact to ~0.24 µs)
CONSISTENCY_S = 1e-5

# adapter name → module under ckplan.recorders, and its name there
ADAPTERS = {
    "TrainerRecorder": ("hf", "TrainerRecorder"),
    "RecordingCheckpointIO": ("lightning", "RecordingCheckpointIO"),
    "dcp_save": ("dcp", "save"),
    "dcp_async_save": ("dcp", "async_save"),
    "record_deepspeed": ("deepspeed", "record_deepspeed"),
    "record_accelerate": ("accelerate", "record_accelerate"),
    "torch_save": ("torch_save", "save"),
}


class RecordDropped(UserWarning):
    """A save's record was not written; the save itself went on."""


# the reasons already warned about in this process: a training loop saves often, and one line per reason is enough
_warned: set[str] = set()


def _drop(reason: str) -> None:
    if reason in _warned:
        return
    _warned.add(reason)
    message = f"ckplan.record: record dropped: {reason}"
    try:
        warnings.warn(message, RecordDropped, stacklevel=4)
    except Exception:  # a job run with -W error turns warnings into exceptions: log it instead of raising
        logging.getLogger("ckplan.record").warning(message)


def _reason(exc: Exception) -> str:
    """One line saying why a record was dropped: a model's first refusal, else the exception's first line."""
    if isinstance(exc, ValidationError):
        from ckplan.readers import validation_message

        text = validation_message(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return (text.splitlines() or [type(exc).__name__])[0][:300]


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """An adapter's own work around a save (finding what was saved, its rank), dropped with a RecordDropped
    warning if it raises: the save has happened, and the training job goes on whatever the recorder meets."""
    try:
        yield
    except Exception as exc:
        _drop(_reason(exc))


class SaveRecord(Model):
    """One rank's one save. Times are wall-clock epoch seconds (time.time()) on the rank's host."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    format: Literal["ckplan.save-record"] = FORMAT
    version: Literal[1] = VERSION
    framework: Framework
    step: Annotated[Int, Field(ge=0)]
    rank: Annotated[Int, Field(ge=0, lt=MAX_GPUS)]
    world_size: Annotated[Int, Field(ge=1, le=MAX_GPUS)]
    host: Annotated[str, Field(min_length=1, max_length=255)]
    # the job that saved (CKPLAN_RUN_ID, else TORCHELASTIC_RUN_ID, else SLURM_JOB_ID): with rank, step and path it
    # names one save, so that the same record read twice is counted once. None: a record from before it was kept
    run: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    mode: Literal["sync", "async"]
    start: Annotated[Finite, Field(ge=0)]  # the save call began
    end: Annotated[Finite, Field(ge=0)]  # sync: the call returned; async: the background persist finished
    seconds: Seconds  # end − start
    blocking_seconds: Seconds  # the part training waited for: the whole save when sync, the call's return when async
    persist_seconds: Seconds | None = None  # async: from the call's return to the end of the persist
    path: Annotated[str, Field(min_length=1)]  # the directory (or this rank's file) the save wrote
    counted: Counted
    bytes: Bytes
    files: Annotated[Int, Field(ge=0)]

    @model_validator(mode="after")
    def _consistent(self) -> SaveRecord:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        if abs(self.seconds - (self.end - self.start)) > CONSISTENCY_S:
            raise ValueError(f"seconds {self.seconds} is not end − start ({self.end - self.start})")
        if self.mode == "sync":
            if self.persist_seconds is not None or abs(self.blocking_seconds - self.seconds) > CONSISTENCY_S:
                raise ValueError("a sync save blocks for its whole time and has no persist_seconds")
        elif self.persist_seconds is None or (
            abs(self.blocking_seconds + self.persist_seconds - self.seconds) > CONSISTENCY_S
        ):
            raise ValueError("an async save's blocking_seconds and persist_seconds add up to its seconds")
        return self


def rank_and_world() -> tuple[int, int]:
    """This process's rank and world size: torch.distributed's where it is initialised (it is imported only if the
    job already imported it), else torchrun's RANK and WORLD_SIZE, else a single process."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return _whole_env("RANK", "0"), _whole_env("WORLD_SIZE", "1")


def _whole_env(name: str, default: str) -> int:
    value = os.environ.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value[:40]!r} is not a whole number") from None


def run_id() -> str | None:
    """The job's id: CKPLAN_RUN_ID, else TORCHELASTIC_RUN_ID, else SLURM_JOB_ID; one that is empty or longer than
    a record keeps is skipped, so that a bad id costs the key, never the record."""
    for name in ("CKPLAN_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        value = os.environ.get(name, "")
        if 0 < len(value) <= 255:
            return value
    return None


def count(paths: list[str]) -> tuple[int, int]:
    """(bytes, files) of the regular files at or under `paths`; symbolic links are not followed."""
    total = files = 0
    for top in paths:
        found = [top] if not os.path.isdir(top) or os.path.islink(top) else []
        for root, _, names in os.walk(top):
            found += [os.path.join(root, name) for name in names]
        for path in found:
            with contextlib.suppress(FileNotFoundError):  # removed while we walked
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode):
                    total, files = total + st.st_size, files + 1
    return total, files


def record_path(template: str | os.PathLike[str], rank: int) -> str:
    """The record file for `rank`: `{rank}` and `{host}` in the path are filled in."""
    return os.fspath(template).replace("{rank}", str(rank)).replace("{host}", socket.gethostname())


def append(path: str, record: SaveRecord) -> None:
    """Append one line in one write on an O_APPEND descriptor; raises OSError where it cannot (write() drops the
    record then). Never waits on the file: it is opened non-blocking, without following a symlink, and refused
    unless it is a regular file (a FIFO with no reader, a device or a directory is not a record file)."""
    line = (record.model_dump_json() + "\n").encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
        except OSError:
            written = -1
        if written != len(line):
            # a short or failed write (a full disk) would leave half a line for the next append to be glued onto: cut
            # the file back to its size before. (Reading the last byte back to prefix a newline instead races with
            # other ranks' appends in flight; the cut can lose a line another rank appended in between, on a disk
            # that is full anyway)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            # one message whatever the byte counts, so that the warning is given once per file, not once per line
            raise OSError(f"a short write to {path} (the disk is full or the write failed): the part written was cut")
    finally:
        os.close(fd)


@dataclass
class Timing:
    """One save's times: the call's start, its return, and (async) the persist's end. The start is wall-clock
    (epoch seconds, comparable across hosts); every later time is the start plus the monotonic clock's elapsed
    seconds, so that a wall clock stepped back or forward during the save (NTP, a VM resumed) changes no duration."""

    start: float = field(default_factory=time.time)
    returned: float | None = None
    _started: float = field(default_factory=time.monotonic, repr=False)

    def now(self) -> float:
        """This instant on the save's clock: start + monotonic seconds since."""
        return self.start + (time.monotonic() - self._started)

    def done(self) -> None:
        self.returned = self.now()


def write(
    to: str | os.PathLike[str],
    timing: Timing,
    *,
    framework: Framework,
    step: int,
    paths: list[str],
    counted: Counted,
    persisted: float | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> SaveRecord | None:
    """Count `paths` now and append the save's line; `persisted` (the persist's end) makes it an async save's.
    Never raises: a record that cannot be made or written is dropped with one RecordDropped warning per reason."""
    try:
        return _write(to, timing, framework, step, paths, counted, persisted, rank, world_size)
    except Exception as exc:  # the recorder runs inside the training job: a lost record must not stop it
        _drop(_reason(exc))
        return None


def _write(
    to: str | os.PathLike[str],
    timing: Timing,
    framework: Framework,
    step: int,
    paths: list[str],
    counted: Counted,
    persisted: float | None,
    rank: int | None,
    world_size: int | None,
) -> SaveRecord:
    assert timing.returned is not None, "the save's call has not returned"
    if rank is None or world_size is None:
        rank, world_size = rank_and_world()
    end = persisted if persisted is not None else timing.returned
    nbytes, files = count(paths)
    record = SaveRecord(
        framework=framework,
        step=step,
        rank=rank,
        world_size=world_size,
        host=socket.gethostname(),
        run=run_id(),
        mode="sync" if persisted is None else "async",
        start=timing.start,
        end=end,
        seconds=end - timing.start,
        blocking_seconds=timing.returned - timing.start,
        persist_seconds=None if persisted is None else persisted - timing.returned,
        path=paths[0],
        counted=counted,
        bytes=nbytes,
        files=files,
    )
    append(record_path(to, rank), record)
    return record


@contextlib.contextmanager
def record_save(
    to: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    framework: Framework,
    step: int,
    counted: Counted = "directory",
) -> Iterator[Timing]:
    """Time the synchronous save inside the block and append its line to `to` when it ends; `path` is what it wrote
    (a directory, or this rank's file with counted="own files"). A save that raises leaves no line."""
    timing = Timing()
    yield timing
    timing.done()
    write(to, timing, framework=framework, step=step, paths=[os.fspath(path)], counted=counted)


def __getattr__(name: str) -> Any:
    """The adapters (ADAPTERS), each imported with its framework only when named: `from ckplan.record import
    TrainerRecorder` imports transformers then. They are typed in their modules (ckplan.recorders.*)."""
    if name not in ADAPTERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = ADAPTERS[name]
    return getattr(importlib.import_module(f"ckplan.recorders.{module}"), attr)
