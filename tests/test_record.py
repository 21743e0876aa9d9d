"""ckplan.record's core, and the record files' readers (`diagnose`, `validate --record`), without the frameworks
(tests/test_record_frameworks.py runs those): the module imports nothing of them, a line is what the save did on
disk and in time, ranks appending to one file leave whole lines, and the per-step arithmetic, the collective-timeout
warning and the refusals are pinned to hand-computed figures."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckplan.diagnose.records import by_step
from ckplan.record import SaveRecord, count, record_save
from tests.conftest import assert_one_line_error, ckplan_exe, run_cli, run_json
from tests.mounts import needs_root

FRAMEWORKS = ("torch", "transformers", "lightning", "deepspeed", "accelerate")


def test_import_loads_no_framework():
    code = "import json, sys, ckplan.record; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []
    assert "ckplan.record" in loaded


def line(step: int, rank: int, seconds: float, nbytes: int, **kw) -> SaveRecord:
    """A record of `seconds` starting at 1e9 + step (a made-up clock)."""
    start = 1e9 + step
    fields = dict(
        framework="dcp",
        step=step,
        rank=rank,
        world_size=3,
        host="h",
        mode="sync",
        start=start,
        end=start + seconds,
        seconds=seconds,
        blocking_seconds=seconds,
        path=f"/ckpt/step-{step}",
        counted="directory",
        bytes=nbytes,
        files=2,
    )
    return SaveRecord(**{**fields, **kw})


def test_record_save_counts_the_directory_and_times_the_block(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    save, record = tmp_path / "step-7", tmp_path / "saves.jsonl"
    before = time.time()
    with record_save(record, save, framework="torch.save", step=7):
        (save / "sub").mkdir(parents=True)
        (save / "a.pt").write_bytes(b"x" * 1000)
        (save / "sub" / "b.pt").write_bytes(b"y" * 2345)
        (save / "empty").write_bytes(b"")
        (save / "link").symlink_to(save / "a.pt")  # not counted: the bytes are a.pt's
        time.sleep(0.05)
    after = time.time()
    (got,) = [SaveRecord.model_validate_json(raw) for raw in record.read_text().splitlines()]
    assert (got.step, got.rank, got.world_size, got.framework, got.mode) == (7, 0, 1, "torch.save", "sync")
    assert (got.bytes, got.files) == (3345, 3)
    assert before <= got.start and got.end <= after and got.seconds >= 0.05
    assert got.blocking_seconds == got.seconds and got.persist_seconds is None
    assert got.path == str(save) and got.host == os.uname().nodename


def test_a_save_that_raises_leaves_no_line(tmp_path):
    with pytest.raises(RuntimeError), record_save(tmp_path / "r.jsonl", tmp_path, framework="dcp", step=1):
        raise RuntimeError("disk on fire")
    assert not (tmp_path / "r.jsonl").exists()


def _append_many(path: str, rank: int, n: int) -> None:
    from ckplan.record import append

    for i in range(n):
        append(path, line(i, rank % 3, 1.0, 10**12 + i, host="h" * 200))


def test_ranks_appending_to_one_file_leave_whole_lines(tmp_path):
    """Four processes append 300 lines each at once: every line parses, and each process's lines are all there."""
    path = str(tmp_path / "shared.jsonl")
    procs = [multiprocessing.get_context("fork").Process(target=_append_many, args=(path, r, 300)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    lines = [SaveRecord.model_validate_json(raw) for raw in Path(path).read_text().splitlines()]
    assert len(lines) == 1200
    assert sorted(r.step for r in lines) == sorted(list(range(300)) * 4)


def test_record_path_per_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    with record_save(tmp_path / "saves-{rank}.jsonl", tmp_path, framework="hf", step=3):
        pass
    got = SaveRecord.model_validate_json((tmp_path / "saves-5.jsonl").read_text())
    assert (got.rank, got.world_size) == (5, 8)


def test_torch_save_adapter(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from ckplan.record import torch_save

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    before = time.time()
    torch_save(tmp_path / "r.jsonl", {"w": torch.zeros(1000)}, tmp_path / "model.pt", step=12)
    after = time.time()
    got = SaveRecord.model_validate_json((tmp_path / "r.jsonl").read_text())
    assert (got.framework, got.step, got.counted) == ("torch.save", 12, "own files")
    assert (got.bytes, got.files) == ((tmp_path / "model.pt").stat().st_size, 1)
    assert got.bytes > 4000  # the tensor's 4,000 bytes and the zip around them
    assert before <= got.start <= got.end <= after


def test_count_follows_no_link_and_takes_a_file(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"z" * 17)
    (tmp_path / "g").write_bytes(b"z" * 5)
    (tmp_path / "d" / "to-g").symlink_to(tmp_path / "g")
    assert count([str(tmp_path / "d"), str(tmp_path / "g")]) == (22, 2)
    assert count([str(tmp_path / "missing")]) == (0, 0)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"world_size": 2}, "not below world_size"),
        ({"seconds": 2.5}, "end − start"),
        ({"blocking_seconds": 1.0}, "sync save blocks"),
        ({"mode": "async"}, "add up"),
        ({"version": 2}, "version"),
        ({"bytes": "10"}, "bytes"),
    ],
)
def test_a_record_is_consistent(change, why):
    with pytest.raises(ValueError, match=why):
        SaveRecord(**(line(1, 2, 2.0, 100).model_dump() | change))


