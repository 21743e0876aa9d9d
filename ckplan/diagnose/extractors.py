"""A user's log pattern (--pattern): a regular expression with a named group `duration` (seconds) or groups `start`
and `end` (timestamps), read with the same interface as the frameworks' built-in extractors (frameworks/logs.py),
guarded against patterns that backtrack for ever.
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import threading
import time
from collections.abc import Iterator

from ckplan.errors import InputError
from ckplan.frameworks.logs import Extractor, Save, literal_runs, number, parse_time, stamp

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
            seconds = number(m.group("duration"), "--pattern's duration group matched")
            yield Save(seconds, stamp(line), f"save {self.n}", self.name)
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
                found.extend((part,) for part in literal_runs("".join(run)))
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
