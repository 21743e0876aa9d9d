"""ckplan.api: the commands' work from Python, with the CLI's inputs, defaults, normalisation and bounds.

Each bad input goes through both doors: the CLI (in-process, as tests/test_bad_inputs.py runs it) exits 2 with one
stderr line, and the library raises InputError whose message, rendered with the CLI's flag names, is that line.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

import ckplan
from ckplan import api
from ckplan.errors import InputError
from ckplan.planning.policy import Policy
from ckplan.probe.request import ProbeRequest
from tests.conftest import FIXTURES, run_json

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "api_example.py"
LOG = FIXTURES / "logs" / "torchtitan.log"


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """ckplan in-process in an empty working directory: (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("CKPLAN_DEBUG", raising=False)
    sigterm = signal.getsignal(signal.SIGTERM)

    def go(*argv: str) -> tuple[int, str, str]:
        from ckplan.cli.app import main

        monkeypatch.setattr(sys, "argv", ["ckplan", *argv])
        try:
            with pytest.raises(SystemExit) as exit_:
                main()
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        out, err = capsys.readouterr()
        return exit_.value.code, out, err

    return go


def _plan_json(plan) -> dict:
    return json.loads(plan.model_dump_json())


# --- the same result ---------------------------------------------------------------------------------------------


def test_size_is_the_cli_default(cli):
    """api.size(params=7e9, optimizer="adam") is `ckplan size --json` (the CLI's default is 7e9 and adam) and
    `ckplan size --params 7e9 --optimizer adam --json`, field for field; unit strings and capitals read as the
    flags read them."""
    code, default, err = cli("size", "--json")
    assert code == 0, err
    code, given, err = cli("size", "--params", "7e9", "--optimizer", "adam", "--json")
    assert code == 0, err
    plan = _plan_json(api.size(params=7e9, optimizer="adam"))
    assert plan == json.loads(default) == json.loads(given)
    # 7e9 parameters × 14 B (bf16 weights 2, fp32 master 4, Adam's two moments 8): 98 GB of states, 12 files
    assert plan["parameters"] == 7_000_000_000 and plan["file_count"] == 12
    assert plan["state_bytes"] == pytest.approx(98e9, rel=1e-6)
    assert _plan_json(api.size()) == plan
    assert _plan_json(api.size(params="7B", optimizer="ADAM", framework="DeepSpeed")) == plan
    assert _plan_json(ckplan.size(params="7e9")) == plan  # the lazy re-export


def test_size_with_flags_and_interval_matches_cli(cli):
    argv = ["--model", "llama-3.1-8b", "--framework", "dcp", "--gpus", "16", "--tp", "2", "--interval", "5m"]
    code, out, err = cli("size", *argv, "--max-overhead", "2%", "--json")
    assert code == 0, err
    plan = api.size(model="llama-3.1-8b", framework="dcp", gpus=16, tp=2, interval="5m", max_overhead="2%")
    assert _plan_json(plan) == json.loads(out)
    assert plan.interval is not None and plan.interval.stall_budget_s == pytest.approx(300 * 0.02)
    same = api.size(model="llama-3.1-8b", framework="dcp", gpus=16, tp=2, interval=300, max_overhead=0.02)
    assert _plan_json(same) == json.loads(out)


def test_recommend_matches_cli(cli, tmp_path):
    code, out, err = cli("recommend", "--storage", "nfs", "--mtbf", "8h", "--max-overhead", "2%", "--json")
    assert code == 0, err
    rec = api.recommend(api.size(), "nfs", mtbf_s="8h", max_overhead="2%")
    assert json.loads(rec.model_dump_json()) == json.loads(out)
    assert rec.mtbf_s == 8 * 3600 and rec.max_overhead == 0.02
    # the same policy as numbers in its units, as a Policy, and the plan as a file from `size --json`
    assert api.recommend(api.size(), "nfs", mtbf_s=28800, max_overhead=0.02) == rec
    assert api.recommend(api.size(), "nfs", policy=Policy(mtbf_s=28800, max_overhead=0.02)) == rec
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(api.size().model_dump_json())
    assert api.recommend(str(plan_file), "nfs", mtbf_s="8h", max_overhead="2%") == rec


def test_compare_matches_cli(cli):
    code, out, err = cli("recommend", "--json")
    assert code == 0, err
    assert json.loads(api.compare(api.size()).model_dump_json()) == json.loads(out)


def test_provision_matches_cli(cli):
    code, out, err = cli("provision", "--gpus", "64,128", "--params", "70B", "--json")
    assert code == 0, err
    sweep = api.provision([64, 128], params="70B")
    assert api.provision([64, 128], params="70B", framework=None, tp=None) == sweep  # None: provision's default
    assert json.loads(sweep.model_dump_json()) == json.loads(out)
    assert api.provision("64,128", params=70e9) == sweep


def test_diagnose_matches_cli(cli):
    code, out, err = cli("diagnose", str(LOG), "--json")
    assert code == 0, err
    assert json.loads(api.diagnose(LOG).model_dump_json()) == json.loads(out)


# --- the same refusal --------------------------------------------------------------------------------------------

# (CLI argv, the library call, the message as the CLI prints it)
BOTH_DOORS = [
    (["size", "--params", "-7B"], lambda: api.size(params="-7B"), "--params must be ≥ 1: '-7B'"),
    (["size", "--params", "nan"], lambda: api.size(params="nan"), "not a valid --params: 'nan'"),
    (
        ["size", "--params", "1e400"],
        lambda: api.size(params="1e400"),
        "--params is too large: '1e400' (at most 1e15)",
    ),
    (["size", "--gpus", "0"], lambda: api.size(gpus=0), "--gpus must be ≥ 1: '0'"),
    (
        ["size", "--gpus", "99999999999"],
        lambda: api.size(gpus=99999999999),
        "--gpus is too large: '99999999999' (at most 1,048,576 GPUs)",
    ),
    (
        ["size", "--gpus", "12", "--gpus-per-node", "8"],
        lambda: api.size(gpus=12, gpus_per_node=8),
        "--gpus 12 is not a whole number of nodes of --gpus-per-node 8",
    ),
    (
        ["size", "--gpus", "8", "--tp", "3"],
        lambda: api.size(gpus=8, tp=3),
        "--gpus 8 is not divisible by --tp 3 × --pp 1 = 3",
    ),
    (
        ["size", "--optimizer", "adamx"],
        lambda: api.size(optimizer="adamx"),
        "unknown optimizer 'adamx'; did you mean adam, adamw, adam-8bit?",
    ),
    (["size", "--framework", "JAX"], lambda: api.size(framework="JAX"), "unknown framework 'jax'"),
    (["size", "--zero", "4"], lambda: api.size(zero=4), "--zero must be 0, 1, 2 or 3, got 4"),
    (
        ["size", "--params", "7B", "--model", "llama-2-7b"],
        lambda: api.size(params="7B", model="llama-2-7b"),
        "give one of --params, --model or --config, not both (got --params and --model)",
    ),
    (
        ["size", "--option", "bogus=1"],
        lambda: api.size(options={"bogus": "1"}),
        "unknown --option 'bogus': the deepspeed layout takes writer",
    ),
    (
        ["size", "--interval", "5m", "--max-overhead", "150%"],
        lambda: api.size(interval="5m", max_overhead="150%"),
        "--max-overhead must lie between 0.0001% and 100%: '150%'",
    ),
    (
        ["recommend", "--storage", "nfs", "--max-overhead=-1"],
        lambda: api.recommend(api.size(), "nfs", max_overhead="-1"),
        "--max-overhead must lie between 0.0001% and 100%: '-1'",
    ),
    (
        ["recommend", "--storage", "nfs", "--max-overhead", "100%"],
        lambda: api.recommend(api.size(), "nfs", max_overhead="100%"),
        "--max-overhead must lie between 0.0001% and 100%: '100%'",
    ),
    (
        ["recommend", "--storage", "nfs", "--mtbf", "0"],
        lambda: api.recommend(api.size(), "nfs", mtbf_s="0"),
        "--mtbf must be > 0: '0'",
    ),
    (
        ["recommend", "--storage", "nfs", "--mtbf", "nan"],
        lambda: api.recommend(api.size(), "nfs", mtbf_s="nan"),
        "not a valid --mtbf: 'nan'",
    ),
    (
        ["recommend", "--storage", "nfs", "--node-failure-rate", "nan"],
        lambda: api.recommend(api.size(), "nfs", node_failures_per_1000_days="nan"),
        "--node-failure-rate is not a number: 'nan'",
    ),
    (
        ["recommend", "--storage", "nfs", "--host-memory", "2EiB"],
        lambda: api.recommend(api.size(), "nfs", host_memory_bytes="2EiB"),
        "--host-memory is too large: '2EiB' (at most 1 EB)",
    ),
    (
        ["recommend", "--storage", "nfs", "--stall-time", "1s"],
        lambda: api.recommend(api.size(), "nfs", stall_time_s="1s"),
        "--stall-time applies to --mode async only",
    ),
    (
        ["recommend", "--storage", "nfs", "--serialize-bandwidth", "pickle=1GB/s"],
        lambda: api.recommend(api.size(), "nfs", serialize_bytes_per_s={"pickle": "1GB/s"}),
        "--serialize-bandwidth takes torch.save=RATE or safetensors=RATE or dcp=RATE, got 'pickle'",
    ),
    (
        ["recommend", "--storage", "floppy"],
        lambda: api.recommend(api.size(), "floppy"),
        "unknown storage 'floppy'",
    ),
    (
        ["provision", "--gpus", "1024,lots"],
        lambda: api.provision("1024,lots"),
        "--gpus takes whole numbers separated by commas, got 'lots'",
    ),
    (
        ["provision", "--gpus", "8", "--target-goodput", "120%"],
        lambda: api.provision([8], target_goodput="120%"),
        "--target-goodput must lie between 0.0001% and 100%: '120%'",
    ),
    (
        ["diagnose", str(LOG), "--by", "step"],
        lambda: api.diagnose(LOG, by="step"),
        "--by must be save or time, got 'step'",
    ),
]


@pytest.mark.parametrize("argv,call,message", BOTH_DOORS, ids=[" ".join(a[:3]) for a, _, _ in BOTH_DOORS])
def test_both_doors_refuse_in_the_same_words(cli, argv, call, message):
    from ckplan.cli.app import flag_names

    code, out, err = cli(*argv, "--json")
    lines = [line for line in err.splitlines() if line.strip()]
    assert (code, out, len(lines)) == (2, "", 1), err
    assert lines[0].startswith(f"ckplan: error: {message}"), lines[0]
    with pytest.raises(InputError) as exc:
        call()
    assert f"ckplan: error: {exc.value.render(flag_names())}" == lines[0]
    assert "‹" not in str(exc.value) and "Traceback" not in err


def test_every_parameter_a_message_names_renders_as_one_flag():
    """The ‹name›s in ckplan's messages are the library's parameters and the request models' fields; the CLI renders
    each as its flag from the options of its commands, whose parameters carry those names. Across every command, a
    name means one flag, and each name a message uses has one, but for the library's own `policy` (a Policy object,
    which no flag gives) and the docstrings' placeholders."""
    import re

    from ckplan.cli.app import _CommandTable, flag_names

    per_command = [flag_names([c]) for c in _CommandTable().values()]
    names = flag_names()
    assert all(names[n] == flag for m in per_command for n, flag in m.items())  # no name has two flags
    assert (names["max_loss_s"], names["plan"], names["plan_file"], names["from_dir"]) == (
        "--max-loss",
        "--plan",
        "--plan",
        "--from",
    )
    source = Path(ckplan.__file__).parent
    used = {n for f in source.rglob("*.py") for n in re.findall(r"‹(\w+)›", f.read_text())}
    assert used - set(names) == {"policy", "field"}
    assert names["name"] == "--name"  # `ckplan k8s`'s: the docstrings' ‹name› placeholder is one too


def test_probe_refuses_before_writing(cli, tmp_path):
    """The probe's inputs are checked by api.open_probe for both doors, before fio is looked for."""
    target = tmp_path / "target"
    target.mkdir()
    code, _, err = cli("probe", str(target), "--writers", "0", "--json")
    assert code == 2 and err.strip() == "ckplan: error: --writers must be ≥ 1: '0'"
    with pytest.raises(InputError, match=r"^writers must be ≥ 1: '0'$"):
        api.open_probe(target, writers=0)
    with pytest.raises(InputError, match=r"^scale is too large: '2.0' \(at most 1, full size\)$"):
        api.probe(target, scale=2.0)
    assert os.listdir(target) == []


def test_library_messages_name_its_parameters():
    """str() of a refusal names the library's parameter, not a flag; numbers are bounded as the strings are."""
    cases = [
        (lambda: api.size(params=-7e9), "params must be ≥ 1: '-7000000000.0'"),
        (lambda: api.size(gpus=0), "gpus must be ≥ 1: '0'"),
        (lambda: api.size(gpus=8, gpus_per_node=16), "gpus_per_node 16 exceeds gpus 8"),
        (lambda: api.size(params=math.inf), "params is too large: 'inf' (at most 1e15)"),
        (
            lambda: api.recommend(api.size(), "nfs", max_overhead=-1),
            "max_overhead must lie between 0.0001% and 100%: -1",
        ),
        (lambda: api.recommend(api.size(), "nfs", max_overhead=1.5), "max_overhead must lie between"),
        (lambda: api.recommend(api.size(), "nfs", mtbf_s=0), "mtbf_s must be > 0: '0'"),
        (lambda: api.recommend(api.size(), "nfs", mtbf_s=math.nan), "mtbf_s is not a number: 'nan'"),
        (lambda: api.recommend(api.size(), "nfs", restart_s=1e300), "restart_s is too large: '1e+300'"),
        (lambda: api.recommend(api.size(), "nfs", max_overhed=0.05), "recommend takes no max_overhed"),  # type: ignore[call-arg]
        (lambda: api.size(gpus=True), "gpus: Input should be a valid integer"),
        (lambda: api.provision([8], save_time_s=1), "provision takes no save_time_s"),  # type: ignore[call-arg]
        (lambda: api.recommend(api.size(), "nfs", policy=Policy(), mtbf_s=1), "give a Policy or its fields, not both"),
    ]
    for call, message in cases:
        with pytest.raises(InputError) as exc:
            call()
        assert str(exc.value).startswith(message), (message, str(exc.value))


# a value each Policy field refuses; the keys must be every field, so a new field comes with its bound
POLICY_REFUSES = {
    "mode": "staged",
    "max_loss_s": 0,
    "max_overhead": -1,
    "mtbf_s": 0.5,
    "node_failures_per_1000_days": -1,
    "job_failures_per_day": math.inf,
    "restart_s": -1,
    "restart_fixed_s": "1e9h",
    "collective_timeout_s": 0,
    "iteration_s": math.nan,
    "snapshot_bytes_per_s": 0.5,
    "host_memory_bytes": "2EiB",
    "local_disk_bytes": 0,
    "changed_fraction": 1.01,
    "serialize_bytes_per_s": {"torch.save": "9PB/s"},
    "aggregate_limit_bytes_per_s": 1e-320,
    "save_time_s": 0,
    "stall_time_s": -1,
}


def test_policy_bounds_every_field():
    assert set(POLICY_REFUSES) == set(Policy.model_fields)
    for field, value in POLICY_REFUSES.items():
        with pytest.raises(ValidationError, match=field):  # the model itself, as pydantic reports it
            Policy(**{field: value})
        with pytest.raises(InputError) as exc:  # through the library's door: one line naming the field
            Policy.from_inputs({field: value})
        assert str(exc.value).startswith(field) or f" {field}" in str(exc.value), str(exc.value)
    assert Policy(max_overhead=1e-6, changed_fraction=1, restart_s=0, mtbf_s=1).max_overhead == 1e-6


def test_policy_inputs_name_every_field():
    """The keyword arguments recommend and provision take (typed for mypy) are Policy's fields; provision's are the
    ones its command takes."""
    from ckplan.cli.commands.plan import provision

    assert api.PolicyInputs.__optional_keys__ == set(Policy.model_fields)
    flags = set(inspect.signature(provision).parameters) - {"mode"}  # provision's --mode is its own, not Policy's
    assert api.ProvisionPolicyInputs.__optional_keys__ == flags & set(Policy.model_fields)


def test_plan_inputs_are_the_requests_fields():
    """size's and provision's plan arguments (typed for mypy) are a PlanRequest's fields: size takes every one
    (the parameter count first), provision all but the world size it sweeps and a measured directory."""
    from ckplan.request import PlanRequest

    fields = set(PlanRequest.model_fields)
    assert api.SizeInputs.__optional_keys__ | {"params"} == fields
    assert list(inspect.signature(api.size).parameters)[0] == "params"
    plan = api.ProvisionInputs.__optional_keys__ - api.ProvisionPolicyInputs.__optional_keys__
    assert plan == fields - {"gpus", "from_dir"}
    assert not plan & set(Policy.model_fields)  # provision tells a plan field from a policy one by name


def test_probe_inputs_are_the_requests_fields():
    """open_probe's and probe's keyword arguments (typed for mypy) are exactly a ProbeRequest's fields and every
    backend's options, those the request is built from."""
    from ckplan.probe.backends import backend_options
    from ckplan.probe.request import ProbeRequest

    options = {n for model in backend_options().values() for n in model.model_fields}
    assert api.ProbeInputs.__optional_keys__ == (set(ProbeRequest.model_fields) - {"path", "options"}) | options
    for function in (api.open_probe, api.probe):
        kinds = [(n, p.kind) for n, p in inspect.signature(function).parameters.items() if n != "path"]
        assert kinds == [("notice", inspect.Parameter.KEYWORD_ONLY), ("inputs", inspect.Parameter.VAR_KEYWORD)]


def test_import_is_lazy():
    """`import ckplan` loads neither the API nor pydantic; the first use of ckplan.size does."""
    code = (
        "import sys, ckplan; print('ckplan.api' in sys.modules, 'pydantic' in sys.modules, 'typing' in sys.modules);"
        "ckplan.size; print('ckplan.api' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False", "True"]
    with pytest.raises(AttributeError, match="no attribute 'sise'"):
        ckplan.sise  # noqa: B018


def test_probe_checks_its_arguments_in_a_fresh_process(tmp_path):
    """probe's first call in a process resolves the plan model its keyword TypedDict names (it once raised
    pydantic's PydanticUndefinedAnnotation there, when no other function had imported it first)."""
    code = (
        "from ckplan import api\nfrom ckplan.errors import InputError\ntry:\n"
        f"    api.probe({str(tmp_path)!r}, scale=2.0)\nexcept InputError as exc:\n    print(exc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "scale is too large: '2.0' (at most 1, full size)"
    assert os.listdir(tmp_path) == []


def test_example_runs_and_type_checks(tmp_path):
    """The README's example runs, and mypy passes on it; the same example calling the API wrongly (a misspelt
    policy field, a string where a GPU count goes, a Recommendation where a plan goes) fails mypy, so the check
    can fail."""
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=True).stdout
    assert "one save writes 98.0 GB in 20 files" in out and "save every" in out
    assert "refused: max_overhead must lie between" in out
    mypy = [str(Path(sys.executable).parent / "mypy"), "--no-incremental", "--cache-dir", str(tmp_path / "cache")]
    good = subprocess.run([*mypy, str(EXAMPLE)], capture_output=True, text=True, cwd=ROOT)
    assert good.returncode == 0, good.stdout
    wrong = tmp_path / "wrong_example.py"
    wrong.write_text(
        EXAMPLE.read_text()
        + 'ckplan.recommend(plan, "nfs", max_overhed=0.05)\n'
        + 'ckplan.size(gpus="8")\n'
        + 'ckplan.recommend(rec, "nfs")\n'
    )
    bad = subprocess.run([*mypy, str(wrong)], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1, bad.stdout
    assert 'Unexpected keyword argument "max_overhed" for "recommend"' in bad.stdout
    assert 'Argument "gpus" to "size" has incompatible type "str"' in bad.stdout
    assert 'Argument 1 to "recommend" has incompatible type "Recommendation"' in bad.stdout
    assert "Found 3 errors" in bad.stdout


def test_wheel_ships_py_typed(tmp_path):
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
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    names = zipfile.ZipFile(next(tmp_path.glob("ckplan-*.whl"))).namelist()
    assert {"ckplan/py.typed", "ckplan/api.py", "ckplan/request.py"} <= set(names)


def test_cli_default_is_the_library_default():
    """`size`'s shown default is the library's DEFAULT_PARAMETERS (cli/options.py keeps no default of its own)."""
    from ckplan.request import DEFAULT_PARAMETERS

    assert DEFAULT_PARAMETERS == 7 * 10**9
    assert run_json("size")["parameters"] == DEFAULT_PARAMETERS


# --- wrong arguments: each function refuses them with InputError, one line naming the argument ---------------------


def _nfs():
    return api._storage("nfs")


# (function, its arguments as a call, what the line says): a wrong type and a wrong value at least for each public
# function; a value of the right type is bounded by the model it fills, so these lines are the models' own
WRONG_ARGUMENTS: list[tuple[str, Callable[[], object], str]] = [
    ("size", lambda: api.size(gpus=8.7), "gpus: Input should be a valid integer, got 8.7"),  # type: ignore[arg-type]
    ("size", lambda: api.size(gpus=True), "gpus: Input should be a valid integer, got True"),
    ("size", lambda: api.size(tp="2"), "tp: Input should be a valid integer, got '2'"),  # type: ignore[arg-type]
    ("size", lambda: api.size(params=None, model=7), "model: Input should be a valid string, got 7"),  # type: ignore[arg-type]
    ("size", lambda: api.size(gpus=-8), "gpus must be ≥ 1: '-8'"),
    ("size", lambda: api.size(params=math.nan), "params"),
    ("size", lambda: api.size(interval=-1), "interval must be > 0"),
    ("size", lambda: api.size(1, 2), "size takes 1 positional argument(s)"),  # type: ignore[misc, arg-type]
    ("plan_request", lambda: api.plan_request(gpus=8.7), "gpus: Input should be a valid integer"),
    ("plan_request", lambda: api.plan_request(tp=0), "tp must be ≥ 1"),
    ("size_request", lambda: api.size_request("7B"), "request: Input should be"),  # type: ignore[arg-type]
    ("size_request", lambda: api.size_request(api.plan_request(), max_overhead=math.inf), "max_overhead"),
    ("recommend", lambda: api.recommend(api.size(), None), "storage takes StorageProfile | str | os"),  # type: ignore[arg-type]
    ("recommend", lambda: api.recommend(None, "nfs"), "plan takes CheckpointPlan | PlanRequest | str"),  # type: ignore[arg-type]
    ("recommend", lambda: api.recommend(api.size()), "recommend needs storage"),  # type: ignore[call-arg]
    ("recommend", lambda: api.recommend(api.size(), "nfs", mtbf_s=True), "mtbf_s takes int | float | str, got True"),
    ("recommend", lambda: api.recommend(api.size(), "nfs", mtbf_s=math.inf), "mtbf_s"),
    ("recommend", lambda: api.recommend(api.size(), "nfs", restart_s=-1), "restart_s"),
    ("recommend", lambda: api.recommend(api.size(), "nfs", policy="strict"), "policy: Input should be"),  # type: ignore[arg-type]
    ("compare", lambda: api.compare(api.size(), mode="fast"), "mode: Input should be 'sync' or 'async'"),  # type: ignore[arg-type]
    ("compare", lambda: api.compare(api.size(), mtbf_s=-1), "mtbf_s must be > 0"),
    ("provision", lambda: api.provision(gpus=8), "gpus takes Sequence[int] | str, got 8"),  # type: ignore[arg-type]
    ("provision", lambda: api.provision(gpus=[8.7]), "gpus takes Sequence[int] | str, got [8.7]"),  # type: ignore[list-item]
    ("provision", lambda: api.provision([8], keep=True), "keep: Input should be a valid integer, got True"),
    ("provision", lambda: api.provision([8], keep=0), "keep must be ≥ 1"),
    ("provision", lambda: api.provision([-8]), "gpus must be ≥ 1"),
    ("provision", lambda: api.provision([8], target_goodput=math.nan), "target_goodput"),
    ("provision", lambda: api.provision([8], save_time_s=1), "provision takes no save_time_s"),  # type: ignore[call-arg]
    ("provision_request", lambda: api.provision_request(api.plan_request(), [8], policy=None), "policy: Input"),  # type: ignore[arg-type]
    (
        "provision_request",
        lambda: api.provision_request(api.plan_request(), [8], policy=Policy(), max_restore=-1),
        "max_restore must",
    ),
    ("diagnose", lambda: api.diagnose(123), "logs takes str | os.PathLike[str] | Sequence"),  # type: ignore[arg-type]
    ("diagnose", lambda: api.diagnose(LOG, by=1), "by: Input should be a valid string, got 1"),  # type: ignore[arg-type]
    ("diagnose", lambda: api.diagnose(LOG, by="step"), "by must be save or time"),
    ("diagnose", lambda: api.diagnose(LOG, interval=math.nan), "interval"),
    ("open_probe", lambda: api.open_probe("/x", writers=2.5), "writers: Input should be a valid integer, got 2.5"),  # type: ignore[arg-type]
    ("open_probe", lambda: api.open_probe("/x", scale="1"), "scale: Input should be a valid number, got '1'"),  # type: ignore[arg-type]
    ("open_probe", lambda: api.open_probe("/x", preset="fast"), "preset: Input should be 'quick', 'default' or"),  # type: ignore[arg-type]
    ("open_probe", lambda: api.open_probe("/x", writers=0), "writers must be ≥ 1"),
    # an empty hosts file is the current directory, as Path("") is, and names the hosts backend: refused, not a probe
    ("open_probe", lambda: api.open_probe("/tmp", hosts_file=""), "hosts_file . is a directory"),
    ("open_probe", lambda: api.open_probe("/x", scale=math.nan), "scale is not a number"),
    ("open_probe", lambda: api.open_probe("/x", part_bytes="1MiB"), "part_bytes must be 5 MiB to 5 GiB"),
    ("open_probe", lambda: api.open_probe("/x", agent_wait_s="1m"), "agent_wait_s applies to a multi-host probe"),
    ("open_request", lambda: api.open_request("/x"), "request: Input should be"),  # type: ignore[arg-type]
    (
        "open_request",
        lambda: api.open_request(ProbeRequest(path="/x"), notice="stderr"),  # type: ignore[arg-type]
        "notice: Input should be callable, got 'stderr'",
    ),
    ("probe", lambda: api.probe(123), "path takes str | os.PathLike[str], got 123"),  # type: ignore[arg-type]
    ("probe", lambda: api.probe("/x", scale=-1.0), "scale"),
    ("keep_profile", lambda: api.keep_profile(None, None, None), "result: Input should be"),  # type: ignore[arg-type]
    ("keep_profile", lambda: api.keep_profile(_nfs(), "bad/name", None), "save takes a plain name"),
]


@pytest.mark.parametrize(
    "call,message", [(c, m) for _, c, m in WRONG_ARGUMENTS], ids=[f"{f}-{m[:30]}" for f, _, m in WRONG_ARGUMENTS]
)
def test_a_wrong_argument_is_one_input_error_naming_it(call, message):
    with pytest.raises(InputError) as exc:
        call()
    line = str(exc.value)
    assert message in line and "\n" not in line and "‹" not in line, line


def test_every_public_function_checks_its_arguments():
    """Each public function of ckplan.api is behind the argument check and has its rows in WRONG_ARGUMENTS, so a
    new function cannot skip either."""
    public = {
        name
        for name, member in vars(api).items()
        if inspect.isfunction(member) and member.__module__ == api.__name__ and not name.startswith("_")
    }
    assert public >= set(ckplan.__all__) - {"__version__", "api"}
    assert {name for name in public if not hasattr(getattr(api, name), "__wrapped__")} == set()
    rows = [function for function, _, _ in WRONG_ARGUMENTS]
    assert {name for name in public if rows.count(name) < 2} == set()
    assert set(rows) <= public


def test_the_api_is_reachable_from_the_bare_package_and_loads_only_on_use():
    code = (
        "import sys, ckplan\n"
        "assert 'ckplan.api' not in sys.modules, 'import ckplan loaded the API'\n"
        "print(ckplan.api.size(params='7B').total_bytes == ckplan.size(params='7B').total_bytes, ckplan.__version__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    from ckplan.version import __version__

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", __version__]
