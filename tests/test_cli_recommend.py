"""`ckplan recommend`, `report` and `compress-test` end to end through the console script."""

import json
from pathlib import Path

import pytest

from ckplan.planning.defaults import DEFAULT_DESERIALIZE_BYTES_PER_S
from tests.conftest import assert_one_line_error, assert_replay_or_why_not, run_cli, run_json

KEYS = (
    "save_seconds",
    "stall_seconds",
    "shortest_safe_interval_s",
    "binding_constraint",
    "optimal_interval_s",
    "young_interval_s",
    "recommended_interval_s",
    "verdict",
    "expected_waste_fraction",
    "what_if",
)


def test_default_compares_all_builtin_classes():
    data = run_json("recommend")
    assert {r["storage"] for r in data["recommendations"]} == {"local-nvme", "nfs", "lustre", "gpfs", "s3", "tmpfs"}
    by = {r["storage"]: r for r in data["recommendations"]}
    assert (
        by["tmpfs"]["save_seconds"]
        < by["lustre"]["save_seconds"]
        < by["nfs"]["save_seconds"]
        < by["s3"]["save_seconds"]
    )
    table = run_cli("recommend", check=True).stdout
    assert "Recommendation by storage class" in table and "lustre" in table


def test_recommend_json_keys_and_steps():
    rec = run_json("recommend", "--storage", "lustre", "--iteration-time", "2s", "--max-loss", "30m")
    for key in KEYS:
        assert key in rec
    assert rec["recommended_steps"] == int(rec["recommended_interval_s"] // 2)
    assert rec["shortest_safe_interval_s"] <= rec["recommended_interval_s"] <= 30 * 60 - rec["save_seconds"] + 1e-6
    assert len(rec["what_if"]) >= 7


def test_recommend_human_output_leads_with_decision():
    out = run_cli(
        "recommend", "--storage", "nfs", "--model", "llama-3.1-70b", "--gpus", "64", "--max-loss", "10m", check=True
    ).stdout
    assert out.splitlines()[1].startswith("INFEASIBLE")
    assert "needed: save_seconds" in out and "What-ifs" in out
    # rank 0 writes the whole bf16 model with torch.save: its serialiser, not the storage, is the limit
    assert "no storage bandwidth is enough" in " ".join(out.split())


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--mtbf", "0"], "--mtbf"),
        (["--mtbf", "-3h"], "--mtbf"),
        (["--mode", "lazy"], "sync or async"),
        (["--storage", "lustr"], "did you mean lustre"),
        (["--max-overhead", "0%"], "between"),
        (["--stall-time", "5s"], "async only"),
        (["--storage", "/nonexistent/p.json"], "does not exist"),
        (["--max-loss", "abc"], "not a valid"),
        (["--gpus", "8", "--tp", "3"], "divisible"),
    ],
)
def test_recommend_bad_input(args, fragment):
    assert_one_line_error(run_cli("recommend", *args), fragment)