def test_by_step_arithmetic():
    """Step 100: three ranks of 2, 5 and 3 s counting the shared directory at 900, 1,000 and 950 bytes (the last to
    finish saw it whole): the step is rank 1's 5 s, spread 3 s, median 3 s, 1,000 bytes. Step 200: rank 0 wrote two
    files of its own (Lightning's last.ckpt beside the epoch's): 1 + 0.5 s and 40 + 60 bytes. Step 300: async, the
    slowest rank blocked 0.5 s and persisted 3.5 s."""
    records = [
        line(100, 0, 2.0, 900),
        line(100, 1, 5.0, 1000),
        line(100, 2, 3.0, 950),
        line(200, 0, 1.0, 40, counted="own files", path="/c/a.ckpt", world_size=1, framework="lightning"),
        line(200, 0, 0.5, 60, counted="own files", path="/c/last.ckpt", world_size=1, framework="lightning"),
        line(300, 0, 4.0, 70, mode="async", blocking_seconds=0.5, persist_seconds=3.5),
        line(300, 1, 1.0, 70, mode="async", blocking_seconds=0.75, persist_seconds=0.25),
    ]
    s100, s200, s300 = by_step(records)
    assert (s100.seconds, s100.slowest_rank, s100.spread_s, s100.median_s, s100.fastest_s) == (5.0, 1, 3.0, 3.0, 2.0)
    assert (s100.bytes, s100.ranks, s100.world_size, s100.mode) == (1000, 3, 3, "sync")
    assert (s200.seconds, s200.bytes, s200.files, s200.ranks) == (1.5, 100, 4, 1)
    assert (s300.mode, s300.seconds, s300.blocking_s, s300.persist_s, s300.slowest_rank) == ("async", 4.0, 0.75, 3.5, 0)


def write_records(path: Path, records: list[SaveRecord]) -> Path:
    path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    return path


