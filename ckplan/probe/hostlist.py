"""The hosts of a multi-host probe: `--hosts` and `--hosts-file` entries, Slurm hostlist expressions, the agents.

Entries: host, host:port, [ipv6]:port, a Slurm host list such as node[01-16]:8765 (the port applies to each of
its hosts), or `slurm` (the job's nodes). Expressions: `gpu[001-016,020],io[1-2]-ib` → gpu001 … gpu016, gpu020,
io1-ib, io2-ib.

The syntax is Slurm's (and pdsh's): a comma outside brackets separates parts; inside a part, each
`[…]` holds a comma-separated list of numbers and low-high ranges, every combination of the groups is
a name (`a[1-2]b[1-2]` → a1b1, a1b2, a2b1, a2b2, the last group varying fastest), text may follow a
bracket (`gpu[1-2]-ib`), and a range keeps the width of its low bound (`[08-10]` → 08, 09, 10).
Names keep the expression's order and duplicates are kept: the caller decides what they mean.

The size is counted before a name is made, so `n[1-999999999]` is refused at once and not after a
minute of building strings. (python-hostlist is GPL-2.0+, which ckplan's Apache-2.0 cannot take as a
dependency; ClusterShell builds every name before its size can be checked: 3 million in 3.8 s and
450 MB here, with an AssertionError for still larger ranges.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from ckplan.errors import InputError
from ckplan.probe.fio import DEFAULT_PORT
from ckplan.units import MAX_HOSTS

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


V6_ENTRY = re.compile(r"\[(?P<v6>[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)\](?::(?P<port>[^:]*))?")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
SLURM_VARIABLES = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
ENTRY_FORMS = "use host, host:port, [ipv6]:port, a Slurm host list such as node[01-16]:8765, or slurm"


@dataclass(frozen=True)
class Host:
    name: str
    port: int = DEFAULT_PORT

    @property
    def client_arg(self) -> str:
        family = "ip6" if ":" in self.name else "ip"
        return f"--client={family}:{self.name},{self.port}"

    def __str__(self) -> str:
        return f"[{self.name}]:{self.port}" if ":" in self.name else f"{self.name}:{self.port}"


def slurm_nodelist(environ: Mapping[str, str]) -> tuple[str, str]:
    """The job's node list as (variable, hostlist expression): SLURM_JOB_NODELIST, else SLURM_NODELIST."""
    for var in SLURM_VARIABLES:
        if environ.get(var, "").strip():
            return var, environ[var].strip()
    raise InputError(
        "‹hosts› slurm reads the job's nodes from SLURM_JOB_NODELIST or SLURM_NODELIST, and neither is set: "
        "run it inside a Slurm job (sbatch, salloc) or name the hosts"
    )


def parse_hosts(
    spec: str | None,
    hosts_file: Path | None,
    environ: Mapping[str, str] | None = None,
    notice: Callable[[str], None] | None = None,
    limit: int = MAX_HOSTS,
) -> list[Host]:
    """The hosts of `--hosts` and `--hosts-file`: comma-separated entries, each a host, a Slurm host list
    (`gpu[001-016,020]`, `io[1-2]-ib`) or `slurm` (the job's nodes), optionally followed by :PORT, which applies to
    every host of that entry. `notice` is told which nodes `slurm` found."""
    environ = os.environ if environ is None else environ
    sources: list[tuple[str, str]] = [("‹hosts›", spec)] if spec else []
    if hosts_file:
        from ckplan.readers import read_text_file

        lines = read_text_file(hosts_file, "‹hosts_file›").splitlines()
        sources += [(f"‹hosts_file› line {i}", line.split("#")[0].strip()) for i, line in enumerate(lines, 1)]
    hosts: list[Host] = []
    for where, text in sources:
        try:
            entries = [e.strip() for e in split_top(text)]
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        for entry in filter(None, entries):
            hosts += _entry(entry, where, environ, notice, limit - len(hosts), len(hosts))
    if not hosts:
        raise InputError("‹hosts› or ‹hosts_file› names no hosts")
    seen: set[Host] = set()
    for h in hosts:
        if h in seen:
            raise InputError(f"host {h} is listed twice")
        seen.add(h)
    return hosts


def _entry(
    entry: str, where: str, environ: Mapping[str, str], notice: Callable[[str], None] | None, room: int, before: int
) -> list[Host]:
    """The hosts of one entry; `room` more may be added to the `before` already named."""
    m = V6_ENTRY.fullmatch(entry)
    expr, port_text = (m["v6"], m["port"]) if m else entry.split(":", 1) if entry.count(":") == 1 else (entry, None)
    if ":" in entry and not m and entry.count(":") != 1:
        raise InputError(f"{where}: bad host entry {entry!r}: {ENTRY_FORMS}")
    port = DEFAULT_PORT
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(f"{where}: bad port in host entry {entry!r}: give a number 1-65535 after the colon")
        port = int(port_text)
    if m:
        return [Host(expr, port)]
    source = ""
    if expr == "slurm":
        var, expr = slurm_nodelist(environ)
        source = f" (slurm: {var}={expr})"
    try:
        n = count(expr)
        if n > room:
            total = f", {before + n:,} in all" if before else ""
            raise InputError(f"{expr!r} expands to {n:,} hosts{total}; at most {room + before:,} are allowed")
        names = expand(expr, limit=room)
    except InputError as exc:
        raise InputError(f"{where}{source}: {exc}") from None
    for name in names:
        if not HOST_NAME.fullmatch(name):
            raise InputError(f"{where}{source}: bad host name {name!r} in {entry!r}: {ENTRY_FORMS}")
    if source and notice:
        shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
        notice(f"--hosts slurm: {len(names)} node{'s' if len(names) != 1 else ''} in ${var} ({expr}): {shown}")
    return [Host(name, port) for name in names]
