"""Extract checkpoint save durations from training logs, streaming, in bounded memory.

Built-in patterns, one per framework, from the strings the frameworks print
(checked against their source; samples in tests/fixtures/logs):
- torchtitan (torchtitan/components/checkpoint.py):
  "Finished saving the checkpoint (or staging if async is enabled)in 12.34 seconds."
- Megatron-LM (megatron/training/checkpointing.py, timers.py): after
  "successfully saved checkpoint from iteration N to PATH", the timer block
  "save-checkpoint ......: (min, max)" in ms; the max is the save.
- DeepSpeed (runtime/engine.py, torch_checkpoint_engine.py), timestamps
  "[YYYY-mm-dd HH:MM:SS,mmm]": from "[Torch] Checkpoint TAG is about to be saved!"
  to the last "[Torch] Checkpoint TAG is ready now!".
- Hugging Face Trainer ("[INFO|trainer.py:N] YYYY-mm-dd HH:MM:SS,mmm >> ..."):
  from "Saving model checkpoint to DIR" to the last timestamped line that names
  DIR. Trainer prints no end marker, so this is a lower bound.
- PyTorch Lightning (ModelCheckpoint, verbose): "... saving model to 'PATH' ..."
  lines carry no duration; with a timestamped log format the save runs until
  the next timestamped line, an upper bound.
A user pattern (--pattern) has a named group `duration` (seconds) or groups
`start` and `end` (timestamps).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ckplan.errors import InputError
from ckplan.readers import check_regular_file

TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)?)")


@dataclass(frozen=True)
class Save:
    seconds: float
    at: float | None  # when the save ended, epoch seconds, if the log has timestamps
    label: str  # step, iteration or path
    source: str  # which pattern found it


def parse_time(text: str) -> float:
    text = text.replace("T", " ").replace(",", ".")
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        raise InputError(f"cannot read the timestamp {text!r}") from None


def _stamp(line: str) -> float | None:
    m = TIMESTAMP.search(line)
    return parse_time(m.group(1)) if m else None


class Extractor:
    """Consumes lines one at a time and yields saves as they complete."""

    name = "base"

    def feed(self, line: str) -> Iterator[Save]:
        raise NotImplementedError

    def finish(self) -> Iterator[Save]:
        return iter(())


class Torchtitan(Extractor):
    name = "torchtitan"
    pattern = re.compile(r"Finished saving the checkpoint(?: \(or staging if async is enabled\))?\s*in ([\d.]+) seconds")

    def __init__(self):
        self.n = 0

    def feed(self, line):
        if "Finished saving the checkpoint" in line and (m := self.pattern.search(line)):
            self.n += 1
            yield Save(float(m.group(1)), _stamp(line), f"save {self.n}", self.name)


class Megatron(Extractor):
    name = "megatron"
    saved = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")
    timer = re.compile(r"save-checkpoint \.*: (?:\(([\d.]+), ([\d.]+)\)|([\d.]+))")

    def __init__(self):
        self.iteration: str | None = None
        self.at: float | None = None

    def feed(self, line):
        if "successfully saved checkpoint" in line and (m := self.saved.search(line)):
            self.iteration, self.at = m.group(1), _stamp(line)
        if "save-checkpoint" in line and (m := self.timer.search(line)):
            ms = float(m.group(2) or m.group(3))
            yield Save(ms / 1000, self.at, f"iteration {self.iteration or '?'}", self.name)
            self.iteration = None


class DeepSpeed(Extractor):
    name = "deepspeed"
    start = re.compile(r"\[Torch\] Checkpoint (\S+) is about to be saved!")
    ready = re.compile(r"\[Torch\] Checkpoint (\S+) is ready now!")

    def __init__(self):
        self.open: dict[str, tuple[float, float]] = {}  # tag -> (start, last ready)

    def feed(self, line):
        if "[Torch] Checkpoint" not in line:
            return
        if (m := self.start.search(line)) and (t := _stamp(line)) is not None:
            yield from self._close_others(m.group(1))
            self.open[m.group(1)] = (t, t)
        elif (m := self.ready.search(line)) and m.group(1) in self.open and (t := _stamp(line)) is not None:
            self.open[m.group(1)] = (self.open[m.group(1)][0], t)

    def _close_others(self, keep: str):
        for tag in [t for t in self.open if t != keep]:
            start, end = self.open.pop(tag)
            if end > start:
                yield Save(end - start, end, tag, self.name)

    def finish(self):
        yield from self._close_others("")


class HfTrainer(Extractor):
    name = "hf"
    start = re.compile(r"Saving model checkpoint to (\S+)")

    def __init__(self):
        self.dir: str | None = None
        self.begin = self.last = 0.0

    def feed(self, line):
        if "Saving model checkpoint to" in line and (m := self.start.search(line)):
            yield from self.finish()
            t = _stamp(line)
            if t is not None:
                self.dir, self.begin, self.last = m.group(1).rstrip("/."), t, t
        elif self.dir and self.dir in line and (t := _stamp(line)) is not None:
            self.last = t

    def finish(self):
        if self.dir and self.last > self.begin:
            yield Save(self.last - self.begin, self.last, self.dir.rsplit("/", 1)[-1], self.name)
        self.dir = None


class Lightning(Extractor):
    name = "lightning"
    start = re.compile(r"saving model to '([^']+)'")

    def __init__(self):
        self.path: str | None = None
        self.begin = 0.0

    def feed(self, line):
        if self.path and (t := _stamp(line)) is not None and t > self.begin:
            yield Save(t - self.begin, t, self.path.rsplit("/", 1)[-1], self.name)
            self.path = None
        if "saving model to" in line and (m := self.start.search(line)) and (t := _stamp(line)) is not None:
            self.path, self.begin = m.group(1), t


class Custom(Extractor):
    name = "custom"

    def __init__(self, pattern: str):
        try:
            self.regex = re.compile(pattern)
        except re.error as exc:
            raise InputError(f"--pattern is not a valid regular expression: {exc}") from None
        groups = set(self.regex.groupindex)
        if "duration" not in groups and not {"start", "end"} <= groups:
            raise InputError("--pattern needs a named group (?P<duration>…) in seconds, or (?P<start>…) and (?P<end>…) timestamps")
        self.n = 0

    def feed(self, line):
        m = self.regex.search(line)
        if not m:
            return
        self.n += 1
        if "duration" in self.regex.groupindex:
            try:
                seconds = float(m.group("duration"))
            except (TypeError, ValueError):
                raise InputError(f"--pattern's duration group matched {m.group('duration')!r}, not a number of seconds") from None
            yield Save(seconds, _stamp(line), f"save {self.n}", self.name)
        else:
            start, end = parse_time(m.group("start")), parse_time(m.group("end"))
            yield Save(end - start, end, f"save {self.n}", self.name)


BUILTIN = (Torchtitan, Megatron, DeepSpeed, HfTrainer, Lightning)


def extract(paths: list[Path], pattern: str | None = None) -> tuple[list[Save], int]:
    """Every save in the logs, in order, and the bytes read. Memory stays bounded by the number of saves."""
    extractors = [Custom(pattern)] if pattern else [cls() for cls in BUILTIN]
    saves: list[Save] = []
    read = 0
    for path in paths:
        check_regular_file(path, "log")  # logs are streamed, so any size goes, but a FIFO or device must not
        try:
            f = open(path, "r", errors="replace", buffering=4 * 2**20)
        except OSError as exc:
            raise InputError(f"cannot read log {path}: {exc.strerror}") from None
        with f:
            for line in f:
                read += len(line)
                for ex in extractors:
                    saves.extend(ex.feed(line))
        for ex in extractors:
            saves.extend(ex.finish())
    return saves, read
