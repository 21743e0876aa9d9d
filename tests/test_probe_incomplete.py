"""A probe never throws its measurements away at the end: what its late phases need is checked before the first
phase (a missing numpy beside torch is refused at once, exit 3), and a late phase that fails while it runs leaves a
profile of every other phase, naming the gap (exit 4). Real fio on a real directory, real save processes; the
failures are real imports failing, through a package on PYTHONPATH that shadows the installed one and raises
ImportError on import, as a broken install does (a shared library that does not load)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_cli, run_json

pytestmark = pytest.mark.fio
SCRATCH = ".ckplan-probe-"


def shadow(tmp_path: Path, package: str, why: str) -> dict:
    """An environment in which `import PACKAGE` fails with ImportError(why), as a broken install fails."""
    stubs = tmp_path / f"broken-{package}"
    (stubs / package).mkdir(parents=True)
    (stubs / package / "__init__.py").write_text(f"raise ImportError({why!r})\n")
    return {"PYTHONPATH": str(stubs)}


@pytest.fixture
def dcp_plan(tmp_path) -> Path:
    """Two DCP ranks on one node: its replay runs torch's DCP saves, one process per rank (they need numpy)."""
    plan = tmp_path / "plan.json"
    args = ("--params", "1e8", "--framework", "dcp", "--zero", "3", "--gpus", "2", "--gpus-per-node", "2", "--tp", "1")
    plan.write_text(run_cli("size", *args, "--json", check=True).stdout)
    return plan


def test_missing_numpy_is_refused_before_the_first_phase(tmp_path, dcp_plan):
    pytest.importorskip("torch", reason="the torch extra is not installed")
    target = tmp_path / "target"
    target.mkdir()
    broken = shadow(tmp_path, "numpy", "numpy's C extensions failed to load")
    started = time.monotonic()
    proc = run_cli("probe", str(target), "--quick", env=broken)
    assert_one_line_error(proc, "the probe's calibration needs a numpy that imports", code=3)
    assert "numpy's C extensions failed to load" in proc.stderr
    assert "pip install 'ckplan[torch]', or probe with --no-calibrate" in proc.stderr
    assert proc.stdout == ""
    # without the calibration, a DCP plan's replay still runs DCP saves: refused too
    proc = run_cli("probe", str(target), "--quick", "--no-calibrate", "--plan", str(dcp_plan), env=broken)
    assert_one_line_error(proc, "the probe's replay of a dcp plan (dcp saves) needs a numpy that imports", code=3)
    assert time.monotonic() - started < 20  # refused up front: a probe's phases alone take longer than this
    assert list(target.iterdir()) == []  # not a byte written
    # calibrate and validate refuse the same way, before their first save
    assert_one_line_error(run_cli("calibrate", "--quick", env=broken), "pip install 'ckplan[torch]'", code=3)
    proc = run_cli("validate", str(target), "--plan", str(dcp_plan), "--storage", "nfs", "--scale", "0.01", env=broken)
    assert_one_line_error(proc, "validate's dcp saves need", code=3)
    assert list(target.iterdir()) == []


def test_prepare_checks_only_what_the_probe_will_save(tmp_path, monkeypatch):
    """numpy not installed at all (an import of it fails as for a missing module): a torch.save plan's replay
    without the calibration needs no numpy, so that probe is prepared; a safetensors (HF) plan's replay needs it."""
    pytest.importorskip("torch", reason="the torch extra is not installed")
    from ckplan import api
    from ckplan.errors import EnvironmentProblem

    monkeypatch.setitem(sys.modules, "numpy", None)
    hf = api.size(params=1e8, framework="hf", gpus=2, gpus_per_node=2)
    deepspeed = api.size(params=1e8, framework="deepspeed", gpus=2, gpus_per_node=2)
    target = api.open_probe(tmp_path, preset="quick", plan=deepspeed, calibrate=False)
    assert target.prepare().calibrate is False
    with pytest.raises(EnvironmentProblem, match=r"needs numpy beside PyTorch: pip install 'ckplan\[torch\]'"):
        api.open_probe(tmp_path, preset="quick", plan=hf, calibrate=False)
    with pytest.raises(EnvironmentProblem, match="the probe's calibration needs numpy"):
        api.open_probe(tmp_path, preset="quick")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_calibration_and_replay_keep_the_measured_phases(tmp_path, dcp_plan):
    """torch is there but does not import: the calibration's and the replay's save processes fail after bandwidth,
    reads, small files and latency have run. The profile keeps those, names the two phases that failed, and is
    written, saved and printed before the exit code says so."""
    target = tmp_path / "target"
    target.mkdir()
    out, config = tmp_path / "partial.json", tmp_path / "config"
    env = shadow(tmp_path, "torch", "libtorch_cpu.so: cannot open shared object file")
    env["XDG_CONFIG_HOME"] = str(config)
    args = ("--quick", "--writers", "2", "--plan", str(dcp_plan), "--scale", "0.05", "--out", str(out))
    proc = run_cli("probe", str(target), *args, "--save", "partial", "--json", env=env)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ckplan: error:")]
    assert proc.returncode == 4, proc.stderr
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = errors[0]
    assert "the calibration failed: the serialiser calibration failed: ImportError: libtorch_cpu.so" in line
    assert "the replay failed:" in line and "without the calibration and the replay" in line
    assert f"written to {out}" in line and f"written to {config / 'ckplan' / 'profiles' / 'partial.json'}" in line

    profile = json.loads(out.read_text())
    assert json.loads(proc.stdout) == profile  # the same profile on stdout, under --json too
    saved = json.loads((config / "ckplan" / "profiles" / "partial.json").read_text())
    assert saved["failed_phases"] == profile["failed_phases"]
    # every phase before the late ones, measured
    assert [b["writers"] for b in profile["buffered_bandwidth"]] == [1, 2]
    assert all(b["bytes_per_s"] > 1e6 for b in profile["buffered_bandwidth"])
    assert [b["writers"] for b in profile["read_bandwidth"]] == [1, 2]
    assert profile["small_files"]["files_per_s"] > 1
    lat = profile["fsync_latency"]
    assert 0 < lat["p50_s"] <= lat["p99_s"] < 10
    # and what failed, named with its error and what stands in for it
    assert profile["calibration"] is None and profile["replay"] is None and profile["read_replay"] is None
    failed = {f["phase"]: f for f in profile["failed_phases"]}
    assert list(failed) == ["calibration", "replay"]
    assert "ImportError: libtorch_cpu.so: cannot open shared object file" in failed["calibration"]["error"]
    assert "save failed during the replay" in failed["replay"]["error"]
    assert "named defaults" in failed["calibration"]["missing"]
    assert "save-time model" in failed["replay"]["missing"]
    assert [n for n in profile["notes"] if n.startswith("incomplete: the calibration failed")]
    assert not [p for p in target.iterdir() if p.name.startswith(SCRATCH)]  # scratch removed, as on any exit

    # the partial profile plans: the model stands in for the replay, the defaults for the calibration, and says so
    rec = run_json("recommend", "--plan", str(dcp_plan), "--storage", str(out))
    assert rec["save_model"]["source"] == "model"
    note = rec["machine_defaults"]["note"]
    assert "its probe's calibration failed: the serialiser calibration failed: ImportError" in note
    assert set(rec["machine_defaults"]["figures"]) == {"serialiser dcp", "DCP fixed cost", "deserialiser dcp"}
