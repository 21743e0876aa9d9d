"""Test hosts running real fio servers (scripts/_harness.py, shared with the benchmarks), skipped without fio."""

from __future__ import annotations

import contextlib
import shutil

import pytest

from scripts import _harness


@contextlib.contextmanager
def fio_hosts(count: int, port: int = 8765, workdir=None):
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    with _harness.fio_hosts(count, port, workdir) as servers:
        yield servers
