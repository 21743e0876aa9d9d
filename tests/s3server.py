"""The test S3 endpoint (scripts/_harness.py, shared with the benchmarks), skipped where moto is not installed."""

from __future__ import annotations

import contextlib

import pytest

from scripts import _harness
from scripts._harness import (  # noqa: F401
    ACCESS_KEY,
    SECRET_KEY,
    CountingProxy,
    DroppingProxy,
    credentials_env,
    free_port,
    leftovers,
    s3_client,
)


@contextlib.contextmanager
def moto_server(extra_env: dict | None = None):
    try:
        _harness.moto_server_exe()
    except _harness.Unavailable as exc:
        pytest.skip(str(exc))
    with _harness.moto_server(extra_env) as url:
        yield url
