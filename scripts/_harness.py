"""Test hosts and a test S3 endpoint, shared by the test suite (tests/) and the benchmarks (scripts/).

Independent of pytest (it uses only ckplan.children, so its fio servers die with it): scripts import it from
their own directory, tests through
tests/s3server.py and tests/netns.py, which turn `Unavailable` into a skipped test.

- `moto_server()`: a real S3 HTTP endpoint on 127.0.0.1 (moto's standalone server);
- `DroppingProxy`: forwards to it and cuts any connection that sends more than a limit, mid-request;
- `CountingProxy`: forwards to it and records when each byte the client sent arrived, an independent
  count of what an S3 client uploaded;
- `fio_hosts()`: network namespaces joined to this machine by veth pairs, each running a real
  `fio --server` (or, where namespaces cannot be made, fio servers on loopback addresses 127.0.0.N).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ckplan import children

ACCESS_KEY = "AKIACKPLANTESTKEY123"
SECRET_KEY = "ckplan-test-secret-must-never-be-printed"


class Unavailable(RuntimeError):
    """A tool the harness needs is not installed here."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- S3 -----------------------------------------------------------------------------------------------


def credentials_env(tmp: Path | None = None) -> dict:
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}
    if tmp is not None:  # keep the user's own ~/.aws out of the tests
        env.update(AWS_CONFIG_FILE=str(tmp / "config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp / "credentials"))
    return env


def moto_server_exe() -> str:
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if exe is None:
        raise Unavailable("moto's server is not installed (pip install 'moto[server]')")
    return exe


@contextlib.contextmanager
def moto_server(extra_env: dict | None = None):
    exe = moto_server_exe()
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(extra_env or {})},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "moto_server did not start"
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def s3_client(endpoint: str, key: str = ACCESS_KEY, secret: str = SECRET_KEY):
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key, aws_secret_access_key=secret
    )