def test_corrupt_and_foreign_profiles(tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    assert_one_line_error(run_cli("recommend", "--storage", str(corrupt)), "not valid json")
    lustre = json.loads(json.dumps(run_json("profiles")))  # any JSON file with the wrong shape
    other = tmp_path / "other.json"
    other.write_text(json.dumps(lustre))
    assert_one_line_error(run_cli("recommend", "--storage", str(other)), "not a valid storage profile")
    future = tmp_path / "future.json"
    future.write_text(json.dumps({"kind": "ckplan.storage", "schema_version": 99, "ckplan_version": "9.0"}))
    assert_one_line_error(run_cli("recommend", "--storage", str(future)), "schema version 99")


def test_loss_window_shorter_than_a_save_is_infeasible_not_nonsense():
    rec = run_json("recommend", "--storage", "s3", "--max-loss", "1m")
    assert rec["verdict"] == "infeasible" and rec["needed"]


def test_async_snapshot_larger_than_host_memory():
    rec = run_json("recommend", "--storage", "lustre", "--mode", "async", "--host-memory", "1GB")
    assert rec["verdict"] == "infeasible" and "host memory" in rec["verdict_reason"]


def test_save_time_shortcut():
    rec = run_json("recommend", "--storage", "lustre", "--save-time", "5m")
    assert rec["save_seconds"] == 300 and rec["save_model"] is None


def test_recommendation_carries_the_loss_window_bound():
    """A 5 min save in a 1 h window: a crash loses τ + 300 s, so τ ≤ 3,600 − 300 = 3,300 s (evaluate's bound, which
    the recommendation used to drop and the report's chart restated)."""
    rec = run_json("recommend", "--storage", "lustre", "--save-time", "5m", "--max-loss", "1h")
    assert rec["longest_interval_s"] == 3300


@pytest.mark.fio
def test_size_probe_recommend_report_end_to_end(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(
        run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", "--json", check=True).stdout
    )
    target = tmp_path / "target"
    target.mkdir()
    profile = tmp_path / "profile.json"
    run_cli(
        "probe",
        str(target),
        "--quick",
        "--writers",
        "2",
        "--plan",
        str(plan),
        "--scale",
        "0.02",
        "--out",
        str(profile),
        check=True,
    )
    rec = run_json("recommend", "--plan", str(plan), "--storage", str(profile))
    p = json.loads(profile.read_text())
    # the profile replayed this exact plan on its one node: the replay is the save unless the disk's rate moved
    # between the bandwidth phase and the replay by more than the replay rule allows, and then the model, saying why
    assert_replay_or_why_not(rec, json.loads(plan.read_text())["total_bytes"], p["replay"])
    if rec["save_model"]["source"] == "replay":
        assert rec["save_seconds"] == pytest.approx(p["replay"]["full_scale_seconds"])
    # without the replay the model is used, from the measured curve
    p["replay"] = None
    modelled = tmp_path / "modelled.json"
    modelled.write_text(json.dumps(p))
    rec2 = run_json("recommend", "--plan", str(plan), "--storage", str(modelled))
    assert rec2["save_model"]["source"] == "model" and rec2["save_seconds"] > 0
    out = tmp_path / "report"
    files = run_json("report", "--plan", str(plan), "--storage", str(profile), "--out", str(out))
    md = Path(files["markdown"]).read_text()
    assert "## Decision" in md and "## What-ifs" in md and "![waste against interval](waste.png)" in md
    # R's two parts, with their sources: the named fixed part and the load predicted on this profile
    load = rec["restart"]["load"]["seconds"]
    assert f"| restart cost R | restart cost {300 + load:.4g} s = fixed 300 s (default; --restart-fixed) + " in md
    assert "<table>" in Path(files["html"]).read_text()
    for chart in files["charts"]:
        assert Path(chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(chart).stat().st_size > 10_000


def test_compress_test_generated_data():
    report = run_json("compress-test")
    ratios = {(r["codec"], r["data"]): r["ratio"] for r in report["results"]}
    assert 0.99 < ratios[("lz4", "fp32 exp_avg")] < 1.05  # floats barely compress with lz4
    assert ratios[("zstd-1+bytegroup", "bf16 weights")] > ratios[("zstd-1", "bf16 weights")] > 1.1
    assert all(r["bytes_per_s_per_core"] > 1e6 for r in report["results"])


def test_compress_test_on_a_file(tmp_path):
    f = tmp_path / "zeros.bin"
    f.write_bytes(bytes(4 * 2**20))
    report = run_json("compress-test", "--file", str(f))
    assert report["mix_ratio"]["zstd-1"] > 100
    assert_one_line_error(run_cli("compress-test", "--file", str(tmp_path / "missing")), "cannot read")


def test_assumed_figures_say_whether_they_are_defaults_or_given():
    """The snapshot bandwidth, host memory and restart cost are labelled default only when they are the defaults
    (20 GB/s per GPU, 2 TiB, a 300 s fixed part plus the predicted load); a figure given on the command line says so.
    The load: 7B under DeepSpeed ZeRO-1 on 8 GPUs: every rank torch.loads the 14,000,091,396 B bf16 model states
    twice (DeepSpeed's check, then its load) and its 10,500,005,296 B optimizer shard; a node reads 14.0 + 8 × 10.5
    = 98 GB from storage, each rank 24.5 GB: 4 streams on lustre's curve, 8 GB/s."""
    snapshot = "async snapshot at {} GB/s per GPU (device→pinned host; {})"
    default = run_json("recommend", "--storage", "lustre", "--mode", "async")["assumptions"]
    assert snapshot.format(20, "not measured here, default; --snapshot-bandwidth") in default
    assert "host memory 2.20 TB (2.00 TiB) per node holds the snapshot (default; --host-memory)" in default
    node = 14_000_091_396 + 8 * 10_500_005_296 + 16
    # the reads (98 GB ÷ 8 GB/s = 12.25 s on the node, 24.5 GB ÷ 2.5 GB/s = 9.8 s alone) overlap the deserialisation
    deserialize = (2 * 14_000_091_396 + 10_500_005_296) / DEFAULT_DESERIALIZE_BYTES_PER_S["torch.save"]
    load = max(node / 8e9, deserialize)
    binds = "deserialiser" if deserialize > node / 8e9 else "node bandwidth"
    assert (
        f"restart cost {300 + load:.4g} s = fixed 300 s (default; --restart-fixed) + predicted load {load:.3g} s "
        f"({binds}, write curve); failures: exponential (Daly 2006)"
    ) in default
    given = run_json(
        "recommend", "--storage", "lustre", "--mode", "async", "--snapshot-bandwidth", "40GB/s", "--restart", "5m"
    )["assumptions"]
    assert snapshot.format(40, "given (--snapshot-bandwidth)") in given
    assert not any("not measured here" in a for a in given)
    assert "restart cost 300 s (given (--restart)); failures: exponential (Daly 2006)" in given
