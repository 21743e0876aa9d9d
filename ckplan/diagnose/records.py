"""Save records (ckplan/record.py) read back: each step's saves across ranks, their trend, the prediction beside
them, and the prediction's error at the job's own scale (`validate --record`).

Exact figures, no bounds: a record's times are the save call's own. A step's time is its slowest rank's (training
waits for it); a rank's time in a step is the sum of its lines there (Lightning writes last.ckpt and the epoch's
file at one step). A step's bytes: per path written, the largest "directory" count among its lines (the directory
only grows, and the rank that finished last saw it whole) or the sum of the "own files" counts; then summed over
paths.

Reading (read_records): a line at a time, each record stored in a temporary database keyed by the save it names
(step, rank, run, path), then folded a step at a time; memory holds one step's ranks and the steps' figures, not
the lines. A damaged line is skipped and named, a save seen twice counted once, each in a note.
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import ValidationError

from ckplan.diagnose.trend import Diagnosis
from ckplan.errors import EnvironmentProblem, InputError
from ckplan.planning.defaults import COLLECTIVE_TIMEOUT_S
from ckplan.planning.savetime import SaveTime
from ckplan.planning.scenario import collective_timeout_warning
from ckplan.profile import Spread, StorageProfile
from ckplan.readers import open_stream, validation_message
from ckplan.record import FORMAT, SaveRecord
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan
from ckplan.version import __version__

SNIFF_BYTES = 64 * 2**10  # a record line is ~500 bytes: the first line is inside this if the file is a record file
MAX_LINE = 2**20  # a longer line is no record: it is skipped, read past in pieces of this size, never held whole
NAMED = 5  # damaged lines named one by one in the notes; the rest are counted
BATCH = 10_000  # records stored at a time
CACHE_KIB = 8 * 2**10  # the most of the records' temporary database held in memory
BYTES_OFF = 0.05  # recorded bytes this far from the plan's: the plan describes another save, and its bytes are off


class StepSaves(Model):
    step: int
    run: str | None = None  # the job that saved it: a job restarted from an earlier step saves a step again
    ranks: int  # ranks that recorded this step
    world_size: int
    mode: Literal["sync", "async"]
    start: float  # the first rank's start, epoch seconds
    end: float  # the last rank's end
    seconds: float  # the slowest rank's save (async: to the end of its persist)
    fastest_s: float
    median_s: float
    spread_s: float  # slowest − fastest rank
    slowest_rank: int
    blocking_s: float  # the longest a rank was blocked (sync: its whole save)
    persist_s: float | None = None  # async: the slowest rank's persist
    bytes: int
    files: int
    predicted_s: float | None = None
    error_percent: float | None = None  # (predicted − recorded) ÷ recorded × 100


class RecordDiagnosis(Model):
    kind: Literal["ckplan.record-diagnosis"] = "ckplan.record-diagnosis"
    ckplan_version: str = __version__
    records: list[str]
    lines: int
    frameworks: list[str]
    steps: list[StepSaves]
    slowest_rank: int  # the rank slowest in the most steps (the lower rank on a tie)
    slowest_rank_steps: int  # in how many steps it was
    trend: Diagnosis | None  # None with one step recorded
    predicted_s: float | None = None  # the sync save (async: the persist) ckplan predicts for the plan
    predicted_stall_s: float | None = None  # async: the blocking part ckplan predicts
    collective_timeout_s: float
    timeout_warning: str | None = None
    notes: list[str] = []


class RecordValidation(Model):
    kind: Literal["ckplan.record-validation"] = "ckplan.record-validation"
    ckplan_version: str = __version__
    records: list[str]
    storage: str
    framework: str
    mode: Literal["sync", "async"]
    steps: int
    world_size: int
    plan_gpus: int
    predicted_seconds: float
    prediction: SaveTime
    measured: Spread  # the steps' saves (slowest rank each)
    error_percent: float  # (predicted − measured median) ÷ measured median × 100
    errors_percent: Spread  # each step's error
    measured_range_percent: float  # (max − min) ÷ median of the steps' saves: the job's own noise
    within_measured_range: bool
    recorded_bytes: int  # the median step's bytes
    plan_bytes: int
    bytes_error_percent: float  # (plan − recorded) ÷ recorded × 100
    measured_blocking: Spread | None = None  # async
    predicted_stall_seconds: float | None = None  # async: the scenario's blocking part
    stall_error_percent: float | None = None
    off: Literal["bytes", "scale", "blocking", "model", "none"]  # the term named in the diagnosis
    diagnosis: str
    notes: list[str] = []


def is_record_file(path: Path) -> bool:
    """The file's first line is a save record's (its format field), whatever the file is called."""
    try:
        with open_stream(path, "log") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    first = head.lstrip().split(b"\n", 1)[0]
    try:
        line = json.loads(first)
    except ValueError:
        return False
    return isinstance(line, dict) and line.get("format") == FORMAT


class _Store:
    """The records read so far, in a private temporary SQLite database: on disk, with at most CACHE_KIB of its
    pages in memory, so memory stays bounded however many lines are read (SQLite unlinks the file as it opens it,
    so nothing is left behind whatever ends ckplan). A save is one (step, run, rank, path), the table's key: a
    record of a save already stored is ignored, the first one kept."""

    def __init__(self) -> None:
        self.db = sqlite3.connect("")
        for pragma in (f"cache_size = -{CACHE_KIB}", "journal_mode = OFF", "synchronous = OFF"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute(
            "CREATE TABLE saves (step INTEGER NOT NULL, run TEXT NOT NULL, rank INTEGER NOT NULL, path TEXT NOT NULL,"
            " world_size INTEGER, asynchronous INTEGER, start REAL, end_ REAL, seconds REAL, blocking REAL,"
            " persist REAL, directory INTEGER, bytes INTEGER, files INTEGER, PRIMARY KEY (step, run, rank, path))"
            " WITHOUT ROWID"
        )
        self.pending: list[tuple] = []
        self.added = self.stored = 0
        self.frameworks: set[str] = set()

    def add(self, r: SaveRecord) -> None:
        self.pending.append(
            (r.step, r.run or "", r.rank, r.path, r.world_size, r.mode == "async", r.start, r.end, r.seconds,
             r.blocking_seconds, r.persist_seconds or 0.0, r.counted == "directory", r.bytes, r.files)
        )  # fmt: skip
        self.frameworks.add(r.framework)
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        cursor = self.db.executemany(f"INSERT OR IGNORE INTO saves VALUES ({', '.join('?' * 14)})", self.pending)
        self.stored += cursor.rowcount
        self.added += len(self.pending)
        self.pending.clear()

    def steps(self) -> tuple[list[StepSaves], list[int]]:
        """Each step's saves across ranks (each run's apart), in step order, folded a step at a time from the table
        in its key's order; and the steps recorded by fewer ranks than their world size (partly_recorded)."""
        self.flush()
        rows = self.db.execute(
            "SELECT step, run, rank, path, world_size, asynchronous, start, end_, seconds, blocking, persist,"
            " directory, bytes, files FROM saves ORDER BY step, run, rank"
        )
        out: list[StepSaves] = []
        partial: list[int] = []
        for (step, run), lines in itertools.groupby(rows, key=lambda row: row[:2]):
            saves, shared = _fold(step, run or None, lines)
            out.append(saves)
            if shared and saves.ranks < saves.world_size:
                partial.append(step)
        return out, partial


