"""`ckplan validate`: small real PyTorch saves (a few MB, 2 processes) through the console script."""

import json
import os

import pytest

from tests.conftest import assert_one_line_error, run_cli, run_json

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")


@pytest.fixture(scope="module")
def disk_profile(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile")
    out = d / "disk.json"
    run_cli("probe", str(d), "--quick", "--writers", "2", "--no-calibrate", "--out", str(out), check=True)
    return out


def plan_file(tmp_path, *args):
    path = tmp_path / "plan.json"
    path.write_text(
        run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", *args, "--json", check=True).stdout
    )
    return path


@pytest.mark.parametrize(
    "layout",
    [
        ("--framework", "dcp", "--zero", "3"),
        ("--framework", "deepspeed", "--zero", "1", "--pp", "2"),
        ("--framework", "hf", "--zero", "0"),
    ],
)
def test_validate_real_save(tmp_path, disk_profile, layout):
    plan = plan_file(tmp_path, *layout)
    target = tmp_path / "target"
    target.mkdir()
    v = run_json(
        "validate",
        str(target),
        "--plan",
        str(plan),
        "--storage",
        str(disk_profile),
        "--scale",
        "0.0005",
        "--repeats",
        "2",
    )
    plan_data = json.loads(plan.read_text())
    assert v["files"] == plan_data["file_count"] and v["writers"] == 2
    assert v["bytes"] == pytest.approx(plan_data["total_bytes"] * 0.0005, rel=0.05)
    assert 0 < v["measured"]["min"] <= v["measured_seconds"] <= v["measured"]["max"] < 60
    assert v["predicted_seconds"] > 0
    assert v["error_percent"] == pytest.approx(
        (v["predicted_seconds"] - v["measured_seconds"]) / v["measured_seconds"] * 100
    )
    m = v["measured"]
    assert v["measured_range_percent"] == pytest.approx((m["max"] - m["min"]) / m["median"] * 100)
    assert v["within_measured_range"] == (m["min"] <= v["predicted_seconds"] <= m["max"])
    if v["within_measured_range"]:
        assert "inside the measured spread" in v["diagnosis"]
    assert v["diagnosis"]
    assert os.listdir(target) == [], "validate left files behind"


def test_validate_async_dcp(tmp_path, disk_profile):
    plan = plan_file(tmp_path, "--framework", "dcp", "--zero", "3")
    v = run_json(
        "validate",
        str(tmp_path),
        "--plan",
        str(plan),
        "--storage",
        str(disk_profile),
        "--scale",
        "0.0005",
        "--repeats",
        "2",
        "--mode",
        "async",
    )
    assert 0 < v["measured_stall_seconds"] <= v["measured_seconds"]
    # blocking part and persist are compared apart; the snapshot term is said to be unchecked without a GPU
    stall = v["predicted_stall_seconds"]
    assert v["stall_error_percent"] == pytest.approx(
        (stall - v["measured_stall_seconds"]) / v["measured_stall_seconds"] * 100
    )
    assert any("without a GPU" in n for n in v["notes"])


def test_validate_async_torch_save_snapshot_then_background_save(tmp_path, disk_profile):
    """Without async_save (DeepSpeed here): the state is cloned (blocking), then saved from a background thread."""
    plan = plan_file(tmp_path, "--framework", "deepspeed", "--zero", "3")
    v = run_json(
        "validate",
        str(tmp_path),
        "--plan",
        str(plan),
        "--storage",
        str(disk_profile),
        "--scale",
        "0.0005",
        "--repeats",
        "2",
        "--mode",
        "async",
    )
    assert 0 < v["measured_stall_seconds"] < v["measured_seconds"]
    assert any("background thread" in n for n in v["notes"])


@pytest.mark.parametrize("extra,fragment", [(["--scale", "0"], "--scale"), (["--repeats", "0"], "--repeats")])
def test_validate_bad_input(tmp_path, disk_profile, extra, fragment):
    plan = plan_file(tmp_path, "--framework", "deepspeed")
    assert_one_line_error(
        run_cli("validate", str(tmp_path), "--plan", str(plan), "--storage", str(disk_profile), *extra), fragment
    )


def test_each_saver_writes_its_own_format(tmp_path):
    """The saver kinds of the framework records (ckplan/frameworks/): safetensors writes its .safetensors files with
    safetensors and the others with torch.save (a zip); torch.save writes every file as a zip."""
    from ckplan.savers.saver import build_state, save_files

    state = build_state(
        [
            {"path": "model.safetensors", "bytes": 4096, "kind": "weights"},
            {"path": "optimizer.pt", "bytes": 4096, "kind": "optimizer"},
        ]
    )
    save_files(tmp_path / "st", state, "safetensors")
    save_files(tmp_path / "ts", state, "torch.save")
    header = (tmp_path / "st" / "model.safetensors").read_bytes()
    assert header[8:9] == b"{" and int.from_bytes(header[:8], "little") < len(header)  # safetensors: u64 length, JSON
    assert (tmp_path / "st" / "optimizer.pt").read_bytes()[:2] == b"PK"
    assert (tmp_path / "ts" / "model.safetensors").read_bytes()[:2] == b"PK"


def test_validate_a_plan_of_an_unknown_framework(tmp_path, disk_profile):
    """A hand-edited plan naming no known framework: one line, before any save (it was a KeyError)."""
    plan = plan_file(tmp_path, "--framework", "deepspeed")
    data = json.loads(plan.read_text())
    data["setup"]["framework"] = "deepspeeed"
    plan.write_text(json.dumps(data))
    result = run_cli("validate", str(tmp_path), "--plan", str(plan), "--storage", str(disk_profile))
    assert_one_line_error(result, "unknown framework 'deepspeeed'")
    assert "did you mean deepspeed" in result.stderr


def test_a_save_larger_than_max_bytes_is_refused_before_anything_is_written(tmp_path, disk_profile):
    # a 1e9-parameter plan at scale 0.0005 writes about 8 MB: 1 MB is too little room, and the target stays empty
    plan = plan_file(tmp_path, "--framework", "hf", "--zero", "0")
    target = tmp_path / "target"
    target.mkdir()
    args = ("validate", str(target), "--plan", str(plan), "--storage", str(disk_profile), "--scale", "0.0005")
    proc = run_cli(*args, "--max-bytes", "1MB")
    assert_one_line_error(
        proc, "the target allows 1.0 MB (1.0 MiB) (half the free space or --max-bytes): lower --scale"
    )
    assert list(target.iterdir()) == []
