"""Test hosts: network namespaces joined to this machine by veth pairs, each running a real `fio --server`.

Addresses are 10.231.N.2 inside namespace N and 10.231.N.1 on this side: only hosts the
tests made themselves. Where namespaces cannot be made, the fallback is several fio servers
on distinct loopback addresses (127.0.0.N), and the test output says so.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from ckplan import children


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def server_processes(addresses, port: int, workdir: str) -> list[int]:
    """Live processes of the fio servers a fixture started: the servers, the children they fork per
    connection and their job processes, all with the server's command line and working directory.
    fio puts each job process in a session of its own, so killing a server's process group misses
    them, and a job whose server died can hang on: one was found still running 1.5 h after a suite."""
    args = {f"--server=ip:{addr},{port}" for addr in addresses}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0") if a]
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        # a zombie has no command line: it is dead, waiting for init to reap it
        if len(argv) == 2 and os.path.basename(argv[0]) == "fio" and argv[1] in args and cwd == workdir:
            found.append(int(entry))
    return found


def kill_servers(addresses, port: int, workdir: str) -> None:
    """SIGKILL every process of these servers until none is left; fails the test if one survives."""
    deadline = time.monotonic() + 10
    while True:
        left = server_processes(addresses, port, workdir)
        if not left:
            return
        assert time.monotonic() < deadline, f"fio server processes {left} survived SIGKILL"
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


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


@contextlib.contextmanager
def namespaces(count: int):
    """Yield [(network namespace, address)] for `count` hosts, the namespace None where they cannot be made
    (then the hosts are loopback addresses of this machine); removed afterwards."""
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
                for cmd in (["ip", "netns", "add", ns], ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                            ["ip", "addr", "add", f"10.231.{n}.1/24", "dev", veth], ["ip", "link", "set", veth, "up"],
                            ["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"], ["ip", "-n", ns, "link", "set", "eth0", "up"],
                            ["ip", "-n", ns, "link", "set", "lo", "up"]):
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
    """Yield [(address, server process)] for `count` hosts, each server started in `workdir`
    (default: a directory of its own that is removed afterwards), where fio writes its prerun output."""
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    own_workdir = workdir is None
    workdir = tempfile.mkdtemp(prefix="ckplan-fio-server-") if own_workdir else workdir
    servers = []
    try:
        with namespaces(count) as hosts:
            try:
                for ns, addr in hosts:
                    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["fio", f"--server=ip:{addr},{port}"]
                    # the server dies with this process too (ip netns exec execs fio, which keeps the setting)
                    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                            start_new_session=True, cwd=workdir, preexec_fn=children.preexec())
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