def _fold(step: int, run: str | None, rows: Iterable[tuple]) -> tuple[StepSaves, bool]:
    """One step's saves by one run (the module's docstring says how lines add up), and whether any line counted a
    shared directory."""
    ranks: dict[int, list[float]] = {}  # rank → [seconds, blocking, persist], summed over its lines
    paths: dict[str, list[int]] = {}  # path → [counted "directory" (its first line's), bytes, files]
    world = 0
    asynchronous = shared = False
    start, end = math.inf, -math.inf
    for row in rows:
        rank, path, world_size, is_async, begun, ended, seconds, blocking, persist, directory, nbytes, files = row[2:]
        times = ranks.setdefault(rank, [0.0, 0.0, 0.0])
        times[0] += seconds
        times[1] += blocking
        times[2] += persist
        counts = paths.get(path)
        if counts is None:
            paths[path] = [directory, nbytes, files]
        elif counts[0]:  # the directory only grows: the largest count saw it whole
            counts[1:] = max(counts[1:], [nbytes, files])
        else:
            counts[1] += nbytes
            counts[2] += files
        world = max(world, world_size)
        asynchronous = asynchronous or bool(is_async)
        shared = shared or bool(directory)
        start, end = min(start, begun), max(end, ended)
    seconds_by_rank = {rank: t[0] for rank, t in ranks.items()}
    slowest = min(seconds_by_rank, key=lambda rank: (-seconds_by_rank[rank], rank))
    fastest = min(seconds_by_rank.values())
    saves = StepSaves(
        step=step,
        run=run,
        ranks=len(ranks),
        world_size=world,
        mode="async" if asynchronous else "sync",
        start=start,
        end=end,
        seconds=seconds_by_rank[slowest],
        fastest_s=fastest,
        median_s=statistics.median(seconds_by_rank.values()),
        spread_s=seconds_by_rank[slowest] - fastest,
        slowest_rank=slowest,
        blocking_s=max(t[1] for t in ranks.values()),
        persist_s=ranks[slowest][2] if asynchronous else None,
        bytes=sum(c[1] for c in paths.values()),
        files=sum(c[2] for c in paths.values()),
    )
    return saves, shared


