"""The recorder inside a training job that meets what it cannot control: a bad environment, a stepped clock, a
record path that is a FIFO, a symbolic link or on a read-only or full file system. Each run is a real process
that saves twice with ckplan.record's torch.save adapter and trains a step after each save: the job goes on and
exits 0, the saves are on disk, the recorder says once (a RecordDropped warning) what it dropped, never waits on
the record file, and never leaves part of a line in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

# a job that saves twice through the adapter, trains a step after each save, and says where it got to
JOB = textwrap.dedent(
    """
    import sys, time
    if "--clock-steps-back" in sys.argv:  # every wall-clock reading after the first is an hour earlier
        real, calls = time.time, []
        def stepped():
            calls.append(1)
            return real() - (3600 if len(calls) > 1 else 0)
        time.time = stepped
    import torch
    from ckplan.record import torch_save
    record, out = sys.argv[1], sys.argv[2]
    model = torch.nn.Linear(8, 8)
    started = time.monotonic()
    for step in (1, 2):
        torch_save(record, model.state_dict(), f"{out}/step-{step}.pt", step=step)
        model(torch.ones(1, 8)).sum().backward()
        print(f"trained step {step}", flush=True)
    print(f"elapsed {time.monotonic() - started}")
    """
)
# a FIFO with no reader, a full disk: a recorder that blocked would hold the job this long before the test fails
JOB_TIMEOUT_S = 60
PAGE = os.sysconf("SC_PAGE_SIZE")  # tmpfs gives a file's data whole pages


def job(
    tmp_path: Path, record: Path, *args: str, python: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "PYTHONWARNINGS")}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *python, "-c", JOB, str(record), str(out), *args],
        capture_output=True,
        text=True,
        env={**environ, **(env or {})},
        timeout=JOB_TIMEOUT_S,
    )
    proc.wall_s = time.monotonic() - started  # type: ignore[attr-defined]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained step 1\ntrained step 2\n" in proc.stdout, proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["step-1.pt", "step-2.pt"]
    return proc


def dropped_once(proc: subprocess.CompletedProcess, reason: str) -> None:
    """Two saves, one warning: the reason said once, on one line naming it."""
    lines = [line for line in proc.stderr.splitlines() if "ckplan.record: record dropped" in line]
    assert len(lines) == 1, proc.stderr
    assert reason in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"RANK": "x"}, "RANK='x' is not a whole number"),
        ({"RANK": "4", "WORLD_SIZE": "4"}, "rank 4 is not below world_size 4"),
        ({"WORLD_SIZE": "0"}, "world_size: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_environment_drops_the_record_not_the_job(tmp_path, env, reason):
    record = tmp_path / "saves.jsonl"
    dropped_once(job(tmp_path, record, env=env), reason)
    assert not record.exists()


def test_a_fifo_with_no_reader_is_never_waited_on(tmp_path):
    record = tmp_path / "saves.jsonl"
    os.mkfifo(record)
    proc = job(tmp_path, record)
    dropped_once(proc, "No such device or address")
    assert proc.wall_s < JOB_TIMEOUT_S / 2  # type: ignore[attr-defined]


def test_a_fifo_with_a_reader_gets_nothing(tmp_path):
    record = tmp_path / "saves.jsonl"
    os.mkfifo(record)
    reader = os.open(record, os.O_RDONLY | os.O_NONBLOCK)
    try:
        dropped_once(job(tmp_path, record), "is not a regular file")
        assert os.read(reader, 4096) == b""  # no byte came, and no writer holds it open
    finally:
        os.close(reader)


def test_a_symbolic_link_is_not_followed(tmp_path):
    target = tmp_path / "someone-elses-file"
    target.write_text("theirs\n")
    record = tmp_path / "saves.jsonl"
    record.symlink_to(target)
    dropped_once(job(tmp_path, record), "Too many levels of symbolic links")
    assert target.read_text() == "theirs\n"


def test_warnings_as_errors_do_not_raise_into_the_job(tmp_path):
    """`python -W error`: the warning would be an exception; it is logged instead."""
    record = tmp_path / "saves.jsonl"
    os.mkfifo(record)
    dropped_once(job(tmp_path, record, python=("-W", "error")), "No such device or address")


def test_a_wall_clock_stepped_back_during_the_save_changes_no_duration(tmp_path):
    """The clock steps back an hour between the save's start and its end: the line is kept, with the save's real
    duration (the monotonic clock's), not an hour less."""
    record = tmp_path / "saves.jsonl"
    proc = job(tmp_path, record, "--clock-steps-back")
    assert "record dropped" not in proc.stderr, proc.stderr
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    elapsed = float(proc.stdout.split("elapsed ")[1])
    for line in lines:
        assert 0 < line["seconds"] < elapsed
        assert line["end"] == pytest.approx(line["start"] + line["seconds"], abs=1e-6)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs of this test's own (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "small"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "ckplan-test-small", str(point)], check=True)
    yield point
    subprocess.run(["umount", "-l", str(point)], check=True)


def test_a_read_only_file_system_drops_the_record(tmp_path, small_tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    dropped_once(job(tmp_path, small_tmpfs / "saves.jsonl"), "Read-only file system")


def test_a_full_file_system_leaves_no_part_of_a_line(tmp_path, small_tmpfs):
    """Lines written before the disk filled stay whole; the lines that did not fit leave nothing behind, so that
    the next append, once there is room, is not glued onto half a line."""
    record = small_tmpfs / "saves.jsonl"
    job(tmp_path, record)
    before = record.read_bytes()
    assert len(before.splitlines()) == 2
    # blank lines (which readers skip) bring the file to 100 bytes short of a page's end: the next line's first 100
    # bytes fit in the page the file already holds, and the rest needs a page the full disk does not have
    with open(record, "ab") as f:
        f.write(b"\n" * (PAGE - 100 - len(before) % PAGE))
    before = record.read_bytes()
    filler = small_tmpfs / "filler"
    try:
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * PAGE)
                f.flush()
    except OSError:
        pass
    for out in (tmp_path / "out").iterdir():
        out.unlink()
    proc = job(tmp_path, record)
    assert record.read_bytes() == before
    lines = [line for line in proc.stderr.splitlines() if "record dropped" in line]
    assert len(lines) == 1 and "a short write" in lines[0], proc.stderr
    filler.unlink()
    job(tmp_path, record)
    assert [json.loads(line)["step"] for line in record.read_text().splitlines() if line] == [1, 2, 1, 2]
