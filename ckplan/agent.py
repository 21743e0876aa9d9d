"""`ckplan agent`: the fio server that `ckplan probe --hosts` drives, one per host, safe under `srun --ntasks-per-node=1`.

Not part of the probe: nothing in probe/ imports it, and it runs on the probed hosts, not the probing one. Its
settings come from the options, else CKPLAN_AGENT_BIND, CKPLAN_AGENT_PORT and CKPLAN_AGENT_IDLE_TIMEOUT, so one
srun line starts it everywhere; `slurm` binds the address of this node's Slurm name (SLURMD_NODENAME), the name
`ckplan probe --hosts slurm` connects to. It stays the parent of `fio --server` and stops it, with every job
process (a child subreaper: they sit in sessions of their own and outlive a server that dies first), on SIGTERM
(a Slurm job's end), SIGINT, SIGHUP, or after `idle_timeout_s` with no ESTABLISHED connection on its port in the
kernel's socket table.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ckplan import children
from ckplan.errors import EnvironmentProblem, InputError
from ckplan.probe.fio import DEFAULT_PORT, fio_binary

ENV_BIND = "CKPLAN_AGENT_BIND"
ENV_PORT = "CKPLAN_AGENT_PORT"
ENV_IDLE = "CKPLAN_AGENT_IDLE_TIMEOUT"
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"


@dataclass(frozen=True)
class AgentSettings:
    address: str  # numeric: what fio's server binds
    port: int
    idle_timeout_s: float | None = None
    bind: str = ""  # as given, when it was a name ('slurm', a host name)


def _given(value: str | None, name: str, var: str, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The option's value, else the environment variable's; and what to call it in a message."""
    if value is not None:
        return value, f"‹{name}›"
    if environ.get(var, "").strip():
        return environ[var], var
    return None, f"‹{name}›"


def agent_settings(
    bind: str | None = None,
    port: str | None = None,
    idle_timeout: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> AgentSettings:
    """The agent's address, port and idle timeout from the options, else the environment, else 127.0.0.1:8765."""
    from ckplan.units import parse_duration

    environ = os.environ if environ is None else environ
    port_text, port_from = _given(port, "port", ENV_PORT, environ)
    port_n = DEFAULT_PORT
    if port_text is not None:
        if not port_text.strip().isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(f"{port_from} must be a port number 1-65535, got {port_text!r}")
        port_n = int(port_text)
    idle_text, idle_from = _given(idle_timeout, "idle_timeout", ENV_IDLE, environ)
    idle_s = parse_duration(idle_text, idle_from) if idle_text is not None else None
    if idle_s is not None and not any(os.path.exists(t) for t in TCP_TABLES):
        raise EnvironmentProblem(
            "the agent's idle timeout reads open connections from /proc/net/tcp, which this system lacks (Linux only)"
        )
    bind_text, bind_from = _given(bind, "bind", ENV_BIND, environ)
    bind_text = "127.0.0.1" if bind_text is None else bind_text.strip()
    address = bind_address(bind_text, bind_from, environ)
    label = f"slurm: {environ['SLURMD_NODENAME'].strip()}" if bind_text == "slurm" else bind_text
    return AgentSettings(address, port_n, idle_s, label if bind_text != address else "")


def bind_address(text: str, where: str, environ: Mapping[str, str]) -> str:
    """A numeric address for fio's --server: an address as it is, a host name resolved, `slurm` this node's
    Slurm name resolved (refused where that is a loopback address, which no other node can reach)."""
    if not text:  # it would reach fio as --server=ip:,PORT, an address nobody meant
        raise InputError(f"{where} is empty: give the address the fio server listens on")
    name = text
    if text == "slurm":
        name = environ.get("SLURMD_NODENAME", "").strip()
        if not name:
            raise InputError(
                f"{where} slurm listens on the address of this node's Slurm name, and SLURMD_NODENAME is not "
                "set: start the agent with srun inside a Slurm job, or give an address"
            )
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise InputError(f"{where}: {name!r} does not resolve to an address on this host") from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # IPv4 first, as fio's client tries it
    address = str(infos[0][4][0])
    if text == "slurm" and is_loopback(address):
        raise EnvironmentProblem(
            f"agent address slurm: this node's name {name!r} resolves to {address}, a loopback address that "
            "other nodes cannot reach; give this node's address on the probe's network instead"
        )
    return address


def tcp_sockets(state: str) -> list[tuple[str, int]]:
    """(local address, local port) of this network namespace's TCP sockets in `state` (01 ESTABLISHED, 0A LISTEN)."""
    out = []
    for table, family in zip(TCP_TABLES, (socket.AF_INET, socket.AF_INET6), strict=True):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) <= 3 or fields[3] != state:
                continue
            addr, port = fields[1].rsplit(":", 1)
            raw = bytes.fromhex(addr)  # 32-bit words in the kernel's byte order
            if sys.byteorder == "little":
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            out.append((socket.inet_ntop(family, raw), int(port, 16)))
    return out


def established_connections(port: int) -> int:
    """TCP connections in the ESTABLISHED state whose local port is `port`, in this network namespace."""
    return sum(1 for _, p in tcp_sockets(TCP_ESTABLISHED) if p == port)


def check_port_free(address: str, port: int) -> None:
    """Refuse a port that a process already listens on: fio's server binds with SO_REUSEPORT, so a second agent
    of the same user would share the port with the first and take half its probes, silently."""
    if not any(os.path.exists(t) for t in TCP_TABLES):
        return  # not Linux: fio's own bind is all there is
    wild = ("0.0.0.0", "::")
    taken = [a for a, p in tcp_sockets(TCP_LISTEN) if p == port and (a == address or a in wild or address in wild)]
    if taken:
        raise EnvironmentProblem(
            f"port {port} is taken: a process listens on {taken[0]}:{port} already (an agent left "
            "running? under srun, start one task per node with --ntasks-per-node=1)"
        )


def run_agent(settings: AgentSettings, log: Callable[[str], None], poll_s: float = 0.5, grace_s: float = 5.0) -> int:
    """Run fio's server until a signal, the idle timeout, or fio's own exit; every process it started is gone on
    return. Returns fio's exit code where fio ended by itself, else 0."""
    cmd = agent_command(settings.address, settings.port)
    check_port_free(settings.address, settings.port)
    children.become_subreaper()
    stop: list[int] = []
    with children.on_stopping_signals(stop.append):
        try:
            server = subprocess.Popen(cmd, preexec_fn=children.preexec())
            last_client = time.monotonic()
            while True:
                try:
                    code = server.wait(timeout=poll_s)
                    if not stop:  # under Slurm the signal that ends the job reaches fio as well: not fio's failure
                        log(f"fio's server {children.exit_reason(code)}")
                        return code if code >= 0 else 1
                except subprocess.TimeoutExpired:
                    pass
                if stop:
                    log(f"stopping on {signal.Signals(stop[0]).name}: ending fio's server and its jobs")
                    return 0
                if settings.idle_timeout_s is not None:
                    now = time.monotonic()
                    if established_connections(settings.port):
                        last_client = now
                    elif now - last_client >= settings.idle_timeout_s:
                        log(f"no client connected for {settings.idle_timeout_s:g} s (--idle-timeout): stopping")
                        return 0
        finally:
            children.stop_descendants(grace_s)


def agent_command(bind: str, port: int) -> list[str]:
    family = "ip6" if ":" in bind else "ip"
    return [fio_binary(), f"--server={family}:{bind},{port}"]


def is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")