@dataclass
class Records:
    """What a set of record files holds, folded into steps."""

    steps: list[StepSaves]
    lines: int  # records counted (a save seen again is not)
    frameworks: list[str]
    partly_recorded: list[int]  # steps saved into a shared directory that fewer ranks recorded than the world size
    read: int  # bytes read
    notes: list[str]


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(bytes, the line) for each line of the file, the line None where it is longer than MAX_LINE: the rest of
    such a line is read past in pieces of MAX_LINE, never held whole."""
    while raw := f.readline(MAX_LINE + 1):
        if len(raw) <= MAX_LINE or raw.endswith(b"\n"):
            yield len(raw), raw
            continue
        size = len(raw)
        while (rest := f.readline(MAX_LINE)) and not rest.endswith(b"\n"):
            size += len(rest)
        yield size + len(rest), None


def by_step(records: Iterable[SaveRecord]) -> list[StepSaves]:
    """Each step's saves across ranks, a save seen twice counted once."""
    store = _Store()
    try:
        for r in records:
            store.add(r)
        return store.steps()[0]
    finally:
        store.db.close()


def read_records(paths: list[Path]) -> Records:
    """The records in the files, streamed. A damaged line (not JSON, not a record, longer than MAX_LINE: the half
    line a full disk leaves, garbage) is skipped, and the first NAMED of them named in a note, the rest counted; a
    save seen again (a line duplicated, a file given twice) is counted once, and the duplicates counted in a note.
    Files with no record at all are refused, naming their first damaged line."""
    store = _Store()
    read = skipped = 0
    named: list[str] = []  # the first NAMED damaged lines, each as where and why
    try:
        for path in paths:
            try:
                with open_stream(path, "record file") as f:
                    for number, (size, raw) in enumerate(_lines(f), 1):
                        read += size
                        if raw is None:
                            why = f"longer than {MAX_LINE:,} bytes"
                        elif not raw.strip():
                            continue
                        else:
                            try:
                                store.add(SaveRecord.model_validate_json(raw))
                                continue
                            except ValidationError as exc:
                                why = validation_message(exc)
                        skipped += 1
                        if len(named) < NAMED:
                            named.append(f"{path}:{number}: not a {FORMAT} version 1 line: {why}")
            except OSError as exc:
                raise InputError(f"cannot read record file {path}: {exc.strerror}") from None
        steps, partial = store.steps()
    except sqlite3.Error as exc:
        raise EnvironmentProblem(
            f"reading the records needs temporary space ($SQLITE_TMPDIR, else $TMPDIR, else /var/tmp or /tmp), "
            f"and SQLite failed there: {exc}"
        ) from None
    finally:
        store.db.close()
    if not store.stored:
        files = ", ".join(map(str, paths))
        if not named:
            raise InputError(f"no save records in {files}")
        others = f" (and {skipped - 1} more damaged lines)" if skipped > 1 else ""
        raise InputError(f"no save records in {files}: {named[0]}{others}")
    notes = [f"skipped {line}" for line in named]
    if skipped > NAMED:
        notes.append(f"and {skipped - NAMED:,} more damaged lines skipped")
    if duplicates := store.added - store.stored:
        notes.append(
            f"{duplicates:,} duplicate record(s) dropped: the same run, rank, step and path seen again (a line "
            "repeated, or a file given twice)"
        )
    return Records(steps, store.stored, sorted(store.frameworks), partial, read, notes)


