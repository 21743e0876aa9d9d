"""A real S3 HTTP endpoint on 127.0.0.1 (moto's standalone server), and a proxy that drops uploads."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ACCESS_KEY = "AKIACKPLANTESTKEY123"
SECRET_KEY = "ckplan-test-secret-must-never-be-printed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def credentials_env(tmp: Path | None = None) -> dict:
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}
    if tmp is not None:  # keep the user's own ~/.aws out of the tests
        env.update(AWS_CONFIG_FILE=str(tmp / "config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp / "credentials"))
    return env


@contextlib.contextmanager
def moto_server(extra_env: dict | None = None):
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("moto's server is not installed (pip install 'moto[server]')")
    port = free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(extra_env or {})})
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
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                        aws_secret_access_key=secret)


def leftovers(endpoint: str, bucket: str) -> tuple[list[str], list[str]]:
    s3 = s3_client(endpoint)
    objects = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    uploads = [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    return objects, uploads


class DroppingProxy:
    """Forwards 127.0.0.1:port to the endpoint; a connection that sends more than `limit` bytes is cut
    mid-request, as a server that dies or resets under load would. Small requests pass."""

    def __init__(self, endpoint: str, limit: int = 2 * 2**20):
        self.target = ("127.0.0.1", int(endpoint.rsplit(":", 1)[1]))
        self.limit = limit
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

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

    def _pipe(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                sent += len(data)
                if counted and sent > self.limit:
                    raise ConnectionResetError
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
