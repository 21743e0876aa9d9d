"""`ckplan diagnose`: framework log formats, user patterns, and the trend verdicts."""

import random

import pytest

from tests.conftest import FIXTURES, assert_one_line_error, run_cli, run_json

LOGS = FIXTURES / "logs"


@pytest.mark.parametrize(
    "name,expected",
    [
        ("torchtitan", [5.53, 5.81, 5.40]),  # the logged durations
        ("megatron", [24.89513, 26.01244, 27.15002]),  # max of the save-checkpoint timer, ms → s
        ("deepspeed", [3.244, 3.750]),  # "about to be saved" → last "ready now"
        ("hf", [1.788, 1.950]),  # "Saving model checkpoint to DIR" → last line naming DIR
        ("lightning", [7.5, 8.25]),  # "saving model to" → next timestamped line
    ],
)
def test_framework_formats(name, expected):
    d = run_json("diagnose", str(LOGS / f"{name}.log"))
    assert [round(p["seconds"], 5) for p in d["series"]] == pytest.approx(expected, abs=1e-3)
    assert d["patterns"] == [name]


def test_several_logs_at_once():
    d = run_json("diagnose", str(LOGS / "torchtitan.log"), str(LOGS / "megatron.log"))
    assert d["saves"] == 6 and d["patterns"] == ["megatron", "torchtitan"]


def _write(tmp_path, seconds, interval=600):
    """A timestamped log of saves with the given durations, one every `interval` seconds, amid training lines."""
    lines = []
    for i, s in enumerate(seconds):
        t = i * interval
        stamp = f"2025-01-01 {t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d},000"
        lines.append(f"[rank0]:{stamp} - root - INFO - step: {i * 100}  loss:  2.0000")
        lines.append(
            f"[rank0]:{stamp} - root - INFO - Finished saving the checkpoint (or staging if async is enabled)in {s:.2f} seconds."
        )
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_growing_series(tmp_path):
    rng = random.Random(1)
    seconds = [30 + 4 * i + rng.uniform(-2, 2) for i in range(40)]  # falls behind by 4 s a save
    d = run_json("diagnose", str(_write(tmp_path, seconds)))
    assert d["verdict"] == "growing"
    assert d["slope_ci95"][0] < 4 < d["slope_ci95"][1]
    # the fitted last save is ~186 s; the interval is 600 s: about (600 - 186) / 4 ≈ 104 more saves
    assert d["saves_until_interval"] == pytest.approx((600 - (30 + 4 * 39)) / 4, rel=0.1)
    assert "more saves" in d["verdict_text"]
    assert d["fraction_saving"] == pytest.approx(
        sum(seconds) / (39 * 600 + seconds[0]), rel=1e-4
    )  # log rounds to 0.01 s


def test_stable_series(tmp_path):
    rng = random.Random(2)
    d = run_json("diagnose", str(_write(tmp_path, [30 + rng.uniform(-1, 1) for _ in range(40)])))
    assert d["verdict"] == "stable" and d["slope_ci95"][0] < 0 < d["slope_ci95"][1]


def test_noisy_series(tmp_path):
    rng = random.Random(3)
    seconds = [30 + rng.uniform(-1, 1) for _ in range(100)]
    for i in rng.sample(range(100), 5):
        seconds[i] = 200  # a few saves hit a slow tail
    d = run_json("diagnose", str(_write(tmp_path, seconds)))
    assert d["verdict"] == "noisy" and "tail latency" in d["verdict_text"]


def test_by_wall_time_and_chart(tmp_path):
    log = _write(tmp_path, [10 + i for i in range(20)])
    d = run_json("diagnose", str(log), "--by", "time")
    assert d["by"] == "wall time" and d["slope_s_per_save"] == pytest.approx(1.0, rel=1e-6)
    out = run_cli("diagnose", str(log), check=True).stdout
    assert "Save time against save number" in out and "█" in out


def test_custom_patterns(tmp_path):
    log = tmp_path / "custom.log"
    log.write_text("ckpt done took=12.5s\nnoise\nckpt done took=13.5s\n")
    d = run_json("diagnose", str(log), "--pattern", r"took=(?P<duration>[\d.]+)s")
    assert [p["seconds"] for p in d["series"]] == [12.5, 13.5] and d["patterns"] == ["custom"]
    log.write_text(
        "save from 2025-01-01 00:00:00 to 2025-01-01 00:00:20\nsave from 2025-01-01 01:00:00 to 2025-01-01 01:00:25\n"
    )
    d = run_json("diagnose", str(log), "--pattern", r"from (?P<start>\S+ \S+) to (?P<end>\S+ \S+)")
    assert [p["seconds"] for p in d["series"]] == [20, 25]


def test_compare_with_prediction(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(run_cli("size", "--json", check=True).stdout)
    d = run_json("diagnose", str(LOGS / "torchtitan.log"), "--plan", str(plan), "--storage", "lustre")
    assert d["predicted_s"] > 0 and "ckplan predicts" in d["verdict_text"]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["/nonexistent.log"], "cannot read"),
        (["--pattern", "(unclosed"], "not a valid regular expression"),
        (["--pattern", "no groups here"], "named group"),
        (["--by", "day"], "save or time"),
        (["--storage", "lustre"], "go together"),
    ],
)
def test_bad_input(args, fragment):
    args = args if args[0].startswith("/") else [str(LOGS / "torchtitan.log"), *args]
    assert_one_line_error(run_cli("diagnose", *args), fragment)


def test_too_few_saves(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("nothing about checkpoints here\n")
    assert_one_line_error(run_cli("diagnose", str(log)), "at least 2")


def test_stable_verdict_names_the_growth_share(monkeypatch):
    """40 saves rising exactly 0.05 s each: a rise of 0.05 × 39 = 1.95 s against a mean of 30 + 0.05 × 19.5 = 30.975 s.
    Under GROWTH_SHARE (10%: 3.10 s) it is stable, and the text names the share in force; at 7% (2.17 s) too."""
    from ckplan.diagnose import trend
    from ckplan.frameworks.logs import Save

    saves = [Save(seconds=30 + 0.05 * i, at=600.0 * i, label=str(i), source="hand") for i in range(40)]
    d = trend.diagnose(saves, ["run.log"], 0)
    assert d.verdict == "stable" and "a rise of 1.95 s over the run, under 10% of the mean" in d.verdict_text
    monkeypatch.setattr(trend, "GROWTH_SHARE", 0.07)
    assert "under 7% of the mean" in trend.diagnose(saves, ["run.log"], 0).verdict_text