def leftovers(endpoint: str, bucket: str) -> tuple[list[str], list[str]]:
    s3 = s3_client(endpoint)
    objects = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    uploads = [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    return objects, uploads


class Proxy:
    """Forwards 127.0.0.1:port to the endpoint; `sent(n)` sees every chunk the client sends."""

    def __init__(self, endpoint: str):
        self.target = ("127.0.0.1", int(endpoint.rsplit(":", 1)[1]))
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def sent(self, connection_total: int, n: int) -> None:
        """Called for each chunk from the client, with the connection's running total; raise to cut it."""

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        total = 0
        try:
            while data := src.recv(65536):
                total += len(data)
                if from_client:
                    self.sent(total, len(data))
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()

    def close(self) -> None:
        self.stop.set()
        self.server.close()


class DroppingProxy(Proxy):
    """A connection that sends more than `limit` bytes is cut mid-request, as a server that dies or resets
    under load would. Small requests pass."""

    def __init__(self, endpoint: str, limit: int = 2 * 2**20):
        self.limit = limit
        super().__init__(endpoint)

    def sent(self, connection_total: int, n: int) -> None:
        if connection_total > self.limit:
            raise ConnectionResetError


class CountingProxy(Proxy):
    """Records (time.perf_counter() on arrival, bytes) for every chunk a client sends: requests' headers
    and bodies, as the server receives them."""

    def __init__(self, endpoint: str):
        self.arrivals: list[tuple[float, int]] = []
        self.lock = threading.Lock()
        super().__init__(endpoint)

    def sent(self, connection_total: int, n: int) -> None:
        with self.lock:
            self.arrivals.append((time.perf_counter(), n))

    def bytes_between(self, start: float, end: float) -> int:
        with self.lock:
            return sum(n for t, n in self.arrivals if start <= t <= end)


# --- fio hosts ----------------------------------------------------------------------------------------


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def _wait(addr: str, port: int, proc: subprocess.Popen, netns: str | None) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"fio --server exited: {proc.stderr.read() if proc.stderr else ''}"
        probe = (["ip", "netns", "exec", netns] if netns else []) + ["true"]
        try:
            with socket.create_connection((addr, port), timeout=0.3):
                return
        except OSError:
            _sh(*probe)
            time.sleep(0.1)
    raise AssertionError(f"fio server at {addr}:{port} did not come up")


def server_processes(addresses, port: int, workdir: str) -> list[int]:
    """Live processes of the fio servers fio_hosts started: the servers, the children they fork per
    connection and their job processes, all with the server's command line and working directory.
    fio puts each job process in a session of its own, so killing a server's process group misses
    them, and a job whose server died can hang on: one was found still running 1.5 h after a suite."""
    args = {f"--server=ip:{addr},{port}" for addr in addresses}
    found = []
    for pid, _, argv in processes():
        if len(argv) == 2 and os.path.basename(argv[0]) == "fio" and argv[1] in args:
            with contextlib.suppress(OSError):  # gone meanwhile
                if os.readlink(f"/proc/{pid}/cwd") == workdir:
                    found.append(pid)
    return found


def processes() -> list[tuple[int, str, list[str]]]:
    """(pid, comm, argv) of every live process. A zombie has no command line (it is dead, waiting to be reaped),
    so it is left out, as is a process that ends while it is read."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if argv:
            found.append((int(entry), comm, argv))
    return found


def kill_servers(addresses, port: int, workdir: str) -> None:
    """SIGKILL every process of these servers until none is left; raises if one survives."""
    deadline = time.monotonic() + 10
    while True:
        left = server_processes(addresses, port, workdir)
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"fio server processes {left} survived SIGKILL")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


@contextlib.contextmanager
def namespaces(count: int):
    """Yield [(network namespace, address)] for `count` hosts, the namespace None where they cannot be made
    (then the hosts are loopback addresses of this machine, 127.0.0.N); removed afterwards.

    Addresses are 10.231.N.2 inside namespace N and 10.231.N.1 on this side: only hosts made here."""
    tag = secrets.token_hex(2)
    use_netns = os.geteuid() == 0 and _sh("ip", "netns", "add", f"ckp{tag}0").returncode == 0
    if use_netns:
        _sh("ip", "netns", "del", f"ckp{tag}0")
    else:
        print("network namespaces unavailable: fio servers on loopback addresses 127.0.0.N instead")
    made, hosts = [], []
    try:
        for n in range(1, count + 1):
            if use_netns:
                ns, veth, addr = f"ckp{tag}{n}", f"ckv{tag}{n}", f"10.231.{n}.2"
                for cmd in (
                    ["ip", "netns", "add", ns],
                    ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                    ["ip", "addr", "add", f"10.231.{n}.1/24", "dev", veth],
                    ["ip", "link", "set", veth, "up"],
                    ["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"],
                    ["ip", "-n", ns, "link", "set", "eth0", "up"],
                    ["ip", "-n", ns, "link", "set", "lo", "up"],
                ):
                    result = _sh(*cmd)
                    assert result.returncode == 0, f"{' '.join(cmd)}: {result.stderr}"
                made.append((ns, veth))
                hosts.append((ns, addr))
            else:
                hosts.append((None, f"127.0.0.{n + 1}"))
        yield hosts
    finally:
        for ns, veth in made:
            _sh("ip", "link", "del", veth)
            _sh("ip", "netns", "del", ns)


@contextlib.contextmanager
def fio_hosts(count: int, port: int = 8765, workdir=None):
    """Yield [(address, server process)] for `count` hosts (see namespaces), each server started in `workdir`
    (default: a directory of its own that is removed afterwards), where fio writes its prerun output."""
    if shutil.which("fio") is None:
        raise Unavailable("fio is not installed")
    own_workdir = workdir is None
    workdir = tempfile.mkdtemp(prefix="ckplan-fio-server-") if own_workdir else workdir
    servers = []
    try:
        with namespaces(count) as hosts:
            try:
                for ns, addr in hosts:
                    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["fio", f"--server=ip:{addr},{port}"]
                    # the server dies with this process too (ip netns exec execs fio, which keeps the setting)
                    proc = subprocess.Popen(
                        cmd,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                        text=True,
                        start_new_session=True,
                        cwd=workdir,
                        preexec_fn=children.preexec(),
                    )
                    servers.append((addr, proc))
                    _wait(addr, port, proc, ns)
                yield servers
            finally:
                for _, proc in servers:
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                kill_servers([addr for addr, _ in servers], port, os.path.realpath(workdir))
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
