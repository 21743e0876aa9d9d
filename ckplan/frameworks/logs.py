"""The interface every framework's log extractor implements, and what extractors share: a save found in a log,
the timestamps log lines carry, and the checks on a captured duration.

A framework's extractor sits in its own module (frameworks/<name>.py) beside its layout; diagnose/logs.py reads a
log and feeds its lines to every framework's extractors, in the registry's order (ckplan/frameworks/__init__.py),
or to a user's --pattern (diagnose/extractors.py).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
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


def stamp(line: str) -> float | None:
    m = TIMESTAMP.search(line)
    return parse_time(m.group(1)) if m else None


def number(text: str | None, what: str, unit: str = "seconds") -> float:
    """A captured duration: a finite number, or one line saying what was captured."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{what} {text!r}, not a number of {unit}") from None
    if not math.isfinite(value):  # nan, inf, or more digits than a float holds (1e400)
        raise InputError(f"{what} {text!r}, not a finite number of {unit}")
    return value


def literal_runs(text: str) -> list[str]:
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


class DirectorySpan(Extractor):
    """A save from the timestamped line that says it begins writing a directory (`marker`, then the directory, which
    `start` captures) to the last timestamped line that names that directory: for frameworks that log no end."""

    marker = ""
    start: re.Pattern[str]

    def __init__(self) -> None:
        self.dir: str | None = None
        self.dir_needle = b""
        self.begin = self.last = 0.0

    def feed(self, line: str) -> Iterator[Save]:
        if self.marker in line and (m := self.start.search(line)):
            yield from self.finish()
            t = stamp(line)
            if t is not None:
                self.dir, self.begin, self.last = m.group(1).rstrip("/."), t, t
                self.dir_needle = max(literal_runs(self.dir), key=len, default="").encode()
        elif self.dir and self.dir in line and (t := stamp(line)) is not None:
            self.last = t

    def finish(self) -> Iterator[Save]:
        if self.dir and self.last > self.begin:
            yield Save(self.last - self.begin, self.last, self.dir.rsplit("/", 1)[-1], self.name)
        self.dir = None

    def wanted(self) -> bytes | re.Pattern[bytes] | None:
        return self.dir_needle if self.dir else None  # every line naming the directory
