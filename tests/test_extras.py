"""Each extra installs what its code imports: the wheel with one extra, installed into a fresh venv (no system site
packages, nothing of the development venv) the way the README says, then the command that needs the extra, run there.

This is what a user gets from `pip install 'ckplan[torch]'`: before numpy was listed in the torch extra, a probe ran
every phase for minutes and then died in its calibration with "Numpy is not available" (torch does not require
numpy, but DCP's saves and safetensors' save_file convert tensors through it), and no test saw it, since the
development venv has numpy from other extras.

Slow (about two minutes here: each venv is made and installed afresh, torch's wheel from pip's cache or the
configured wheel directory), so marked `extras`. Skipped only where pip cannot reach the package registry: any other
failure to install is a broken extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

pytestmark = pytest.mark.extras
ROOT = Path(__file__).parent.parent
# what pip prints when the registry cannot be reached (a refused connection, no name resolution, a timeout), as
# against a requirement the registry does not satisfy, which is a real failure of the extra
UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "Read timed out",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("ckplan-*.whl"))


def base_python() -> str:
    """The interpreter the development venv was made from, so that the new venv owes nothing to it."""
    return getattr(sys, "_base_executable", sys.executable)


class Venv:
    def __init__(self, path: Path):
        self.path = path
        self.bin = path / "bin"

    def run(self, *args: str, timeout: float = 300, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
        # the development venv's PATH and PYTHONPATH stay out: only what this venv installed is importable
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        clean |= {"PATH": f"{self.bin}:/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=clean,
            cwd=cwd,
        )

    def importable(self, module: str) -> bool:
        code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        return self.run("python", "-c", code).returncode == 0


def venv_with(extra: str, wheel: Path, where: Path) -> Venv:
    """A fresh venv holding the wheel with `extra` and its dependencies, as `pip install 'ckplan[EXTRA]'` gives."""
    subprocess.run([base_python(), "-m", "venv", str(where)], check=True, capture_output=True, timeout=300)
    env = Venv(where)
    proc = env.run("python", "-m", "pip", "install", "-q", f"{wheel}[{extra}]", timeout=900)
    if proc.returncode != 0:
        said = proc.stdout + proc.stderr
        if any(sign in said for sign in UNREACHABLE):
            pytest.skip(f"pip cannot reach the package registry to install ckplan[{extra}]: {said.strip()[-300:]}")
        raise AssertionError(f"pip install ckplan[{extra}] failed:\n{said}")
    return env


def test_torch_extra_calibrates(wheel, tmp_path):
    """`ckplan calibrate` runs every serialiser, deserialiser and DCP's fixed-cost save: the calibration the probe
    runs, so its figures come back instead of exit 4 (the DCP and safetensors saves need numpy)."""
    env = venv_with("torch", wheel, tmp_path / "venv")
    assert env.importable("numpy") and env.importable("safetensors")
    assert not env.importable("boto3") and not env.importable("matplotlib")  # that extra alone
    proc = env.run("ckplan", "calibrate", "--quick", "--ranks", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    c = json.loads(proc.stdout)
    assert set(c["serialize_bytes_per_s"]) == {"torch.save", "safetensors", "dcp"}
    assert set(c["deserialize_bytes_per_s"]) == {"torch.save", "safetensors", "dcp"}
    # per-core serialiser speeds: above 10 MB/s on any machine, below memory bandwidth
    assert all(1e7 < v < 1e12 for v in c["serialize_bytes_per_s"].values()), c["serialize_bytes_per_s"]
    assert 0 < c["dcp_fixed_seconds"] < 10 and c["dcp_ranks"] == 2
    assert c["torch_version"].startswith("2.13.0")


def test_s3_extra_starts_the_s3_backend(wheel, tmp_path):
    """The S3 backend imports boto3 and botocore and probes a real S3 endpoint (moto's server, run from the
    development venv) from the fresh venv."""
    from tests.s3server import credentials_env, leftovers, moto_server, s3_client

    env = venv_with("s3", wheel, tmp_path / "venv")
    assert env.importable("boto3") and env.importable("botocore") and not env.importable("torch")
    with moto_server() as endpoint:
        s3_client(endpoint).create_bucket(Bucket="ckpt")
        proc = env.run(
            "ckplan",
            "probe",
            "s3://ckpt/extras",
            "--quick",
            "--writers",
            "1",
            "--endpoint-url",
            endpoint,
            "--json",
            env=credentials_env(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr
        p = json.loads(proc.stdout)
        assert (p["fs_type"], p["target_kind"]) == ("s3", "s3")
        assert p["buffered_bandwidth"][0]["bytes_per_s"] > 1e5 and p["small_files"]["files_per_s"] > 1
        assert p["measurement"]["tool"].startswith("ckplan-s3 (boto3 ")
        assert p["calibration"] is None  # no torch in this venv: skipped, and said so
        assert any(n.startswith("serialisers not calibrated") for n in p["notes"])
        assert leftovers(endpoint, "ckpt") == ([], [])


def test_report_extra_renders_the_charts(wheel, tmp_path):
    env = venv_with("report", wheel, tmp_path / "venv")
    assert env.importable("matplotlib") and not env.importable("torch")
    out = tmp_path / "review"
    proc = env.run("ckplan", "report", "--storage", "local-nvme", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    for chart in ("waste.png", "bandwidth.png"):
        data = (out / chart).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, chart
    assert "data:image/png;base64," in (out / "report.html").read_text()
    proc = env.run("ckplan", "provision", "--params", "7e9", "--gpus", "8,64", "--chart", str(tmp_path / "sweep.png"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sweep.png").read_bytes().startswith(b"\x89PNG")


def test_compress_extra_measures_the_codecs(wheel, tmp_path):
    env = venv_with("compress", wheel, tmp_path / "venv")
    assert not env.importable("torch") and not env.importable("matplotlib")
    proc = env.run("ckplan", "compress-test", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert set(r["mix_ratio"]) == {"lz4", "zstd-1", "zstd-3", "zstd-1+bytegroup"}
    # float noise hardly compresses, and splitting bytes into planes helps zstd on it: the reason bytegroup exists
    assert 1.0 < r["mix_ratio"]["zstd-1"] < r["mix_ratio"]["zstd-1+bytegroup"] < 2.0
    assert all(res["bytes_per_s_per_core"] > 1e6 for res in r["results"])


def test_base_install_names_the_extra(wheel, tmp_path):
    """Without an extra, the commands that need one refuse in one line with the pip line to install it (exit 3)."""
    subprocess.run([base_python(), "-m", "venv", str(tmp_path / "venv")], check=True, capture_output=True)
    env = Venv(tmp_path / "venv")
    proc = env.run("python", "-m", "pip", "install", "-q", str(wheel), timeout=900)
    if proc.returncode != 0 and any(sign in proc.stdout + proc.stderr for sign in UNREACHABLE):
        pytest.skip("pip cannot reach the package registry")
    assert proc.returncode == 0, proc.stderr
    assert not env.importable("numpy")
    assert_one_line_error(env.run("ckplan", "compress-test"), "pip install 'ckplan[compress]'", code=3)
    assert_one_line_error(env.run("ckplan", "calibrate", "--quick"), "pip install 'ckplan[torch]'", code=3)
    proc = env.run("ckplan", "report", "--storage", "nfs", "--out", str(tmp_path / "r"))
    assert_one_line_error(proc, "pip install 'ckplan[report]'", code=3)
