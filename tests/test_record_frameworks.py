"""ckplan.record's adapters inside the real frameworks: each run of tests/framework_saves.py with CKPLAN_TEST_RECORD
saves through the framework's adapter, and its record is checked against the save on disk and the run's own clock:
- one line per rank that saves, with the run's step, rank and world size;
- bytes and files equal to the save's directory on disk, walked here with os.walk;
- the record's start and end inside the wall-clock span the run measured around the call that saves, and every
  file of the save modified inside the record's start and end (the saves' own timestamps: the window is the save);
- `ckplan diagnose` reads it, and `ckplan validate --record` compares it with a plan from `ckplan size --config` for
  the same tiny model.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from ckplan.diagnose.logs import extract
from tests.conftest import run_json
from tests.framework_saves import STEPS
from tests.test_framework_oracle import launch, scratch  # noqa: F401  (scratch: the oracle's fixture)

pytestmark = pytest.mark.frameworks

# an mtime is the kernel's coarse clock (one tick, 4 ms at HZ=250, behind time.time()); a file written at the
# save's first instant can carry a stamp this much before the record's start
MTIME_SLACK_S = 0.02


def on_disk(paths: list[Path]) -> tuple[int, int, float, float]:
    """(bytes, files, oldest mtime, newest mtime) of the regular files under `paths`, by os.walk."""
    total = files = 0
    mtimes = []
    for top in paths:
        found = [top] if top.is_file() else [Path(root) / n for root, _, names in os.walk(top) for n in names]
        for path in found:
            st = path.lstat()
            if path.is_file() and not path.is_symlink():
                total, files = total + st.st_size, files + 1
                mtimes.append(st.st_mtime)
    return total, files, min(mtimes), max(mtimes)


def recorded(scratch: Path, monkeypatch, kind: str, ranks: int, name: str, case: str) -> tuple[Path, list[dict]]:  # noqa: F811
    """Run the case with its adapter; the directory it saved into and its record's lines, each checked against the
    rank's wall-clock span."""
    record = scratch / f"{name}.jsonl"
    monkeypatch.setenv("CKPLAN_TEST_RECORD", str(record))
    out = launch(scratch, kind, ranks, name, case)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    for line in lines:
        wall = json.loads(Path(f"{record}.wall-{line['rank']}").read_text())
        assert wall["start"] <= line["start"] <= line["end"] <= wall["end"], (line, wall)
        assert line["seconds"] == pytest.approx(line["end"] - line["start"], abs=1e-6)
    return out, lines


def check_lines(lines: list[dict], ranks: list[int], world: int, framework: str, save: list[Path]) -> None:
    nbytes, files, oldest, newest = on_disk(save)
    assert sorted(line["rank"] for line in lines) == ranks
    for line in lines:
        assert (line["format"], line["version"], line["framework"]) == ("ckplan.save-record", 1, framework)
        assert (line["step"], line["world_size"]) == (STEPS, world)
    # the directory as the rank that finished last saw it: every file, each at its final size
    last = max(lines, key=lambda line: line["end"])
    assert (last["bytes"], last["files"]) == (nbytes, files)
    assert max(line["bytes"] for line in lines) == nbytes
    assert min(line["start"] for line in lines) - MTIME_SLACK_S <= oldest
    assert newest <= max(line["end"] for line in lines) + MTIME_SLACK_S


