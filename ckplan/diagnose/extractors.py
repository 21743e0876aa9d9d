"""What each framework prints when it saves: one log extractor per framework, and a user's --pattern.

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

Which framework's logs each built-in extractor reads is recorded in ckplan/frameworks.py; diagnose/logs.py
reads a log and feeds its lines to the extractors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ckplan.errors import InputError
from ckplan.units import MAX_DURATION_S

TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)?)")
# Finds, in the undecoded bytes, every line in which TIMESTAMP matches once decoded, and perhaps more:
# TIMESTAMP's \d also matches non-ASCII (Unicode) digits, each one or more bytes from 0x80 up in UTF-8,
# so n digits are n or more bytes of [0-9\x80-\xff]. (This form is 10× faster than (?:[0-9]|[\x80-\xff]+).)
_D = rb"[0-9\x80-\xff]"
TIMESTAMP_BYTES = re.compile(
    _D + rb"{4,}-" + _D + rb"{2,}-" + _D + rb"{2,}[ T]" + _D + rb"{2,}:" + _D + rb"{2,}:" + _D + rb"{2,}"
)


@dataclass(frozen=True)
class Save:
    seconds: float
    at: float | None  # when the save ended, epoch seconds, if the log has timestamps
    label: str  # step, iteration or path
    source: str  # which pattern found it

    def __post_init__(self) -> None:
        """A save lasts 0 to 10 years (the README's bound on durations), and not a subnormal time: past that the
        log's figure is a misread, and the fit's squares overflow."""
        if 0 <= self.seconds <= MAX_DURATION_S and not 0 < self.seconds < sys.float_info.min:
            return
        who = "‹pattern›'s" if self.source == "custom" else f"the {self.source} log's"
        subnormal = 0 < self.seconds < sys.float_info.min
        why = " (it ends before it starts)" if self.seconds < 0 else " (a subnormal number)" if subnormal else ""
        raise InputError(
            f"{who} save {self.label!r} lasts {self.seconds:g} s{why}: a save takes 0 to 10 years, so this is not "
            "a save's time"
        )


def parse_time(text: str) -> float:
    text = text.replace("T", " ").replace(",", ".")
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        raise InputError(f"cannot read the timestamp {text!r}") from None


def _stamp(line: str) -> float | None:
    m = TIMESTAMP.search(line)
    return parse_time(m.group(1)) if m else None


def _number(text: str | None, what: str, unit: str = "seconds") -> float:
    """A captured duration: a finite number, or one line saying what was captured."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{what} {text!r}, not a number of {unit}") from None
    if not math.isfinite(value):  # nan, inf, or more digits than a float holds (1e400)
        raise InputError(f"{what} {text!r}, not a finite number of {unit}")
    return value


def _literal_runs(text: str) -> list[str]:
    """The parts of text whose UTF-8 bytes are in the log as they are: not a line end, U+FFFD or a surrogate."""
    return [run for run in re.split(r"[\r\n\ufffd\ud800-\udfff]+", text) if run]


class Extractor:
    """Consumes lines one at a time and yields saves as they complete.

    `needles`: byte strings of which every line that feed acts on contains one, given the state
    `wanted` leaves out; a line with none of them must change nothing. `wanted()`: a byte string
    or a bytes regex that finds the further lines the extractor's present state acts on, or None.
    """

    name = "base"
    needles: tuple[bytes, ...] = ()

    def feed(self, line: str) -> Iterator[Save]:
        raise NotImplementedError

    def finish(self) -> Iterator[Save]:
        return iter(())

    def wanted(self) -> bytes | re.Pattern[bytes] | None:
        return None


class Torchtitan(Extractor):
    name = "torchtitan"
    needles = (b"Finished saving the checkpoint",)
    pattern = re.compile(
        r"Finished saving the checkpoint(?: \(or staging if async is enabled\))?\s*in ([\d.]+) seconds"
    )

    def __init__(self):
        self.n = 0

    def feed(self, line):
        if "Finished saving the checkpoint" in line and (m := self.pattern.search(line)):
            self.n += 1
            yield Save(_number(m.group(1), "torchtitan's save time is"), _stamp(line), f"save {self.n}", self.name)


