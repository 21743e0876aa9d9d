"""The hosts of a multi-host probe: `--hosts` and `--hosts-file` entries, each a host, host:port, [ipv6]:port, a
Slurm host list such as node[01-16]:8765 (the port applies to each of its hosts; ckplan/slurm.py expands it), or
`slurm` (the job's nodes)."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ckplan import slurm
from ckplan.errors import InputError
from ckplan.probe.fio import DEFAULT_PORT
from ckplan.units import MAX_HOSTS

V6_ENTRY = re.compile(r"\[(?P<v6>[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)\](?::(?P<port>[^:]*))?")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
ENTRY_FORMS = "use host, host:port, [ipv6]:port, a Slurm host list such as node[01-16]:8765, or slurm"


@dataclass(frozen=True)
class Host:
    name: str
    port: int = DEFAULT_PORT

    @property
    def client_arg(self) -> str:
        return f"--client={'ip6' if ':' in self.name else 'ip'}:{self.name},{self.port}"

    def __str__(self) -> str:
        return f"[{self.name}]:{self.port}" if ":" in self.name else f"{self.name}:{self.port}"


def parse_hosts(
    spec: str | None,
    hosts_file: Path | None,
    environ: Mapping[str, str] | None = None,
    notice: Callable[[str], None] | None = None,
    limit: int = MAX_HOSTS,
) -> list[Host]:
    """The hosts of `--hosts` and `--hosts-file`, comma-separated entries of the forms above; `notice` is told which
    nodes `slurm` found."""
    environ = os.environ if environ is None else environ
    sources: list[tuple[str, str]] = [("‹hosts›", spec)] if spec else []
    if hosts_file:
        from ckplan.readers import read_text_file

        lines = read_text_file(hosts_file, "‹hosts_file›").splitlines()
        sources += [(f"‹hosts_file› line {i}", line.split("#")[0].strip()) for i, line in enumerate(lines, 1)]
    hosts: list[Host] = []
    for where, text in sources:
        try:
            entries = [e.strip() for e in slurm.split_top(text)]
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        for entry in filter(None, entries):
            hosts += _entry(entry, where, environ, notice, limit - len(hosts), len(hosts))
    if not hosts:
        raise InputError("‹hosts› or ‹hosts_file› names no hosts")
    if twice := [h for h, n in Counter(hosts).items() if n > 1]:
        raise InputError(f"host {twice[0]} is listed twice")
    return hosts


def _entry(
    entry: str, where: str, environ: Mapping[str, str], notice: Callable[[str], None] | None, room: int, before: int
) -> list[Host]:
    """The hosts of one entry; `room` more may be added to the `before` already named."""
    m = V6_ENTRY.fullmatch(entry)
    expr, port_text = (m["v6"], m["port"]) if m else entry.split(":", 1) if entry.count(":") == 1 else (entry, None)
    if ":" in entry and not m and entry.count(":") != 1:
        raise InputError(f"{where}: bad host entry {entry!r}: {ENTRY_FORMS}")
    if port_text is not None and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise InputError(f"{where}: bad port in host entry {entry!r}: give a number 1-65535 after the colon")
    port = DEFAULT_PORT if port_text is None else int(port_text)
    if m:
        return [Host(expr, port)]
    source = ""
    if expr == "slurm":
        var, expr = slurm.nodelist(environ)
        source = f" (slurm: {var}={expr})"
    try:
        n = slurm.count(expr)
        if n > room:
            total = f", {before + n:,} in all" if before else ""
            raise InputError(f"{expr!r} expands to {n:,} hosts{total}; at most {room + before:,} are allowed")
        names = slurm.expand(expr, limit=room)
    except InputError as exc:
        raise InputError(f"{where}{source}: {exc}") from None
    if bad := [name for name in names if not HOST_NAME.fullmatch(name)]:
        raise InputError(f"{where}{source}: bad host name {bad[0]!r} in {entry!r}: {ENTRY_FORMS}")
    if source and notice:
        shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
        notice(f"--hosts slurm: {len(names)} node{'s' if len(names) != 1 else ''} in ${var} ({expr}): {shown}")
    return [Host(name, port) for name in names]