def diagnose_and_validate(scratch: Path, record: Path, size_args: list[str], nbytes: int, lines: list[dict]) -> dict:  # noqa: F811
    """`diagnose` on the record, and `validate --record` against `size --config` for the same model."""
    d = run_json("diagnose", str(record))
    (step,) = d["steps"]
    slowest = max(lines, key=lambda line: line["seconds"])
    assert (step["step"], step["bytes"], step["ranks"]) == (STEPS, nbytes, len(lines))
    assert step["seconds"] == slowest["seconds"] and step["slowest_rank"] == slowest["rank"]
    assert step["spread_s"] == pytest.approx(slowest["seconds"] - min(line["seconds"] for line in lines))
    assert d["timeout_warning"] is None
    plan_file = scratch / f"{record.stem}-plan.json"
    plan = run_json("size", "--config", str(scratch / "model" / "config.json"), *size_args)
    plan_file.write_text(json.dumps(plan))
    v = run_json("validate", "--record", str(record), "--plan", str(plan_file), "--storage", "local-nvme")
    assert (v["recorded_bytes"], v["plan_bytes"]) == (nbytes, plan["total_bytes"])
    assert v["bytes_error_percent"] == pytest.approx((plan["total_bytes"] - nbytes) / nbytes * 100)
    assert v["measured"]["median"] == slowest["seconds"]
    assert v["error_percent"] == pytest.approx((v["predicted_seconds"] - slowest["seconds"]) / slowest["seconds"] * 100)
    assert v["off"] not in ("scale", "bytes"), v["diagnosis"]  # the plan is this save, at this world size
    return v


@pytest.mark.parametrize("ranks", [1, 2])
def test_hf_trainer(scratch, monkeypatch, ranks):  # noqa: F811
    out, lines = recorded(scratch, monkeypatch, "hf", ranks, f"record-hf-{ranks}", "ddp-bf16")
    save = out / f"checkpoint-{STEPS}"
    check_lines(lines, list(range(ranks)), ranks, "hf", [save])
    nbytes = on_disk([save])[0]
    diagnose_and_validate(
        scratch, scratch / f"record-hf-{ranks}.jsonl", ["--framework", "hf", "--gpus", str(ranks)], nbytes, lines
    )


@pytest.mark.parametrize("case", ["bf16-mixed", "bf16-mixed-async"])
def test_lightning(scratch, monkeypatch, case):  # noqa: F811
    name = f"record-lightning-{case}"
    out, lines = recorded(scratch, monkeypatch, "lightning", 1, name, case)
    (save,) = (out / "checkpoints").iterdir()
    check_lines(lines, [0], 1, "lightning", [save])
    (line,) = lines
    assert (line["counted"], line["path"], line["files"]) == ("own files", str(save), 1)
    if case.endswith("-async"):  # AsyncCheckpointIO: the clone and submit, then the write in its worker thread
        assert line["mode"] == "async" and line["persist_seconds"] > 0
        assert line["blocking_seconds"] + line["persist_seconds"] == pytest.approx(line["seconds"], abs=1e-6)
    else:
        assert line["mode"] == "sync"
    diagnose_and_validate(
        scratch, scratch / f"{name}.jsonl", ["--framework", "lightning", "--gpus", "1"], save.stat().st_size, lines
    )


@pytest.mark.parametrize("case", ["ddp", "ddp-async"])
def test_dcp(scratch, monkeypatch, case):  # noqa: F811
    out, lines = recorded(scratch, monkeypatch, "dcp", 2, f"record-dcp-{case}", case)
    save = out / f"step-{STEPS}"
    check_lines(lines, [0, 1], 2, "dcp", [save])
    # dcp.save returns on every rank after rank 0's .metadata: each rank saw the whole directory
    nbytes = on_disk([save])[0]
    assert [line["bytes"] for line in lines] == [nbytes, nbytes]
    if case == "ddp-async":
        for line in lines:
            assert line["mode"] == "async"
            assert line["blocking_seconds"] + line["persist_seconds"] == pytest.approx(line["seconds"], abs=1e-6)
            assert line["persist_seconds"] > 0
    else:
        assert all(line["mode"] == "sync" and line["persist_seconds"] is None for line in lines)
    v = diagnose_and_validate(
        scratch,
        scratch / f"record-dcp-{case}.jsonl",
        ["--framework", "dcp", "--gpus", "2", "--zero", "0"],
        nbytes,
        lines,
    )
    if case == "ddp-async":
        assert v["measured_blocking"]["median"] == max(line["blocking_seconds"] for line in lines)