class Megatron(Extractor):
    name = "megatron"
    needles = (b"successfully saved checkpoint", b"save-checkpoint")
    saved = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")
    timer = re.compile(r"save-checkpoint \.*: (?:\(([\d.]+), ([\d.]+)\)|([\d.]+))")

    def __init__(self):
        self.iteration: str | None = None
        self.at: float | None = None

    def feed(self, line):
        if "successfully saved checkpoint" in line and (m := self.saved.search(line)):
            self.iteration, self.at = m.group(1), _stamp(line)
        if "save-checkpoint" in line and (m := self.timer.search(line)):
            ms = _number(m.group(2) or m.group(3), "megatron's save-checkpoint timer is", "milliseconds")
            yield Save(ms / 1000, self.at, f"iteration {self.iteration or '?'}", self.name)
            self.iteration = None


class DeepSpeed(Extractor):
    name = "deepspeed"
    needles = (b"[Torch] Checkpoint",)
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
    needles = (b"Saving model checkpoint to",)
    start = re.compile(r"Saving model checkpoint to (\S+)")

    def __init__(self):
        self.dir: str | None = None
        self.dir_needle = b""
        self.begin = self.last = 0.0

    def feed(self, line):
        if "Saving model checkpoint to" in line and (m := self.start.search(line)):
            yield from self.finish()
            t = _stamp(line)
            if t is not None:
                self.dir, self.begin, self.last = m.group(1).rstrip("/."), t, t
                self.dir_needle = max(_literal_runs(self.dir), key=len, default="").encode()
        elif self.dir and self.dir in line and (t := _stamp(line)) is not None:
            self.last = t

    def finish(self):
        if self.dir and self.last > self.begin:
            yield Save(self.last - self.begin, self.last, self.dir.rsplit("/", 1)[-1], self.name)
        self.dir = None

    def wanted(self):
        return self.dir_needle if self.dir else None  # every line naming the directory


class Lightning(Extractor):
    name = "lightning"
    needles = (b"saving model to",)
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

    def wanted(self):
        return TIMESTAMP_BYTES if self.path else None  # the next timestamped line ends the save


# A user's pattern may backtrack for ever on one line ((a+)+$ on a long run of a's, (?:a|a)+$ too). A repeat
# inside a repeat is refused when the pattern is read (nested_repeat); anything else gets LINE_BUDGET_S per line,
# and a second more per 10 MB of it, after which diagnose stops with one line (Custom.watchdog).
LINE_BUDGET_S = 1.0
BUDGET_S_PER_CHARACTER = 1e-7