def test_diagnose_reads_records_with_the_trend_and_the_timeout_warning(tmp_path):
    """Three steps; the slowest rank blocks 280, 290 and 301 s: 301 s is past half of torch.distributed's 600 s."""
    records = [line(s, r, (280 + 10 * i + (1 if i == 2 else 0)) if r == 2 else 10.0, 1000) for i, s in
               enumerate((100, 200, 300)) for r in range(3)]  # fmt: skip
    rec = write_records(tmp_path / "job.log", records)  # told by content, not by name
    d = run_json("diagnose", str(rec))
    assert d["kind"] == "ckplan.record-diagnosis" and d["lines"] == 9
    assert [s["seconds"] for s in d["steps"]] == [280.0, 290.0, 301.0]
    assert (d["slowest_rank"], d["slowest_rank_steps"]) == (2, 3)
    assert [s["spread_s"] for s in d["steps"]] == [270.0, 280.0, 291.0]
    assert d["trend"]["saves"] == 3 and d["trend"]["slope_s_per_save"] == pytest.approx(10.5)
    assert "301 s" in d["timeout_warning"] and "50%" in d["timeout_warning"] and "600 s" in d["timeout_warning"]
    assert run_json("diagnose", str(rec), "--collective-timeout", "20m")["timeout_warning"] is None
    quiet = write_records(tmp_path / "quiet.jsonl", [line(1, 0, 299.0, 1), line(2, 0, 299.0, 1, world_size=1)])
    quiet_d = run_json("diagnose", str(quiet))
    assert quiet_d["timeout_warning"] is None
    # step 1: one of three ranks recorded a save into a shared directory (every rank calls such a save)
    assert any(n.startswith("1 step(s) recorded by fewer ranks") for n in quiet_d["notes"])
    human = run_cli("diagnose", str(rec), check=True).stdout
    assert "slowest rank: 2, in 3 of 3 step(s)" in human and "warning:" in human


def test_diagnose_compares_each_save_with_the_prediction(tmp_path):
    from ckplan import profile_store
    from ckplan.planning.policy import Policy
    from ckplan.planning.scenario import sync_scenario
    from ckplan.sizing.plan import CheckpointPlan

    plan_json = run_json("size", "--params", "1e9", "--gpus", "3", "--gpus-per-node", "3")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_json))
    predicted = sync_scenario(
        CheckpointPlan.model_validate(plan_json), profile_store.resolve("local-nvme"), Policy()
    ).save_seconds
    rec = write_records(tmp_path / "r.jsonl", [line(1, r, 4.0 + r, 1) for r in range(3)] + [line(2, 0, 8.0, 1)])
    d = run_json("diagnose", str(rec), "--plan", str(plan_file), "--storage", "local-nvme")
    assert d["predicted_s"] == pytest.approx(predicted)
    assert [s["error_percent"] for s in d["steps"]] == pytest.approx(
        [(predicted - 6.0) / 6.0 * 100, (predicted - 8.0) / 8.0 * 100]
    )


def _plan(tmp_path: Path, total_bytes: int | None = None) -> Path:
    """A 3-GPU plan's file."""
    plan_json = run_json("size", "--params", "1e9", "--gpus", "3", "--gpus-per-node", "3")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_json))
    return plan_file


def test_a_save_given_twice_is_counted_once(tmp_path):
    """A line repeated (7 lines, 6 saves) and the same file given twice (14 lines): the figures are one copy's,
    the note counts what was dropped. Two runs that saved the same step (a job restarted from an earlier one) are
    two saves, each its own."""
    records = [line(s, r, 1.0 + r, 100 * (r + 1)) for s in (1, 2) for r in range(3)]
    rec = write_records(tmp_path / "r.jsonl", records + records[4:5])
    once = run_json("diagnose", str(rec))
    assert (once["lines"], [s["bytes"] for s in once["steps"]], [s["ranks"] for s in once["steps"]]) == (
        6,
        [300, 300],
        [3, 3],
    )
    assert [s["seconds"] for s in once["steps"]] == [3.0, 3.0]
    assert "1 duplicate record(s) dropped" in " ".join(once["notes"])
    twice = run_json("diagnose", str(rec), str(rec))
    assert (twice["lines"], twice["steps"]) == (6, once["steps"])
    assert "8 duplicate record(s) dropped" in " ".join(twice["notes"])
    v = run_json(
        "validate",
        "--record",
        str(rec),
        "--record",
        str(rec),
        "--plan",
        str(_plan(tmp_path)),
        "--storage",
        "local-nvme",
    )
    assert (v["measured"]["median"], v["recorded_bytes"]) == (3.0, 300)
    rerun = write_records(tmp_path / "rerun.jsonl", [line(1, 0, 2.0, 10, run="a"), line(1, 0, 3.0, 10, run="b")])
    d = run_json("diagnose", str(rerun))
    assert [(s["step"], s["run"], s["seconds"]) for s in d["steps"]] == [(1, "a", 2.0), (1, "b", 3.0)]
    assert d["lines"] == 2 and not any("duplicate" in n for n in d["notes"])
    assert "1 (a)" in run_cli("diagnose", str(rerun), check=True).stdout


