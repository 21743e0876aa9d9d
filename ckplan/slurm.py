"""Slurm's hostlist expressions (pdsh's too) and the job's node list: no probing in it, only the syntax.

`gpu[001-016,020],io[1-2]-ib` → gpu001 … gpu016, gpu020, io1-ib, io2-ib. A comma outside brackets separates
parts; inside a part, each `[…]` holds a comma-separated list of numbers and low-high ranges, every combination
of the groups is a name (`a[1-2]b[1-2]` → a1b1, a1b2, a2b1, a2b2, the last group varying fastest), text may
follow a bracket (`gpu[1-2]-ib`), and a range keeps the width of its low bound (`[08-10]` → 08, 09, 10). Names
keep the expression's order and duplicates are kept: the caller decides what they mean.

The size is counted before a name is made, so `n[1-999999999]` is refused at once and not after a minute of
building strings. (python-hostlist is GPL-2.0+, which ckplan's Apache-2.0 cannot take as a dependency;
ClusterShell builds every name before its size can be checked: 3 million in 3.8 s and 450 MB here.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import product

from ckplan.errors import InputError
from ckplan.units import MAX_HOSTS

SLURM_VARIABLES = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def split_top(expr: str) -> list[str]:
    """The parts of `expr` at commas outside brackets (empty parts kept); brackets must balance and not nest."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        if c == "[":
            if depth:
                raise InputError(f"bad host list {expr!r}: a bracket opens inside another at character {i + 1}")
            depth = 1
        elif c == "]":
            if not depth:
                raise InputError(f"bad host list {expr!r}: ']' at character {i + 1} closes no bracket")
            depth = 0
        elif c == "," and not depth:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise InputError(f"bad host list {expr!r}: a '[' is never closed")
    return parts + [expr[start:]]


def _groups(part: str, expr: str) -> list[list[tuple[int, int, int]] | str]:
    """A part as literal text and bracket groups, each group a list of (low, high, width)."""
    out: list[list[tuple[int, int, int]] | str] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", part):
        if m.start() > pos:
            out.append(part[pos : m.start()])
        ranges = []
        for item in m.group(1).split(","):
            r = _RANGE.fullmatch(item.strip())
            if not r:
                what = "an empty range" if not item.strip() else f"{item.strip()!r}, not a number or low-high range"
                raise InputError(f"bad host list {expr!r}: [{m.group(1)}] holds {what}")
            low, high = r.group(1), r.group(2) if r.group(2) is not None else r.group(1)
            if int(high) < int(low):
                raise InputError(f"bad host list {expr!r}: range {item.strip()} runs backwards (write {high}-{low})")
            ranges.append((int(low), int(high), len(low)))
        out.append(ranges)
        pos = m.end()
    if pos < len(part):
        out.append(part[pos:])
    return out


def count(expr: str) -> int:
    """How many names `expr` expands to, without making them; raises InputError for a malformed expression."""
    total = 0
    for part in split_top(expr):
        n = 1
        for g in _groups(part, expr):
            if isinstance(g, list):
                n *= sum(high - low + 1 for low, high, _ in g)
        total += n if part else 0
    return total


def expand(expr: str, limit: int = MAX_HOSTS) -> list[str]:
    """The names of a hostlist expression, in order; an InputError for a malformed one or one over `limit` names."""
    if not expr.strip():
        raise InputError("bad host list: the expression is empty")
    n = count(expr)
    if n > limit:
        raise InputError(f"host list {expr!r} expands to {n:,} hosts; at most {limit:,} are allowed")
    names: list[str] = []
    for part in split_top(expr):
        if not part:
            continue
        choices = [
            [g] if isinstance(g, str) else [f"{i:0{w}d}" for low, high, w in g for i in range(low, high + 1)]
            for g in _groups(part, expr)
        ]
        names += ["".join(p) for p in product(*choices)]
    return names


def nodelist(environ: Mapping[str, str]) -> tuple[str, str]:
    """The job's node list as (variable, hostlist expression): SLURM_JOB_NODELIST, else SLURM_NODELIST."""
    for var in SLURM_VARIABLES:
        if environ.get(var, "").strip():
            return var, environ[var].strip()
    raise InputError(
        "‹hosts› slurm reads the job's nodes from SLURM_JOB_NODELIST or SLURM_NODELIST, and neither is set: "
        "run it inside a Slurm job (sbatch, salloc) or name the hosts"
    )