def predictions(
    plan: CheckpointPlan, profile: StorageProfile, mode: Literal["sync", "async"]
) -> tuple[float, float, SaveTime | None]:
    """(save or persist seconds, blocking seconds, the save model) ckplan predicts for the plan under the default
    policy, in the records' mode."""
    from ckplan.planning.policy import Policy
    from ckplan.planning.scenario import async_scenario, sync_scenario

    scenario = (async_scenario if mode == "async" else sync_scenario)(plan, profile, Policy())
    return scenario.save_seconds, scenario.stall_seconds, scenario.save_model


def diagnose_records(
    paths: list[Path],
    by: str = "save number",
    interval_s: float | None = None,
    plan: CheckpointPlan | None = None,
    profile: StorageProfile | None = None,
    collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
) -> RecordDiagnosis:
    from ckplan.diagnose.trend import diagnose
    from ckplan.frameworks.logs import Save

    records = read_records(paths)
    steps = records.steps
    mode: Literal["sync", "async"] = "async" if any(s.mode == "async" for s in steps) else "sync"
    predicted = stall = None
    if plan is not None and profile is not None:
        predicted, stall, _ = predictions(plan, profile, mode)
        steps = [
            s.model_copy(update={"predicted_s": predicted, "error_percent": (predicted - s.seconds) / s.seconds * 100})
            if s.seconds > 0
            else s.model_copy(update={"predicted_s": predicted})
            for s in steps
        ]
    trend = None
    notes = records.notes
    if len(steps) >= 2:
        several = len({s.run for s in steps}) > 1
        saves = [
            Save(seconds=s.seconds, at=s.end, label=f"step {s.step}" + (f" ({s.run})" * several), source="record")
            for s in steps
        ]
        trend = diagnose(saves, [str(p) for p in paths], records.read, by, interval_s, predicted)
    else:
        notes.append("one step recorded: no trend (it needs two)")
    if partial := records.partly_recorded:
        notes.append(
            f"{len(partial)} step(s) recorded by fewer ranks than the world size (first: step {partial[0]}): the "
            "others' lines are missing (another record file, or ranks without the recorder)"
        )
    slowest_counts: dict[int, int] = {}
    for s in steps:
        slowest_counts[s.slowest_rank] = slowest_counts.get(s.slowest_rank, 0) + 1
    slowest = min(slowest_counts, key=lambda rank: (-slowest_counts[rank], rank))
    busiest = max(steps, key=lambda s: s.blocking_s)
    warning = collective_timeout_warning(
        busiest.blocking_s,
        collective_timeout_s,
        f"at step {busiest.step} a rank's {'blocking part of its async' if mode == 'async' else 'sync'} save",
    )
    return RecordDiagnosis(
        records=[str(p) for p in paths],
        lines=records.lines,
        frameworks=records.frameworks,
        steps=steps,
        slowest_rank=slowest,
        slowest_rank_steps=slowest_counts[slowest],
        trend=trend,
        predicted_s=predicted,
        predicted_stall_s=stall if mode == "async" else None,
        collective_timeout_s=collective_timeout_s,
        timeout_warning=warning,
        notes=notes,
    )


