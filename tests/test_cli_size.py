"""`ckplan size` and `ckplan models` through the installed console script."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_cli, run_json


def test_size_default_json_keys():
    plan = run_json("size", "--params", "7e9", "--optimizer", "adam", "--interval", "5m")
    for key in ("parameters", "bytes_per_parameter", "total_bytes", "file_count", "writers", "manifest"):
        assert key in plan
    assert plan["parameters"] == 7_000_000_000
    assert plan["bytes_per_parameter"] == pytest.approx(14.0)
    assert plan["total_bytes"] == sum(f["bytes"] for f in plan["manifest"])
    assert set(plan["manifest"][0]) >= {"path", "bytes", "rank"}
    assert plan["interval"]["average_bandwidth_bytes_per_s"] == pytest.approx(plan["total_bytes"] / 300)
    assert plan["interval"]["burst_bandwidth_bytes_per_s"] == pytest.approx(plan["total_bytes"] / 15)


def test_size_table_shows_both_units_and_assumptions():
    out = run_cli(
        "size", "--model", "llama-3.1-70b", "--gpus", "64", "--tp", "8", "--interval", "10m", check=True
    ).stdout
    assert "GB (" in out and "GiB)" in out
    assert "Assumptions" in out and "naive N·C/T" in out
    assert "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt" in out


def test_python_dash_m_works():
    proc = subprocess.run(
        [sys.executable, "-m", "ckplan", "size", "--json"], capture_output=True, text=True, check=True
    )
    # the default, DeepSpeed ZeRO-1 on 8 GPUs: latest, two recovery scripts, the model states, 8 optimizer shards
    assert json.loads(proc.stdout)["file_count"] == 12


def test_models_lists_catalog():
    data = run_json("models")
    names = {m["name"] for m in data["models"]}
    assert "llama-3.1-405b" in names and "gpt-3-175b" in names
    l405 = next(m for m in data["models"] if m["name"] == "llama-3.1-405b")
    assert l405["parameters"] == l405["published_parameters"] == 405_853_388_800


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--params", "-1"], "must be ≥ 1"),
        (["--params", "abc"], "not a valid"),
        (["--params", "0"], "must be ≥ 1"),
        (["--optimizer", "adm"], "did you mean adam"),
        (["--model", "llama3-8b"], "did you mean llama-3.1-8b"),
        (["--gpus", "8", "--tp", "3"], "not divisible"),
        (["--interval", "0"], "--interval"),
        (["--params", "7B", "--model", "llama-2-7b"], "not both"),
        (["--max-overhead", "150%"], "between"),
        (["--dtype", "master"], "name=value"),
        (["--framework", "jax"], "unknown framework"),
        (["--nonsense"], "no such option"),
    ],
)
def test_size_bad_input(args, fragment):
    assert_one_line_error(run_cli("size", *args), fragment)


def test_malformed_model_profile_is_one_line(tmp_path):
    """A broken catalog file in an installed copy gives one line, not a traceback."""
    import shutil

    import ckplan

    pkg = tmp_path / "ckplan"
    shutil.copytree(Path(ckplan.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(__file__).parent.parent / "profiles", pkg / "profiles")
    (pkg / "profiles" / "models" / "broken.toml").write_text('name = "broken"\nhidden = -3\n')
    proc = subprocess.run(
        [sys.executable, "-m", "ckplan", "size", "--model", "llama-2-7b"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert_one_line_error(proc, "malformed model profile broken.toml")


def test_wheel_ships_profiles_and_runs_from_elsewhere(tmp_path):
    """Build the wheel, install it (without the editable copy) and size from another directory."""
    root = Path(__file__).parent.parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(root),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("ckplan-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ckplan/profiles/models/llama-3.1-8b.toml" in names
    assert any(n.startswith("ckplan/profiles/storage/") for n in names)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = "import ckplan, ckplan.catalog as c; print(ckplan.__file__); print(c.profiles_dir()); print(len(c.models()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=elsewhere,
        env={"PYTHONPATH": str(target)},
    ).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == str(target / "ckplan" / "profiles") and int(out[2]) >= 11


def test_size_without_interval_shows_demand_at_typical_intervals():
    """The headline command shows C/T. 7e9 params × 14 B (bf16 weights 2 + fp32 master 4 + Adam 8)
    = 98 GB per save (+ a few KB of small files); at 5 min: 98e9 / 300 = 326.7 MB/s on average, and
    98e9 / (300 × 5%) = 6.53 GB/s of burst within the stall budget."""
    plan = run_json("size", "--params", "7e9", "--optimizer", "adam")
    demand = {d["interval_s"]: d for d in plan["typical_demand"]}
    assert sorted(demand) == [300, 900, 1800, 3600]
    assert demand[300]["average_bandwidth_bytes_per_s"] == pytest.approx(98e9 / 300, rel=1e-3)
    assert demand[300]["burst_bandwidth_bytes_per_s"] == pytest.approx(98e9 / 15, rel=1e-3)
    assert demand[3600]["burst_bandwidth_bytes_per_s"] == pytest.approx(98e9 / 180, rel=1e-3)
    assert plan["interval"] is None
    text = run_cli("size", "--params", "7e9", "--optimizer", "adam").stdout
    assert "Demand at typical intervals" in text and "6.53 GB/s" in text
    exact = run_json("size", "--params", "7e9", "--optimizer", "adam", "--interval", "10m")
    assert exact["typical_demand"] == [] and exact["interval"]["interval_s"] == 600


def test_model_file_is_a_users_own_catalog_entry(tmp_path):
    """--model FILE.toml takes an entry in the schema of profiles/models/. A copy of Llama-2 7B under another name
    gives the catalog's own count (6,738,415,616: safetensors total_size / 2), and a field missing is one line."""
    own = tmp_path / "my-7b.toml"
    own.write_text(
        (Path(__file__).parent.parent / "profiles/models/llama-2-7b.toml")
        .read_text()
        .replace('name = "llama-2-7b"', 'name = "my-7b"')
    )
    plan = run_json("size", "--model", str(own))
    assert plan["parameters"] == 6_738_415_616
    assert plan["setup"]["model"] == "my-7b"
    broken = tmp_path / "broken.toml"
    broken.write_text(own.read_text().replace("hidden = 4096\n", ""))
    assert_one_line_error(run_cli("size", "--model", str(broken)), "hidden")
    assert_one_line_error(run_cli("size", "--model", str(tmp_path / "absent.toml")), "absent.toml")


def test_version_and_shell_completion():
    """`ckplan --version` prints the package's version; `--show-completion bash` prints a bash completion function."""
    from ckplan.version import __version__

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"ckplan {__version__}" and not proc.stderr
    # typer finds the shell from the process tree (a parent such as flock hides it); its test switch takes the
    # shell from the argument instead
    script = run_cli("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert script.returncode == 0 and "_ckplan_completion()" in script.stdout and "complete " in script.stdout
    # what that function asks ckplan: commands and options complete through the lazily built command table
    for words, cword, expected in (
        ("ckplan pro", "1", ["probe", "profiles", "provision"]),
        ("ckplan size --opt", "2", ["--optimizer", "--option"]),
    ):
        env = {"_CKPLAN_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
        done = run_cli(env=env)
        assert done.returncode == 0 and done.stdout.split() == expected, (words, done.stdout, done.stderr)


def test_size_shows_the_policy_default_overhead_budget():
    """size's --max-overhead default is policy's 5% budget (DEFAULT_MAX_OVERHEAD = 0.05), shown as fmt_percent does
    for the planning commands: 5.00%."""
    import inspect

    from ckplan.cli.commands.size import size

    assert inspect.signature(size).parameters["max_overhead"].default == "5.00%"