class Custom(Extractor):
    name = "custom"

    def __init__(self, pattern: str):
        try:
            self.regex = re.compile(pattern)
        except re.error as exc:
            raise InputError(f"‹pattern› is not a valid regular expression: {exc}") from None
        groups = set(self.regex.groupindex)
        if "duration" not in groups and not {"start", "end"} <= groups:
            raise InputError(
                "‹pattern› needs a named group (?P<duration>…) in seconds, or (?P<start>…) and (?P<end>…) timestamps"
            )
        if nested := nested_repeat(pattern):
            raise InputError(
                f"‹pattern› repeats a repeat ({nested}), which can backtrack for ever on one line: make the inner "
                "repeat possessive (++, *+) or the group atomic ((?>…)), or drop one of the two"
            )
        self.needles = required_literals(pattern)
        self.n = 0
        self.deadline = math.inf  # when the search of the present line has run out of time
        self.line = ""

    @contextlib.contextmanager
    def watchdog(self) -> Iterator[None]:
        """Meanwhile, a search that runs past its line's budget stops with one line: a timer signal every 0.1 s
        looks at the clock (CPython's regex engine lets a signal handler run inside a search). Only the main
        thread receives signals, so a library caller in another thread gets no budget."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def check(signum: int, frame: object) -> None:
            if time.monotonic() > self.deadline:
                self.deadline = math.inf
                raise InputError(
                    f"‹pattern› ran for over {LINE_BUDGET_S + len(self.line) * BUDGET_S_PER_CHARACTER:.1f} s on one "
                    f"line of {len(self.line):,} characters ({self.line[:40]!r}…): it backtracks; anchor it or make "
                    "its repeats possessive (++, *+)"
                )

        previous = signal.signal(signal.SIGALRM, check)
        signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def feed(self, line):
        self.line, self.deadline = line, time.monotonic() + LINE_BUDGET_S + len(line) * BUDGET_S_PER_CHARACTER
        m = self.regex.search(line)
        self.deadline = math.inf
        if not m:
            return
        self.n += 1
        if "duration" in self.regex.groupindex:
            seconds = _number(m.group("duration"), "--pattern's duration group matched")
            yield Save(seconds, _stamp(line), f"save {self.n}", self.name)
        else:
            start, end = parse_time(m.group("start")), parse_time(m.group("end"))
            yield Save(end - start, end, f"save {self.n}", self.name)


def nested_repeat(pattern: str) -> str | None:
    """The pattern (shortened, for a message) if it has a repeat of a variable count (+, *, {m,n}) inside another;
    None if not, or where the parser is not the one this was written against. A possessive repeat or an atomic
    group gives back nothing once matched, so what it holds does not count."""
    try:
        from re import _constants as c  # type: ignore[attr-defined]  # CPython's own regex parser, as below
        from re import _parser  # type: ignore[attr-defined]

        def varies(av) -> bool:
            return av[1] > 1 and av[1] != av[0]

        def inner(op, av) -> list:
            """The item lists inside one item that is not a repeat (possessive repeats and atomic groups: none)."""
            if op is c.SUBPATTERN:
                return [av[3]]
            if op is c.BRANCH:
                return av[1]
            if op in (c.ASSERT, c.ASSERT_NOT):
                return [av[1]]
            if op is c.GROUPREF_EXISTS:
                return [part for part in av[1:] if part]
            return []

        def walk(items, inside: bool) -> bool:
            for op, av in items:
                if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                    if inside and varies(av) or walk(av[2], inside or varies(av)):
                        return True
                elif any(walk(part, inside) for part in inner(op, av)):
                    return True
            return False

        if not walk(_parser.parse(pattern), False):
            return None
    except Exception:  # as required_literals: a parser of another shape refuses nothing; the time budget stays
        return None
    return pattern if len(pattern) <= 60 else pattern[:57] + "…"


def required_literals(pattern: str) -> tuple[bytes, ...]:
    """Byte strings of which every line the (str) pattern matches contains one, as UTF-8 bytes.

    (b"",) when no literal is certain (the pattern ignores case, or every part of it is optional
    or a class): then every line is tried. The regex itself still runs on the decoded line, so its
    meaning (\\d and \\w in Unicode, . as one character, ^ and $ at the line's ends) is unchanged;
    the literal only decides which lines it runs on.
    """
    try:
        from re import _constants as c  # type: ignore[attr-defined]  # CPython's own regex parser: private, hence the fallback below
        from re import _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern)
        if parsed.state.flags & c.SRE_FLAG_IGNORECASE:
            return (b"",)

        def requirements(items) -> list[tuple[str, ...]]:
            """Sets of strings of which every match contains one (at least one string of each set)."""
            found: list[tuple[str, ...]] = []
            run: list[str] = []

            def flush():
                found.extend((part,) for part in _literal_runs("".join(run)))
                run.clear()

            for op, av in items:
                if op is c.LITERAL:
                    run.append(chr(av))
                    continue
                flush()
                if op is c.SUBPATTERN and not av[1] & c.SRE_FLAG_IGNORECASE:
                    found += requirements(av[3])
                elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1:
                    found += requirements(av[2])
                elif op is c.ATOMIC_GROUP:
                    found += requirements(av)
                elif op is c.BRANCH:
                    alternatives: list[str] = []
                    for branch in av[1]:
                        best = _best(requirements(branch))
                        if best is None:
                            break
                        alternatives += best
                    else:
                        found.append(tuple(alternatives))
            flush()
            return found

        best = _best(requirements(parsed))
    except Exception:  # a parser that differs from the one this was written against: try every line
        return (b"",)
    return tuple(dict.fromkeys(s.encode() for s in best)) if best else (b"",)


def _best(options: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The set to search for: its shortest string the longest, then the fewest strings."""
    return max(options, key=lambda o: (min(map(len, o)), -len(o)), default=None)
