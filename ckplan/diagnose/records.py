"""Save records (ckplan/record.py) read back: each step's saves across ranks, their trend, the prediction beside
them, and the prediction's error at the job's own scale (`validate --record`).

Exact figures, no bounds: a record's times are the save call's own. A step's time is its slowest rank's (training
waits for it); a rank's time in a step is the sum of its lines there (Lightning writes last.ckpt and the epoch's
file at one step). A step's bytes: per path written, the largest "directory" count among its lines (the directory
only grows, and the rank that finished last saw it whole) or the sum of the "own files" counts; then summed over
paths.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from ckplan import __version__
from ckplan.diagnose.trend import Diagnosis
from ckplan.errors import InputError
from ckplan.planning.defaults import COLLECTIVE_TIMEOUT_S
from ckplan.planning.savetime import SaveTime
from ckplan.planning.scenario import collective_timeout_warning
from ckplan.profile import Spread, StorageProfile
from ckplan.readers import check_regular_file
from ckplan.record import FORMAT, SaveRecord
from ckplan.schema import Model
from ckplan.sizing.plan import CheckpointPlan

SNIFF_BYTES = 64 * 2**10  # a record line is ~500 bytes: the first line is inside this if the file is a record file
BYTES_OFF = 0.05  # recorded bytes this far from the plan's: the plan describes another save, and its bytes are off


class StepSaves(Model):
    step: int
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
    check_regular_file(path, "log")
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    first = head.lstrip().split(b"\n", 1)[0]
    try:
        line = json.loads(first)
    except ValueError:
        return False
    return isinstance(line, dict) and line.get("format") == FORMAT


def read_records(paths: list[Path]) -> tuple[list[SaveRecord], int]:
    """Every record in the files, streamed, and the bytes read; a line that is not a record is refused, naming it."""
    records: list[SaveRecord] = []
    read = 0
    for path in paths:
        check_regular_file(path, "record file")
        try:
            with open(path, "rb") as f:
                for number, raw in enumerate(f, 1):
                    read += len(raw)
                    if not raw.strip():
                        continue
                    try:
                        records.append(SaveRecord.model_validate_json(raw))
                    except ValidationError as exc:
                        err = exc.errors()[0]
                        where = ".".join(str(p) for p in err["loc"])
                        raise InputError(
                            f"{path}:{number}: not a {FORMAT} version 1 line: "
                            + (f"{where}: " if where else "")
                            + err["msg"]
                        ) from None
        except OSError as exc:
            raise InputError(f"cannot read record file {path}: {exc.strerror}") from None
    if not records:
        raise InputError(f"no save records in {', '.join(map(str, paths))}")
    return records, read


def by_step(records: list[SaveRecord]) -> list[StepSaves]:
    """Each step's saves across ranks (the module's docstring says how lines add up)."""
    steps: dict[int, list[SaveRecord]] = {}
    for r in records:
        steps.setdefault(r.step, []).append(r)
    out = []
    for step, lines in sorted(steps.items()):
        per_rank: dict[int, list[SaveRecord]] = {}
        for r in lines:
            per_rank.setdefault(r.rank, []).append(r)
        seconds = {rank: sum(r.seconds for r in rs) for rank, rs in per_rank.items()}
        blocking = {rank: sum(r.blocking_seconds for r in rs) for rank, rs in per_rank.items()}
        slowest = min(per_rank, key=lambda rank: (-seconds[rank], rank))
        by_path: dict[str, list[SaveRecord]] = {}
        for r in lines:
            by_path.setdefault(r.path, []).append(r)
        nbytes = files = 0
        for rs in by_path.values():
            if rs[0].counted == "directory":
                top = max(rs, key=lambda r: (r.bytes, r.files))
                nbytes, files = nbytes + top.bytes, files + top.files
            else:
                nbytes, files = nbytes + sum(r.bytes for r in rs), files + sum(r.files for r in rs)
        asynchronous = any(r.mode == "async" for r in lines)
        out.append(
            StepSaves(
                step=step,
                ranks=len(per_rank),
                world_size=max(r.world_size for r in lines),
                mode="async" if asynchronous else "sync",
                start=min(r.start for r in lines),
                end=max(r.end for r in lines),
                seconds=seconds[slowest],
                fastest_s=min(seconds.values()),
                median_s=statistics.median(seconds.values()),
                spread_s=seconds[slowest] - min(seconds.values()),
                slowest_rank=slowest,
                blocking_s=max(blocking.values()),
                persist_s=sum(r.persist_seconds or 0.0 for r in per_rank[slowest]) if asynchronous else None,
                bytes=nbytes,
                files=files,
            )
        )
    return out


def partly_recorded(records: list[SaveRecord], steps: list[StepSaves]) -> list[int]:
    """Steps saved into a shared directory that fewer ranks recorded than the world size. Every rank calls such a
    save (HF Trainer, DCP, DeepSpeed), so a rank is missing; a rank that writes no file of its own (Lightning's
    ranks but 0) has no line by design."""
    shared = {r.step for r in records if r.counted == "directory"}
    return [s.step for s in steps if s.step in shared and s.ranks < s.world_size]


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
    from ckplan.diagnose.extractors import Save
    from ckplan.diagnose.trend import diagnose

    records, read = read_records(paths)
    steps = by_step(records)
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
    notes = []
    if len(steps) >= 2:
        saves = [Save(seconds=s.seconds, at=s.end, label=f"step {s.step}", source="record") for s in steps]
        trend = diagnose(saves, [str(p) for p in paths], read, by, interval_s, predicted)
    else:
        notes.append("one step recorded: no trend (it needs two)")
    partial = partly_recorded(records, steps)
    if partial:
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
        lines=len(records),
        frameworks=sorted({r.framework for r in records}),
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

    records, _ = read_records(paths)
    steps = by_step(records)
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
    notes = []
    if partial := partly_recorded(records, steps):
        notes.append(f"{len(partial)} step(s) recorded by fewer ranks than the world size (first: step {partial[0]})")
    if len(timed) < len(steps):
        notes.append(f"{len(steps) - len(timed)} step(s) took 0 s and are left out of the errors")
    return RecordValidation(
        records=[str(p) for p in paths],
        storage=profile.name,
        framework=",".join(sorted({r.framework for r in records})),
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
