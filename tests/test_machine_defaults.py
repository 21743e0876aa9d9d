"""Where a prediction uses a named default for a machine figure (a serialiser's or deserialiser's speed, DCP's
fixed cost) because the profile has no calibration of this machine, `recommend` and the report say so where the
figure is used: a labelled row in the table, the first assumption, `machine_defaults` in the JSON, and a paragraph
and a row in the report. A profile with a real calibration (`ckplan calibrate`, run here) says nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli, run_json

GOLDEN = Path(__file__).parent / "golden"
DCP = ("--params", "2e8", "--framework", "dcp", "--zero", "3", "--gpus", "2", "--gpus-per-node", "2", "--tp", "1")


def test_builtin_class_states_the_defaults_and_their_share():
    rec = run_json("recommend", "--params", "7e9", "--storage", "local-nvme")
    d, m = rec["machine_defaults"], rec["save_model"]
    # the default example writes torch.save files (DeepSpeed): policy's figures for that format, nothing else
    assert d["figures"] == {"serialiser torch.save": 1.16e9, "deserialiser torch.save": 2.06e9}
    assert d["save_seconds"] == pytest.approx(m["serialize_seconds"]) and d["save_seconds"] > 0
    assert d["save_share"] == pytest.approx(d["save_seconds"] / rec["save_seconds"])
    assert d["load_seconds"] == pytest.approx(rec["restart"]["load"]["deserialize_seconds"])
    assert rec["assumptions"][0] == d["note"]
    assert d["note"].startswith("NOT MEASURED on this machine: serialiser torch.save 1.16 GB/s per core")
    assert "a built-in class carries none" in d["note"]
    assert f"({d['save_share']:.0%})" in d["note"]
    table = run_cli("recommend", "--params", "7e9", "--storage", "local-nvme", check=True).stdout
    assert "serialisers: NOT MEASURED" in table and f"{d['save_share']:.0%} of save" in table


def test_given_serialiser_leaves_only_the_deserialiser_default():
    flags = ("--params", "7e9", "--storage", "local-nvme", "--serialize-bandwidth", "torch.save=3GB/s")
    rec = run_json("recommend", *flags)
    d = rec["machine_defaults"]
    assert d["figures"] == {"deserialiser torch.save": 2.06e9}
    assert d["save_seconds"] == 0 and d["save_share"] == 0 and d["load_seconds"] > 0


def test_comparison_of_builtin_classes_says_so_once():
    comp = run_json("recommend", "--params", "7e9")
    shares = [r["machine_defaults"]["save_share"] for r in comp["recommendations"]]
    assert len(shares) > 1 and all(0 < s < 1 for s in shares)
    text = " ".join(run_cli("recommend", "--params", "7e9", check=True).stdout.split())  # rich wraps long lines
    assert text.count("NOT MEASURED on this machine") == 1
    assert f"they give up to {max(shares):.0%} of a class's predicted save" in text


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> tuple[Path, Path]:
    """A probed profile without a calibration (a probe of this VM's disk, no PyTorch then), and the same profile with
    this machine's calibration measured now."""
    pytest.importorskip("torch", reason="the torch extra is not installed")
    tmp = tmp_path_factory.mktemp("profiles")
    calibration = tmp / "calibration.json"
    run_cli("calibrate", "--quick", "--out", str(calibration), check=True)
    profile = json.loads((GOLDEN / "profile-disk.json").read_text())
    assert profile["calibration"] is None
    bare, measured = tmp / "bare.json", tmp / "measured.json"
    bare.write_text(json.dumps(profile))
    measured.write_text(json.dumps({**profile, "calibration": json.loads(calibration.read_text())}))
    return bare, measured


def test_profile_without_calibration_is_labelled(profiles):
    bare, _ = profiles
    rec = run_json("recommend", *DCP, "--storage", str(bare))
    d = rec["machine_defaults"]
    assert d["figures"] == {"serialiser dcp": 1.0e9, "DCP fixed cost": 0.01, "deserialiser dcp": 1.54e9}
    assert "it was probed without PyTorch or with --no-calibrate" in d["note"]
    assert rec["assumptions"][0] == d["note"]
    table = run_cli("recommend", *DCP, "--storage", str(bare), check=True).stdout
    assert "serialisers: NOT MEASURED" in table and "probed without PyTorch" in " ".join(table.split())


def test_profile_with_calibration_is_not(profiles):
    _, measured = profiles
    rec = run_json("recommend", *DCP, "--storage", str(measured))
    assert rec["machine_defaults"] is None
    machine = rec["save_model"]["machine"]
    assert {f["source"] for f in machine["serialize_bytes_per_s"].values()} == {"measured here"}
    assert machine["coordination_seconds"]["source"] == "measured here"
    assert not [a for a in rec["assumptions"] if "NOT MEASURED" in a]
    assert "NOT MEASURED" not in run_cli("recommend", *DCP, "--storage", str(measured), check=True).stdout


def test_report_states_the_defaults(profiles, tmp_path):
    pytest.importorskip("matplotlib", reason="the report extra is not installed")
    bare, measured = profiles
    run_cli("report", *DCP, "--storage", str(bare), "--out", str(tmp_path / "bare"), check=True)
    md = (tmp_path / "bare" / "report.md").read_text()
    rec = run_json("recommend", *DCP, "--storage", str(bare))
    note = rec["machine_defaults"]["note"]
    assert md.count(note) == 2  # the paragraph under the decision, and the first assumption
    assert md.index(note) < md.index("## What one save writes")
    assert "| serialisers: NOT MEASURED | named defaults," in md
    page = (tmp_path / "bare" / "report.html").read_text()
    assert page.count(note.split(" are the named defaults")[0]) == 2  # the rest has quotes and code, escaped there
    run_cli("report", *DCP, "--storage", str(measured), "--out", str(tmp_path / "measured"), check=True)
    assert "NOT MEASURED" not in (tmp_path / "measured" / "report.md").read_text()
