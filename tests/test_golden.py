"""Golden outputs: the planner's JSON for a spread of plans, recommendations and provisions, compared field by field.

They pin behaviour across refactors: a change to any figure fails here and must be named in its commit.
Regenerate after an intended change with `CKPLAN_REGEN_GOLDEN=1 pytest tests/test_golden.py`, and say in
the commit which fields moved and why.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

GOLDEN = Path(__file__).parent / "golden"
DISK = str(GOLDEN / "profile-disk.json")  # a default probe of this VM's disk (raw fio documents dropped)
HOSTS = str(GOLDEN / "profile-lustre-hosts.json")  # measured 5 GB/s on 1 host, 100 GB/s on 256 hosts

SEVENTY = ["--model", "llama-3.1-70b", "--gpus", "1024", "--tp", "8", "--pp", "4"]
CASES = {
    "size-7b-adam": ["size", "--params", "7e9", "--optimizer", "adam"],
    "size-70b-zero3": ["size", "--model", "llama-3.1-70b", "--framework", "deepspeed", "--zero", "3", "--gpus", "64"],
    "size-13b-hf": ["size", "--model", "llama-2-13b", "--framework", "hf", "--gpus", "16", "--zero", "0", "--tp", "1"],
    "size-8b-dcp": ["size", "--model", "llama-3.1-8b", "--framework", "dcp", "--gpus", "16", "--zero", "3"],
    "size-mixtral-megatron-pp": ["size", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "4", "--pp", "4"],
    "recommend-70b-lustre": ["recommend", *SEVENTY, "--storage", "lustre"],
    "recommend-7b-nfs-async": ["recommend", "--params", "7e9", "--storage", "nfs", "--mode", "async"],
    "recommend-2e8-dcp-disk": [
        "recommend",
        "--params",
        "2e8",
        "--framework",
        "dcp",
        "--zero",
        "3",
        "--gpus",
        "2",
        "--gpus-per-node",
        "2",
        "--tp",
        "1",
        "--storage",
        DISK,
    ],
    "recommend-405b-s3-infeasible": [
        "recommend",
        "--model",
        "llama-3.1-405b",
        "--gpus",
        "2048",
        "--storage",
        "s3",
        "--max-loss",
        "20m",
    ],
    "recommend-compare-builtin": ["recommend", "--params", "7e9"],
    "recommend-compare-save-time": ["recommend", "--params", "7e9", "--save-time", "5m"],
    "recommend-70b-hosts": ["recommend", *SEVENTY, "--storage", HOSTS],
    "provision-70b-sync": ["provision", "--model", "llama-3.1-70b", "--gpus", "1024,4096"],
    "provision-70b-async-goodput": [
        "provision",
        "--model",
        "llama-3.1-70b",
        "--gpus",
        "1024,16384",
        "--mode",
        "async",
        "--target-goodput",
        "90%",
    ],
    "provision-70b-staged": ["provision", "--model", "llama-3.1-70b", "--gpus", "4096", "--mode", "staged"],
    "provision-70b-hosts-headroom": ["provision", *SEVENTY[:2], "--gpus", "1024", "--storage", HOSTS],
}
VOLATILE = {"ckplan_version"}


def _compare(got, want, where: str) -> list[str]:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {got!r} is not an object"]
        diffs = [f"{where}.{k}: missing" for k in want.keys() - got.keys() if k not in VOLATILE]
        diffs += [f"{where}.{k}: unexpected" for k in got.keys() - want.keys() if k not in VOLATILE]
        for k in want.keys() & got.keys():
            if k not in VOLATILE:
                diffs += _compare(got[k], want[k], f"{where}.{k}")
        return diffs
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {len(got) if isinstance(got, list) else got!r} items, want {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=False)) for d in _compare(g, w, f"{where}[{i}]")]
    if isinstance(want, float) or isinstance(got, float):
        ok = isinstance(got, (int, float)) and (got == want or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12))
        return [] if ok else [f"{where}: {got!r}, want {want!r}"]
    return [] if got == want else [f"{where}: {got!r}, want {want!r}"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_output(name):
    proc = run_cli(*CASES[name], "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    path = GOLDEN / f"{name}.json"
    if os.environ.get("CKPLAN_REGEN_GOLDEN"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"regenerated {path.name} (CKPLAN_REGEN_GOLDEN is set): nothing compared; review the diff")
    want = json.loads(path.read_text())
    diffs = _compare(got, want, name)
    assert not diffs, "\n".join(diffs[:40])
