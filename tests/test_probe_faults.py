"""Faults during a filesystem probe, with real fio, real mounts and real processes:
the byte budget holds for every phase, children die with ckplan, a concurrent probe is named,
and a failed measurement exits 4 leaving nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ckplan_exe, run_cli, run_json
from tests.mounts import mounted, needs_root

pytestmark = pytest.mark.fio
SCRATCH = ".ckplan-probe-"
CALIBRATE = "ckplan-calibrate-"
NO_CALIBRATE = ("--quick", "--no-calibrate")


def scratch_dirs(path: Path, prefix: str = SCRATCH) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.startswith(prefix))


def processes() -> dict[int, tuple[int, list[str], str]]:
    """pid -> (parent pid, argv, cwd) of every live process; zombies have no argv and are left out."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0") if a]
            stat = Path(f"/proc/{entry}/stat").read_text()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if argv and fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), argv, cwd)
    return out


def fio_touching(path: Path) -> list[int]:
    """fio processes whose arguments or working directory lie under `path`."""
    return [
        pid
        for pid, (_, argv, cwd) in processes().items()
        if os.path.basename(argv[0]) == "fio" and any(str(path) in a for a in argv[1:] + [cwd])
    ]


def descendants(root: int) -> list[int]:
    procs = processes()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, (ppid, _, _) in procs.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def saver_processes(root: int) -> list[int]:
    """The multiprocessing workers (save or calibration processes) started under `root`."""
    procs = processes()
    return [pid for pid in descendants(root) if pid in procs and "spawn_main" in " ".join(procs[pid][1])]


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ckplan exited {proc.returncode} before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def start_probe(path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        ckplan_exe() + ["probe", str(path), *NO_CALIBRATE, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


class PeakUse:
    """The most bytes in use on a filesystem above its level at the start, sampled every 2 ms."""

    def __init__(self, path: Path):
        self.path, self.peak, self._stop = path, 0, threading.Event()
        self._base = self._used()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._used() - self._base)
            time.sleep(0.002)

    def __enter__(self) -> PeakUse:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# --- the byte budget ---------------------------------------------------------------------------------------


@needs_root
def test_a_64_mb_target_can_be_probed(tmp_path):
    """Half of a 64 MiB tmpfs is 32 MiB: every phase fits, the latency file too (it was a fixed 64 MiB,
    so the probe failed on ENOSPC)."""
    with mounted(tmp_path / "small", "tmpfs", "size=64m") as small:
        p = run_json("probe", str(small), *NO_CALIBRATE)
        assert scratch_dirs(small) == []
    latency_sizes = [
        int(d["jobs"][0]["job options"]["size"])
        for d in p["raw_fio"]
        if d["jobs"][0]["jobname"] in ("fsync-lat", "sync-write-lat")
    ]
    assert len(latency_sizes) == 2 and all(s <= 32 * 2**20 for s in latency_sizes)
    assert p["fsync_latency"]["samples"] > 0 and p["sync_write_latency"]["samples"] > 0


@needs_root
def test_max_bytes_bounds_the_whole_probes_peak_use(tmp_path):
    """--max-bytes 10MB on a 96 MiB tmpfs (half the free space would allow 48 MiB): the space in use,
    sampled through the whole probe, never rises more than 10 MB (it rose by 65 MB before)."""
    with mounted(tmp_path / "t", "tmpfs", "size=96m") as mnt:
        with PeakUse(mnt) as use:
            proc = run_cli("probe", str(mnt), *NO_CALIBRATE, "--max-bytes", "10MB", "--json")
        assert proc.returncode == 0, proc.stderr
        assert scratch_dirs(mnt) == []
    assert use.peak > 4 * 2**20  # the sampler saw the probe's files at all
    assert use.peak <= 10_000_000, use.peak
    p = json.loads(proc.stdout)
    assert p["measurement"]["bandwidth_bytes_per_writer"] * 2 <= 10_000_000


# --- children die with ckplan ------------------------------------------------------------------------------


def test_kill_9_takes_fio_with_it_and_clean_removes_the_scratch(tmp_path):
    proc = start_probe(tmp_path, "--writers", "2")
    wait_for(lambda: fio_touching(tmp_path), 30, "fio to start", proc)
    time.sleep(0.3)  # fio is writing
    proc.kill()
    proc.wait()
    killed = time.monotonic()
    while fio_touching(tmp_path) and time.monotonic() - killed < 2:
        time.sleep(0.02)
    assert fio_touching(tmp_path) == [], "fio outlived ckplan"
    left = scratch_dirs(tmp_path)
    assert len(left) == 1  # kill -9 ran no clean-up: the directory is stale now
    result = run_json("clean", str(tmp_path))
    assert result["removed"] == [str(left[0])] and scratch_dirs(tmp_path) == []


def test_kill_9_during_calibrate_takes_its_workers_and_clean_removes_its_scratch():
    """The DCP calibration saves into /dev/shm from spawned processes; after kill -9 of ckplan they die
    with it, and `ckplan clean /dev/shm` knows the stale directory by its dead owner."""
    pytest.importorskip("torch")
    shm = Path("/dev/shm")
    before = set(scratch_dirs(shm, CALIBRATE))
    proc = subprocess.Popen(ckplan_exe() + ["calibrate", "--quick"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        mine = wait_for(
            lambda: [d for d in scratch_dirs(shm, CALIBRATE) if d not in before and f"-{proc.pid}-" in d.name],
            120,
            "the calibration's scratch directory",
            proc,
        )
        wait_for(lambda: len(saver_processes(proc.pid)) >= 2, 60, "the two save processes", proc)
        workers = descendants(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    killed = time.monotonic()
    while set(workers) & set(processes()) and time.monotonic() - killed < 2:
        time.sleep(0.02)
    assert not set(workers) & set(processes()), "a calibration process outlived ckplan"
    assert mine[0].exists()
    result = run_json("clean", str(shm))
    assert str(mine[0]) in result["removed"] and not mine[0].exists()


# --- every stopping signal undoes what ckplan started ---------------------------------------------------------


def assert_interrupted_and_gone(proc: subprocess.Popen, started: list[int], err: str) -> None:
    """Exit 130 with the one line, and no process ckplan started (fio, a save or calibration process) left."""
    assert proc.returncode == 130, err
    assert one_error_line(err) == "ckplan: interrupted"
    ended = time.monotonic()
    while set(started) & set(processes()) and time.monotonic() - ended < 2:
        time.sleep(0.02)
    assert not set(started) & set(processes()), "a process ckplan started outlived it"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=lambda sig: sig.name)
def test_sighup_and_sigquit_mid_probe_remove_the_scratch_and_fio(tmp_path, sig):
    proc = start_probe(tmp_path, "--writers", "2")
    wait_for(lambda: fio_touching(tmp_path), 30, "fio to start", proc)
    started = descendants(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert_interrupted_and_gone(proc, started, err)
    assert scratch_dirs(tmp_path) == [] and fio_touching(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=lambda sig: sig.name)
def test_sighup_and_sigquit_mid_validate_remove_the_saves_and_their_processes(tmp_path, sig):
    pytest.importorskip("torch")
    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", "--json", check=True).stdout
    )
    target = tmp_path / "target"
    target.mkdir()
    argv = ["validate", str(target), "--plan", str(plan), "--storage", "local-nvme", "--scale", "0.002"]
    proc = subprocess.Popen(
        ckplan_exe() + [*argv, "--repeats", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: len(saver_processes(proc.pid)) >= 2 and os.listdir(target), 120, "the save processes", proc)
    started = descendants(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert_interrupted_and_gone(proc, started, err)
    assert os.listdir(target) == []


def test_sigterm_mid_calibrate_removes_its_scratch_in_one_line():
    pytest.importorskip("torch")
    shm = Path("/dev/shm")
    proc = subprocess.Popen(
        ckplan_exe() + ["calibrate", "--quick"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    mine = wait_for(
        lambda: [d for d in scratch_dirs(shm, CALIBRATE) if f"-{proc.pid}-" in d.name],
        120,
        "the calibration's scratch directory",
        proc,
    )
    wait_for(lambda: len(saver_processes(proc.pid)) >= 2, 60, "the two save processes", proc)
    started = descendants(proc.pid)
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert_interrupted_and_gone(proc, started, err)
    assert not mine[0].exists()


# --- concurrent probes -------------------------------------------------------------------------------------


def test_two_probes_at_once_each_name_the_other(tmp_path):
    procs = [start_probe(tmp_path, "--writers", "1", "--json") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    for me, other, (out, err) in ((procs[0], procs[1], outs[0]), (procs[1], procs[0], outs[1])):
        # the one wording every backend uses, naming the other probe's scratch directory and owner
        said = "another probe of this target ran at the same time ("
        (note,) = [n for n in json.loads(out)["notes"] if said in n]
        assert f"pid {other.pid})" in note and SCRATCH in note, (me.pid, note)
        assert f"ckplan: warning: {note}" in err
    assert scratch_dirs(tmp_path) == []


def test_a_probe_alone_gives_no_such_warning(tmp_path):
    # a stale directory of a killed probe is not a live one: it gets the clean-up note, not the warning
    stale = tmp_path / f"{SCRATCH}{os.uname().nodename}-999999999-dead"
    stale.mkdir()
    (stale / "ckplan-probe.json").write_text(json.dumps({"host": os.uname().nodename, "pid": 999999999}))
    proc = run_cli("probe", str(tmp_path), *NO_CALIBRATE, "--writers", "1", "--json")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    notes = json.loads(proc.stdout)["notes"]
    assert not [n for n in notes if "another ckplan probe" in n] and [n for n in notes if "ckplan clean" in n]


@pytest.mark.parametrize("marker", ["[1, 2]", '"text"', "null", "{not json"])
def test_clean_removes_a_scratch_directory_whose_marker_is_no_object(tmp_path, marker):
    # valid JSON that is not an object names no owner: such a directory is a leftover, as one without a marker
    odd = tmp_path / f"{SCRATCH}{os.uname().nodename}-999999999-odd"
    odd.mkdir()
    (odd / "ckplan-probe.json").write_text(marker)
    assert run_json("clean", str(tmp_path))["removed"] == [str(odd)] and not odd.exists()


# --- failed measurements: exit 4, one line, nothing left ---------------------------------------------------


def test_fio_killed_mid_run_is_a_failed_measurement(tmp_path):
    proc = start_probe(tmp_path, "--writers", "2")
    fio_pid = wait_for(lambda: fio_touching(tmp_path), 30, "fio to start", proc)[0]
    os.kill(fio_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    assert "fio was killed by SIGKILL" in one_error_line(err)
    assert scratch_dirs(tmp_path) == [] and fio_touching(tmp_path) == []


class Filler:
    """Keeps a filesystem full from outside the probe once `trigger()` is true: whatever the probe frees,
    the filler takes again."""

    def __init__(self, path: Path, trigger):
        self.path, self.trigger, self.started = path, trigger, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            if self.started or self.trigger():
                self.started = True
                st = os.statvfs(self.path)
                if st.f_bavail:
                    n += 1
                    with open(self.path / f"filler-{n}", "wb") as f, contextlib.suppress(OSError):
                        os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize)
            time.sleep(0.005)

    def __enter__(self) -> Filler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for f in self.path.glob("filler-*"):
            f.unlink()


@needs_root
def test_target_fills_up_during_fio(tmp_path):
    """Another writer fills a 96 MiB tmpfs once fio is running: exit 4, one line, nothing left."""
    with mounted(tmp_path / "small", "tmpfs", "size=96m") as small:
        proc = start_probe(small, "--writers", "2")
        with Filler(small, lambda: fio_touching(small)) as filler:
            _, err = proc.communicate(timeout=60)
        assert filler.started
        assert proc.returncode == 4, err
        assert "ENOSPC" in one_error_line(err)
        assert scratch_dirs(small) == [] and fio_touching(small) == []


@needs_root
def test_target_fills_up_during_the_replay(tmp_path):
    """The plan's replay (torch.save from one process per rank) meets a full target: the failed save
    is reported as ENOSPC with exit 4, the other rank is stopped, and nothing is left."""
    pytest.importorskip("torch")
    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", "--json", check=True).stdout
    )
    with mounted(tmp_path / "small", "tmpfs", "size=96m") as small:
        proc = start_probe(small, "--writers", "2", "--plan", str(plan), "--scale", "0.001")
        before = set(processes())
        # the save processes take seconds to import torch before they write: the target fills up meanwhile
        with Filler(small, lambda: saver_processes(proc.pid)) as filler:
            _, err = proc.communicate(timeout=120)
        assert filler.started
        assert proc.returncode == 4, err
        line = one_error_line(err)
        assert "ENOSPC" in line and "replay" in line
        assert scratch_dirs(small) == []
    time.sleep(0.5)
    savers = [
        pid for pid, (_, argv, _) in processes().items() if pid not in before and "multiprocessing" in " ".join(argv)
    ]
    assert savers == [], "a save process outlived the failed probe"
