"""`ckplan watch` sees a real fio write burst on the disk behind a path."""

import json
import shutil
import subprocess
import time

import pytest

from tests.conftest import assert_one_line_error, ckplan_exe, run_cli

pytestmark = pytest.mark.fio


def test_watch_sees_a_fio_burst(tmp_path):
    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    csv = tmp_path / "timeline.csv"
    watcher = subprocess.Popen(
        ckplan_exe()
        + ["watch", str(tmp_path), "--interval", "0.25", "--duration", "6", "--record", str(csv), "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    subprocess.run(
        [
            "fio",
            "--name=burst",
            f"--directory={tmp_path}",
            "--rw=write",
            "--bs=1M",
            "--size=768M",
            "--direct=1",
            "--ioengine=psync",
            "--end_fsync=1",
            "--unlink=1",
            "--output-format=json",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    out, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0
    r = json.loads(out)
    written = sum(s["write_bytes_per_s"] * 0.25 for s in r["samples"])
    assert written > 300e6, "watch saw less than half of the 768 MiB fio wrote"
    assert r["write_bytes_per_s"]["peak"] > 50e6 and r["write_iops"]["peak"] > 50
    assert r["util_percent"]["peak"] > 10 and r["w_await_ms"]["peak"] > 0
    quiet = [s for s in r["samples"] if s["t"] < 0.9]
    assert quiet and all(s["write_bytes_per_s"] < r["write_bytes_per_s"]["peak"] for s in quiet)
    rows = csv.read_text().splitlines()
    assert (
        rows[0].startswith("t,write_bytes_per_s,write_iops,util_percent,w_await_ms")
        and len(rows) == len(r["samples"]) + 1
    )


def test_watch_bad_targets(tmp_path):
    assert_one_line_error(run_cli("watch", "/dev/shm", "--duration", "1"), "no block device")
    assert_one_line_error(run_cli("watch", "/definitely/not/here"), "neither a path nor a block device")
    assert_one_line_error(run_cli("watch", str(tmp_path), "--interval", "0"), "--interval")
