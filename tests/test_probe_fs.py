"""`ckplan probe` against real directories with the real fio binary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckplan.planning.policy import DEFAULT_SERIALIZE_BYTES_PER_S

from tests.conftest import assert_one_line_error, ckplan_exe, run_cli, run_json
from tests.mounts import loop_fs, mounted, needs_root, sshfs_loopback

pytestmark = pytest.mark.fio
SCRATCH = ".ckplan-probe-"


def scratch_dirs(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.name.startswith(SCRATCH)]


def quick(path: Path, *extra: str) -> dict:
    """A quick probe without the serialiser calibration (tests/test_calibrate.py covers it): ~12 s less each."""
    profile = run_json("probe", str(path), "--quick", "--writers", "2", "--no-calibrate", *extra)
    assert scratch_dirs(path) == [], "the probe left its scratch directory behind"
    return profile


def check_figures(p: dict) -> None:
    paths = ["buffered", "direct"] if p["direct_io"] else ["buffered"]
    curves = {path: p[f"{path}_bandwidth"] for path in paths}
    assert p["direct_bandwidth"] == [] or p["direct_io"]
    for curve in curves.values():
        assert [b["writers"] for b in curve] == [1, 2]
        assert all(b["bytes_per_s"] > 10e6 for b in curve)  # any real target here beats 10 MB/s
    assert p["best_write_bytes_per_s"] == max(b["bytes_per_s"] for b in p["buffered_bandwidth"])
    # a small file costs at least one create, write, fsync and close; no target here does more than 1M of those a second
    assert 10 < p["small_files"]["files_per_s"] < 1e6
    assert p["small_files"]["ops_per_s"] >= 4 * p["small_files"]["files_per_s"]
    lat = p["fsync_latency"]
    assert 0 < lat["p50_s"] <= lat["p99_s"] <= p["fsync_latency"]["p999_s"] < 5
    assert p["raw_fio"] and all("fio version" in doc for doc in p["raw_fio"])
    # one buffered warm-up run at the most writers, kept for audit, then each point of each path once (--quick: one repeat)
    runs = 1 + 2 * len(paths)
    names = [doc["jobs"][0]["jobname"] for doc in p["raw_fio"][:runs]]
    assert names == ["warm-up-buffered-2"] + [f"bw-{path}-{w}" for path in paths for w in (1, 2)]
    # each path's fio jobs ran with that path's O_DIRECT setting, and each curve holds its own runs' figures
    for i, path in enumerate(paths):
        docs = p["raw_fio"][1 + 2 * i:3 + 2 * i]
        assert [d["jobs"][0]["job options"]["direct"] for d in docs] == ["1" if path == "direct" else "0"] * 2
        assert [b["bytes_per_s"] for b in curves[path]] == [d["jobs"][0]["write"]["bw_bytes"] for d in docs]
    # small files: calibration, warm-up, measured run; never more than 1,024 files per writer in a directory
    small = [int(d["jobs"][0]["job options"]["nrfiles"]) for d in p["raw_fio"] if d["jobs"][0]["jobname"] == "smallfiles"]
    assert len(small) == 3 and small[0] <= 32 and all(8 <= n <= 1024 for n in small)
    assert p["measurement"]["tool"] == "fio-3.33"


def test_probe_disk_directory(tmp_path):
    p = quick(tmp_path)
    check_figures(p)
    assert p["fs_type"] not in ("tmpfs", "unknown") and p["direct_io"] is True
    assert p["measurement"]["duration_s"] < 15


def test_probe_dev_shm():
    shm = Path("/dev/shm")
    p = quick(shm)
    check_figures(p)
    assert (p["fs_type"], p["storage_class"], p["shared"]) == ("tmpfs", "tmpfs", False)


def test_replay_of_a_plan(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", "--json", check=True).stdout)
    target = tmp_path / "target"
    target.mkdir()
    p = quick(target, "--plan", str(plan), "--scale", "0.01")
    check_figures(p)
    r = p["replay"]
    plan_data = json.loads(plan.read_text())
    assert r["files"] == plan_data["file_count"] and r["writers"] == 2 and r["scale"] == 0.01
    assert r["bytes"] == pytest.approx(plan_data["total_bytes"] * 0.01, rel=0.01)
    # A durable replay cannot beat the fastest flushed bandwidth fio measured. Slack of 2x: the two
    # phases run seconds apart on a shared VM, and small replays (a few MB per file) finish in the
    # device's write cache before fsync, which fio's longer runs do not.
    assert r["seconds"] >= r["bytes"] / p["best_write_bytes_per_s"] / 2
    assert r["full_scale_seconds"] == pytest.approx(r["seconds"] * 100, rel=0.02)
    # torch is installed here: a buffered plan is replayed through its framework's saver (torch.save for deepspeed)
    assert (r["method"], r["write_path"]) == ("framework saver", "buffered")


def test_direct_io_plan_is_replayed_with_o_direct_and_its_serialiser_added(tmp_path):
    """A FastPersist plan (DeepSpeed writer=fast) takes the direct path: raw bytes with O_DIRECT, the busiest
    writer's torch.save time added at full size from the named default (no calibration in this probe)."""
    plan = tmp_path / "plan.json"
    plan.write_text(run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", "--option", "writer=fast",
                            "--json", check=True).stdout)
    plan_data = json.loads(plan.read_text())
    assert plan_data["write_path"] == "direct"
    target = tmp_path / "target"
    target.mkdir()
    p = quick(target, "--plan", str(plan), "--scale", "0.01")
    r = p["replay"]
    assert (r["method"], r["write_path"]) == ("raw bytes", "direct")
    busiest = max(sum(f["bytes"] for f in plan_data["manifest"] if f["rank"] == rank and f["format"] == "torch.save")
                  for rank in (0, 1))
    assert r["serialize_seconds"] == pytest.approx(busiest / DEFAULT_SERIALIZE_BYTES_PER_S["torch.save"], rel=1e-6)
    assert r["full_scale_seconds"] == pytest.approx(r["seconds"] * 100 + r["serialize_seconds"], rel=0.02)
    # the quick preset: one warm-up, then one counted run
    assert r["spread"]["repeats"] == 1