def test_validate_record_names_the_term_off(tmp_path):
    plan_json = run_json("size", "--params", "1e9", "--gpus", "3", "--gpus-per-node", "3")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_json))
    total = plan_json["total_bytes"]
    same = write_records(tmp_path / "same.jsonl", [line(s, r, 10.0 + s, total) for s in (1, 2, 3) for r in range(3)])
    v = run_json("validate", "--record", str(same), "--plan", str(plan_file), "--storage", "local-nvme")
    assert (v["steps"], v["world_size"], v["recorded_bytes"], v["bytes_error_percent"]) == (3, 3, total, 0.0)
    assert (v["measured"]["median"], v["measured"]["min"], v["measured"]["max"]) == (12.0, 11.0, 13.0)
    pred = v["predicted_seconds"]
    assert v["error_percent"] == pytest.approx((pred - 12.0) / 12.0 * 100)
    assert (v["errors_percent"]["min"], v["errors_percent"]["max"]) == pytest.approx(
        ((pred - 13.0) / 13.0 * 100, (pred - 11.0) / 11.0 * 100)
    )
    assert v["off"] in ("model", "none")
    half = write_records(tmp_path / "half.jsonl", [line(1, r, 10.0, total // 2) for r in range(3)])
    v = run_json("validate", "--record", str(half), "--plan", str(plan_file), "--storage", "local-nvme")
    assert v["off"] == "bytes" and v["bytes_error_percent"] == pytest.approx(100.0, abs=1e-6)
    wide = write_records(tmp_path / "wide.jsonl", [line(1, 0, 10.0, total, world_size=16)])
    v = run_json("validate", "--record", str(wide), "--plan", str(plan_file), "--storage", "local-nvme")
    assert v["off"] == "scale" and "16 ranks" in v["diagnosis"]


def test_damaged_lines_are_skipped_and_named(tmp_path):
    """Between good lines: a line of another rank count, one not JSON, one with a field too many, one of 2 MiB, and
    a half line at the end (a writer killed mid-write). The three steps add up as if they were not there; each is
    named by file and line, and a file with seven damaged lines names five and counts the rest."""
    good = [line(s, r, 1.0 + s, 100) for s in (1, 2, 3) for r in range(3)]
    text = [r.model_dump_json() for r in good]
    damaged = [
        json.dumps(json.loads(text[0]) | {"rank": 7}),
        "{not json",
        json.dumps(json.loads(text[0]) | {"extra": 1}),
        "x" * (2 * 2**20),
    ]
    rec = tmp_path / "r.jsonl"
    rec.write_text("\n".join(text[:3] + damaged[:2] + text[3:6] + damaged[2:] + text[6:]) + "\n" + text[0][:40])
    d = run_json("diagnose", str(rec))
    assert (d["lines"], [s["seconds"] for s in d["steps"]]) == (9, [2.0, 3.0, 4.0])
    skipped = [n for n in d["notes"] if n.startswith("skipped ")]
    assert [n.split(": ")[0] for n in skipped] == [f"skipped {rec}:{n}" for n in (4, 5, 9, 10, 14)], skipped
    assert "rank 7 is not below world_size 3" in skipped[0] and "extra" in skipped[2]
    assert "longer than 1,048,576 bytes" in skipped[3]
    v = run_json("validate", "--record", str(rec), "--plan", str(_plan(tmp_path, 300)), "--storage", "local-nvme")
    assert v["steps"] == 3 and [n.split(": ")[0] for n in v["notes"][:5]] == [n.split(": ")[0] for n in skipped]
    many = tmp_path / "many.jsonl"
    many.write_text("\n".join([text[0]] + ["{"] * 7) + "\n")
    notes = run_json("diagnose", str(many))["notes"]
    assert [n.split(": ")[0] for n in notes[:5]] == [f"skipped {many}:{n}" for n in range(2, 7)]
    assert notes[5] == "and 2 more damaged lines skipped"


def test_a_file_with_no_record_is_refused_in_one_line(tmp_path):
    good = line(1, 0, 1.0, 1).model_dump_json()
    rec = tmp_path / "r.jsonl"
    rec.write_text(json.dumps(json.loads(good) | {"rank": 7}) + "\n{\n")
    assert_one_line_error(
        run_cli("diagnose", str(rec)),
        f"no save records in {rec}: {rec}:1: not a ckplan.save-record version 1 line: rank 7 is not below "
        "world_size 3 (and 1 more damaged lines)",
    )
    rec.write_text(json.dumps(json.loads(good) | {"version": 2}) + "\n")
    assert_one_line_error(run_cli("diagnose", str(rec)), f"no save records in {rec}: {rec}:1: not a")
    rec.write_text(good + "\n")
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.0\n")
    assert_one_line_error(run_cli("diagnose", str(rec), str(log)), "not both")
    rec.write_text(good + "\n")
    assert_one_line_error(run_cli("diagnose", str(rec), "--collective-timeout", "soon"), "--collective-timeout")
    assert_one_line_error(
        run_cli("validate", "somewhere", "--record", str(rec), "--plan", str(rec), "--storage", "local-nvme"),
        "not both",
    )


def _many_records(path: Path, ranks: int, steps: int) -> Path:
    """steps × ranks lines of a shared-directory save: more than the records' in-memory cache holds."""
    template = line(1, 0, 1.0, 1000, world_size=ranks).model_dump_json()
    with open(path, "w") as f:
        for step in range(1, steps + 1):
            f.write(
                "".join(
                    template.replace('"step":1,', f'"step":{step},').replace('"rank":0,', f'"rank":{r},') + "\n"
                    for r in range(ranks)
                )
            )
    return path


@needs_root
def test_the_records_temporary_database_leaves_nothing(tmp_path):
    """The records spill from memory into a temporary file in $TMPDIR, unlinked as it is opened: killed with
    SIGKILL mid-read, diagnose leaves nothing there; with $TMPDIR full, it says so in one line and exits 3."""
    import signal

    from tests.mounts import mounted

    rec = _many_records(tmp_path / "many.jsonl", 1000, 300)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "SQLITE_TMPDIR": str(scratch)}
    proc = subprocess.Popen([*ckplan_exe(), "diagnose", str(rec), "--json"], env=env, stdout=subprocess.DEVNULL)
    try:
        seen = False
        deadline = time.monotonic() + 60
        while not seen and proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                fds = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
                seen = any(link.startswith(str(scratch)) and link.endswith("(deleted)") for link in fds)
            time.sleep(0.01)
        assert seen, "diagnose never opened its temporary database in $TMPDIR"
        assert os.listdir(scratch) == []
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert os.listdir(scratch) == []
    with mounted(tmp_path / "full", "tmpfs", "size=1m") as full:
        proc = run_cli("diagnose", str(rec), env={"TMPDIR": str(full), "SQLITE_TMPDIR": str(full)})
    assert_one_line_error(proc, "reading the records needs temporary space", code=3)
    assert "full" in proc.stderr
