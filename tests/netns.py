"""Test hosts: network namespaces joined to this machine by veth pairs, each running a real `fio --server`
(scripts/_harness.py, shared with the benchmarks); a test skips where fio or namespaces are missing."""

from __future__ import annotations

import contextlib

import pytest

from scripts import _harness
from scripts._harness import kill_servers, namespaces, server_processes

__all__ = ["fio_hosts", "kill_servers", "namespaces", "server_processes"]


@contextlib.contextmanager
def fio_hosts(count: int, port: int = 8765, workdir=None):
    try:
        with _harness.fio_hosts(count, port, workdir) as servers:
            yield servers
    except _harness.Unavailable as exc:
        pytest.skip(str(exc))