def test_paths_with_spaces_colons_and_commas(tmp_path):
    odd = tmp_path / "a dir:with,odd chars"
    odd.mkdir()
    p = quick(odd)
    assert p["target"] == str(odd)


@pytest.mark.parametrize("name", ["run#1", "a;b"])
def test_paths_fio_cannot_take_are_refused_before_writing(tmp_path, name):
    odd = tmp_path / name
    odd.mkdir()
    assert_one_line_error(run_cli("probe", str(odd), "--quick"), "fio cannot use a path containing")
    assert list(odd.iterdir()) == []


@pytest.mark.parametrize("args,fragment", [
    (["/definitely/not/here"], "does not exist"), (["/etc/hostname"], "not a directory"),
    (["--quick", "--thorough", "/tmp"], "not both"), (["/tmp", "--scale", "2"], "--scale"),
    (["/tmp", "--max-bytes", "1MB"], "too little free space"), (["/tmp", "--plan", "/nonexistent.json"], "cannot read plan"),
])
def test_bad_targets_and_flags(args, fragment):
    assert_one_line_error(run_cli("probe", *args), fragment)


def test_block_device_refused():
    dev = next((d for d in ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/loop0") if os.path.exists(d)), None)
    if dev is None:
        pytest.skip("no block device node here")
    assert_one_line_error(run_cli("probe", dev), "device")


def test_fio_missing_says_how_to_install(tmp_path):
    env = {"PATH": str(Path(sys.executable).parent)}
    assert_one_line_error(run_cli("probe", str(tmp_path), env=env), "apt-get install fio", code=3)  # environment


def test_replay_too_big_suggests_scale(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(run_cli("size", "--params", "70B", "--json", check=True).stdout)
    assert_one_line_error(run_cli("probe", str(tmp_path), "--plan", str(plan), "--max-bytes", "1GB"), "--scale")


def _start_probe(path: Path, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(ckplan_exe() + ["probe", str(path), "--writers", "2", "--no-calibrate", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not scratch_dirs(path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # let fio get going
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_cleans_up(tmp_path, sig):
    proc = _start_probe(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert scratch_dirs(tmp_path) == []
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True).stdout == b"", "fio still runs"


def test_kill_9_then_clean(tmp_path):
    proc = _start_probe(tmp_path)
    proc.kill()
    proc.wait()
    left = scratch_dirs(tmp_path)
    assert len(left) == 1
    warned = run_json("probe", str(tmp_path), "--quick", "--writers", "1", "--no-calibrate")
    assert any("ckplan clean" in n for n in warned["notes"])
    result = run_json("clean", str(tmp_path))
    assert result["removed"] == [str(left[0])]
    assert scratch_dirs(tmp_path) == []


@needs_root
def test_read_only_filesystem(tmp_path):
    with mounted(tmp_path / "ro", "tmpfs", "ro,size=16m") as ro:
        assert_one_line_error(run_cli("probe", str(ro)), "read-only")


@needs_root
def test_ramfs_refuses_direct_io_so_buffered_is_used(tmp_path):
    with mounted(tmp_path / "ram", "ramfs") as ram:
        p = quick(ram)
        assert p["direct_io"] is False and any("O_DIRECT" in n for n in p["notes"])
        assert p["storage_class"] == "tmpfs" and p["fs_type"] == "ramfs"
        check_figures(p)


@needs_root
@pytest.mark.parametrize("mkfs,fs_type", [("mkfs.xfs", "xfs"), ("mkfs.btrfs", "btrfs")])
def test_loop_mounted_filesystems(tmp_path, mkfs, fs_type):
    with loop_fs(tmp_path, mkfs) as mnt:
        p = quick(mnt)
        assert (p["fs_type"], p["storage_class"], p["mount_point"]) == (fs_type, "local-disk", str(mnt))
        check_figures(p)


@needs_root
def test_fuse_sshfs_over_loopback(tmp_path):
    with sshfs_loopback(tmp_path) as mnt:
        p = quick(mnt)
        assert (p["fs_type"], p["storage_class"], p["shared"]) == ("fuse.sshfs", "fuse", True)
        check_figures(p)
