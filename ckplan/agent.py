"""`ckplan agent`: the fio server that `ckplan probe --hosts` drives, one per host, safe under `srun --ntasks-per-node=1`.

Not part of the probe: nothing in probe/ imports it, and it runs on the probed hosts, not the probing one. Its
settings come from the options, else CKPLAN_AGENT_BIND, CKPLAN_AGENT_PORT, CKPLAN_AGENT_IDLE_TIMEOUT,
CKPLAN_AGENT_INFO_PORT and CKPLAN_AGENT_LINGER, so one srun line or one pod template starts it everywhere;
`slurm` binds the address of this node's Slurm name (SLURMD_NODENAME), the name `ckplan probe --hosts slurm`
connects to. It stays the parent of `fio --server` and stops it, with every job
process (a child subreaper: they sit in sessions of their own and outlive a server that dies first), on SIGTERM
(a Slurm job's end), SIGINT, SIGHUP, after `idle_timeout_s` with no ESTABLISHED connection on its port in the
kernel's socket table, or `linger_s` after the last one once a probe has connected (an agent pod's end: nothing
in a Kubernetes Job stops the agents when the controller is done). With an info port it also answers `GET /` with
where it runs (probe/agent_info.py), which is its pod's readiness probe.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ckplan import children
from ckplan.errors import EnvironmentProblem, InputError
from ckplan.probe.fio import DEFAULT_PORT, fio_binary

ENV_BIND = "CKPLAN_AGENT_BIND"
ENV_PORT = "CKPLAN_AGENT_PORT"
ENV_IDLE = "CKPLAN_AGENT_IDLE_TIMEOUT"
ENV_INFO_PORT = "CKPLAN_AGENT_INFO_PORT"
ENV_LINGER = "CKPLAN_AGENT_LINGER"
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"


@dataclass(frozen=True)
class AgentSettings:
    address: str  # numeric: what fio's server binds
    port: int
    idle_timeout_s: float | None = None
    bind: str = ""  # as given, when it was a name ('slurm', a host name)
    info_port: int | None = None  # where `GET /` answers this agent's AgentInfo (probe/agent_info.py)
    linger_s: float | None = None  # once a probe has connected: exit after this long with none connected


def _given(value: str | None, name: str, var: str, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The option's value, else the environment variable's; and what to call it in a message."""
    if value is not None:
        return value, f"‹{name}›"
    if environ.get(var, "").strip():
        return environ[var], var
    return None, f"‹{name}›"


def _port(text: str | None, where: str) -> int | None:
    if text is None:
        return None
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise InputError(f"{where} must be a port number 1-65535, got {text!r}")
    return int(text)


def agent_settings(
    bind: str | None = None,
    port: str | None = None,
    idle_timeout: str | None = None,
    environ: Mapping[str, str] | None = None,
    info_port: str | None = None,
    linger: str | None = None,
) -> AgentSettings:
    """The agent's address, port, info port, idle timeout and linger from the options, else the environment, else
    127.0.0.1:8765, no info port, never idle."""
    from ckplan.units import parse_duration

    environ = os.environ if environ is None else environ
    port_n = _port(*_given(port, "port", ENV_PORT, environ)) or DEFAULT_PORT
    info_n = _port(*_given(info_port, "info_port", ENV_INFO_PORT, environ))
    if info_n == port_n:
        raise InputError(f"the info port {info_n} is fio's server's port: give another")
    idle_text, idle_from = _given(idle_timeout, "idle_timeout", ENV_IDLE, environ)
    idle_s = parse_duration(idle_text, idle_from) if idle_text is not None else None
    linger_text, linger_from = _given(linger, "linger", ENV_LINGER, environ)
    linger_s = parse_duration(linger_text, linger_from) if linger_text is not None else None
    if (idle_s is not None or linger_s is not None) and not any(os.path.exists(t) for t in TCP_TABLES):
        raise EnvironmentProblem(
            "the agent's idle timeout reads open connections from /proc/net/tcp, which this system lacks (Linux only)"
        )
    bind_text, bind_from = _given(bind, "bind", ENV_BIND, environ)
    bind_text = "127.0.0.1" if bind_text is None else bind_text.strip()
    address = bind_address(bind_text, bind_from, environ)
    label = f"slurm: {environ['SLURMD_NODENAME'].strip()}" if bind_text == "slurm" else bind_text
    return AgentSettings(address, port_n, idle_s, label if bind_text != address else "", info_n, linger_s)


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
    """Run fio's server (and the info server, given an info port) until a signal, the idle timeout, the linger after
    the last probe, or fio's own exit; every process it started is gone on return. Returns fio's exit code where fio
    ended by itself, else 0."""
    cmd = agent_command(settings.address, settings.port)
    check_port_free(settings.address, settings.port)
    if settings.info_port is not None:
        check_port_free(settings.address, settings.info_port)
    children.become_subreaper()
    stop: list[int] = []
    with children.on_stopping_signals(stop.append), info_server(settings):
        try:
            server = subprocess.Popen(cmd, preexec_fn=children.preexec())
            started = last_client = time.monotonic()
            probed = False
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
                if settings.idle_timeout_s is None and settings.linger_s is None:
                    continue
                now = time.monotonic()
                if established_connections(settings.port):
                    last_client, probed = now, True
                if settings.idle_timeout_s is not None and now - last_client >= settings.idle_timeout_s:
                    log(f"no client connected for {settings.idle_timeout_s:g} s (--idle-timeout): stopping")
                    return 0
                if settings.linger_s is not None and probed and now - last_client >= settings.linger_s:
                    log(
                        f"the probe that connected is done: none for {settings.linger_s:g} s (--linger), "
                        f"{now - started:.0f} s after the start; stopping"
                    )
                    return 0
        finally:
            children.stop_descendants(grace_s)


@contextlib.contextmanager
def info_server(settings: AgentSettings) -> Iterator[None]:
    """Answer `GET /` on the info port, while the agent runs, with this agent's AgentInfo: 200 once fio's server
    listens, 503 before (a readiness probe's test), from a thread of its own."""
    if settings.info_port is None:
        yield
        return
    import http.server
    import threading

    from ckplan.probe.agent_info import own_info

    fio_port = settings.port

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 5.0  # a client that connects and sends nothing holds its thread this long at most

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            ready = any(p == fio_port for _, p in tcp_sockets(TCP_LISTEN))
            body = own_info(fio_port, ready).model_dump_json().encode()
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # a readiness probe every few seconds: not logged
            pass

    family = socket.AF_INET6 if ":" in settings.address else socket.AF_INET
    server_class = type("InfoServer", (http.server.ThreadingHTTPServer,), {"address_family": family})
    server = server_class((settings.address, settings.info_port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="ckplan-agent-info", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def agent_command(bind: str, port: int) -> list[str]:
    family = "ip6" if ":" in bind else "ip"
    return [fio_binary(), f"--server={family}:{bind},{port}"]


def is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")