def test_deepspeed(scratch, monkeypatch):  # noqa: F811
    out, lines = recorded(scratch, monkeypatch, "deepspeed", 2, "record-deepspeed", "z1-bf16")
    save = out / "z1-bf16"
    check_lines(lines, [0, 1], 2, "deepspeed", [save])
    # save_checkpoint ends in a barrier: each rank saw the whole save (the tag directory, latest, the scripts)
    nbytes = on_disk([save])[0]
    assert [line["bytes"] for line in lines] == [nbytes, nbytes]
    assert lines[0]["path"] == str(save / f"global_step{STEPS}")
    diagnose_and_validate(
        scratch,
        scratch / "record-deepspeed.jsonl",
        ["--framework", "deepspeed", "--gpus", "2", "--zero", "1"],
        nbytes,
        lines,
    )


@pytest.mark.parametrize("ranks", [1, 2])
def test_accelerate(scratch, monkeypatch, ranks):  # noqa: F811
    log = scratch / f"accelerate-{ranks}.log"
    monkeypatch.setenv("CKPLAN_TEST_LOG", str(log))
    out, lines = recorded(scratch, monkeypatch, "accelerate", ranks, f"record-accelerate-{ranks}", "bf16")
    save = out / "checkpoints" / "checkpoint_0"
    check_lines(lines, list(range(ranks)), ranks, "accelerate", [save])
    assert {line["path"] for line in lines} == {str(save)}
    nbytes = on_disk([save])[0]
    args = ["--framework", "accelerate", "--gpus", str(ranks)]
    diagnose_and_validate(scratch, scratch / f"record-accelerate-{ranks}.jsonl", args, nbytes, lines)
    # the same save read back from Accelerate's own log: from "Saving current state to DIR" to the main process's
    # last line naming DIR, inside the main process's recorded save (asctime keeps milliseconds, cut, not rounded)
    (found,), _, _ = extract([log])
    saying = [ln for ln in log.read_text().splitlines() if str(save) in ln]
    first, last = (dt.datetime.strptime(ln[:23], "%Y-%m-%d %H:%M:%S,%f") for ln in (saying[0], saying[-1]))
    assert "Saving current state to" in saying[0] and "random_states_0.pkl" in saying[-1]
    assert (found.source, found.label) == ("accelerate", "checkpoint_0")
    assert found.seconds > 0 and found.seconds == pytest.approx((last - first).total_seconds(), abs=1e-6)
    (main,) = [line for line in lines if line["rank"] == 0]
    assert found.seconds <= main["seconds"] + 0.001, (found.seconds, main["seconds"])


@pytest.mark.parametrize(
    ("kind", "ranks", "case", "saved"),
    [
        ("hf", 1, "ddp-bf16", f"checkpoint-{STEPS}"),
        ("lightning", 1, "bf16-mixed-async", "checkpoints"),
        ("dcp", 2, "ddp-async", f"step-{STEPS}"),
        ("deepspeed", 2, "z1-bf16", "z1-bf16"),
        ("accelerate", 2, "bf16", "checkpoints"),
    ],
)
def test_a_record_path_that_is_a_fifo_stalls_no_save(scratch, monkeypatch, kind, ranks, case, saved):  # noqa: F811
    """A FIFO with no reader where the record should go: opening it for writing would block forever, so the adapter
    must refuse it and the job must go on: the run exits 0, each rank's call that saves returns (its wall file is
    written after it), the save is on disk, and the FIFO got nothing."""
    name = f"fifo-{kind}"
    record = scratch / f"{name}.jsonl"
    os.mkfifo(record)
    monkeypatch.setenv("CKPLAN_TEST_RECORD", str(record))
    out = launch(scratch, kind, ranks, name, case)
    for rank in range(ranks):
        wall = json.loads(Path(f"{record}.wall-{rank}").read_text())
        assert wall["start"] <= wall["end"]
    assert any((out / saved).iterdir())
    fd = os.open(record, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert os.read(fd, 1) == b""
    finally:
        os.close(fd)