def validate_records(paths: list[Path], plan: CheckpointPlan, profile: StorageProfile) -> RecordValidation:
    """The prediction against the job's own saves: its error (median and spread over the steps), and the term that
    was off: the bytes (the plan is not this save), the scale (another world size), the blocking part (async), or
    the save model's terms (ckplan.validate.model.diagnose, with the job's own noise)."""
    from ckplan.validate.model import LARGE_ERROR_PERCENT, diagnose

    records = read_records(paths)
    steps = records.steps
    timed = [s for s in steps if s.seconds > 0]
    if not timed:
        raise InputError("every recorded save took 0 s: nothing to compare a prediction with")
    mode: Literal["sync", "async"] = "async" if any(s.mode == "async" for s in steps) else "sync"
    predicted, stall, model = predictions(plan, profile, mode)
    assert model is not None  # the default policy gives no --save-time
    measured = Spread.of([s.seconds for s in timed])
    errors = Spread.of([(predicted - s.seconds) / s.seconds * 100 for s in timed])
    error = (predicted - measured.median) / measured.median * 100
    recorded_bytes = int(statistics.median_low([s.bytes for s in steps]))
    if recorded_bytes == 0:
        raise InputError("the records count no bytes written: their path is not where the saves wrote")
    bytes_error = (plan.total_bytes - recorded_bytes) / recorded_bytes * 100
    world = max(s.world_size for s in steps)
    blocking = Spread.of([s.blocking_s for s in steps]) if mode == "async" else None
    stall_error = (stall - blocking.median) / blocking.median * 100 if blocking and blocking.median > 0 else None
    off: Literal["bytes", "scale", "blocking", "model", "none"]
    if world != plan.setup.gpus:
        off = "scale"
        text = (
            f"scale: the records come from {world} ranks and the plan has {plan.setup.gpus} GPUs; size the plan "
            "for the job's world size (`ckplan size … --gpus`) to compare like with like"
        )
    elif abs(bytes_error) > BYTES_OFF * 100:
        off = "bytes"
        text = (
            f"bytes: the plan writes {plan.total_bytes / 1e9:.4g} GB and the job wrote {recorded_bytes / 1e9:.4g} GB "
            f"a save ({bytes_error:+.0f}%): the plan does not describe this save (model, optimizer, precision, "
            "framework or sharding differ); fix the plan first"
        )
    elif stall_error is not None and blocking is not None and not blocking.contains(stall) and abs(stall_error) > 50:
        off = "blocking"
        text = (
            f"blocking: the scenario's async stall is {stall:.3g} s (the device→host snapshot) and the ranks were "
            f"blocked {blocking.median:.3g} s ({stall_error:+.0f}%); the persist is compared with the save model"
        )
    else:
        busiest = plan.busiest_node
        node_bytes = int(recorded_bytes * busiest.bytes / plan.total_bytes) if plan.total_bytes else recorded_bytes
        text = diagnose(model, measured, node_bytes, busiest.files)
        off = "none" if measured.contains(predicted) or abs(error) <= LARGE_ERROR_PERCENT else "model"
    notes = records.notes
    if partial := records.partly_recorded:
        notes.append(f"{len(partial)} step(s) recorded by fewer ranks than the world size (first: step {partial[0]})")
    if len(timed) < len(steps):
        notes.append(f"{len(steps) - len(timed)} step(s) took 0 s and are left out of the errors")
    return RecordValidation(
        records=[str(p) for p in paths],
        storage=profile.name,
        framework=",".join(records.frameworks),
        mode=mode,
        steps=len(steps),
        world_size=world,
        plan_gpus=plan.setup.gpus,
        predicted_seconds=predicted,
        prediction=model,
        measured=measured,
        error_percent=error,
        errors_percent=errors,
        measured_range_percent=measured.relative_range * 100,
        within_measured_range=measured.contains(predicted),
        recorded_bytes=recorded_bytes,
        plan_bytes=plan.total_bytes,
        bytes_error_percent=bytes_error,
        measured_blocking=blocking,
        predicted_stall_seconds=stall if mode == "async" else None,
        stall_error_percent=stall_error,
        off=off,
        diagnosis=text,
        notes=notes,
    )
