"""A plan or profile from elsewhere cannot write outside its target, and is consistent and physical or refused.

Every refusal here is bad input: exit 2, one line on stderr naming the file and the field, nothing written to the
working directory (the in-process harness of tests/test_bad_inputs.py checks that), and, for the traversal cases,
a sentinel file's checksum unchanged and nothing created outside the target. The suite runs as root, the user a
shared plan file would do the most harm as.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_bad_inputs import _check, run  # noqa: F401  (run: the in-process CLI fixture)

SENTINEL_BYTES = b"do not overwrite\n" * 64


def _plan(*flags: str) -> dict:
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan

    options = dict(f.split("=", 1) for f in flags)
    plan = build_plan(
        arch=catalog.model("llama-3.1-8b"),
        parameters=10**8,
        framework="deepspeed",
        gpus=2,
        gpus_per_node=2,
        options=options or None,
    )
    return json.loads(plan.model_dump_json())


@pytest.fixture
def sentinel(tmp_path_factory):
    """A file outside every target, and a name outside it that nothing may create."""
    d = tmp_path_factory.mktemp("outside")
    path = d / "sentinel"
    path.write_bytes(SENTINEL_BYTES)
    escape = Path("/tmp") / f"ckplan-escape-{secrets.token_hex(4)}"
    yield path, escape
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(SENTINEL_BYTES).hexdigest()
    assert not escape.exists(), f"a write escaped the target: {escape}"


def _evil(tmp_path: Path, doc: dict, sentinel: Path, escape: Path) -> Path:
    doc = json.loads(json.dumps(doc))
    doc["manifest"][0]["path"] = str(sentinel)  # an existing file elsewhere, by absolute path
    depth = "../" * 12
    doc["manifest"][1]["path"] = f"global_step1000/{depth}{escape.relative_to('/')}"
    out = tmp_path / "evil.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "@target", "--storage", "nfs"],
        ["probe", "@target", "--quick", "--no-calibrate"],
        ["probe", "@target", "--quick", "--no-calibrate", "fast"],  # a direct-writer plan: ckplan's raw writer
        ["probe", "s3://ckpt/probes", "--endpoint-url", "http://127.0.0.1:9"],
        ["probe", "@target", "--hosts", "127.0.0.1:9"],
    ],
    ids=["validate", "probe-buffered", "probe-direct", "probe-s3", "probe-hosts"],
)
def test_a_plan_naming_files_outside_its_target_is_refused(run, tmp_path, sentinel, command):  # noqa: F811
    target = tmp_path / "target"
    target.mkdir()
    flags = ["writer=fast"] if command[-1] == "fast" else []
    argv = [str(target) if a == "@target" else a for a in command if a != "fast"]
    plan = _evil(tmp_path, _plan(*flags), *sentinel)
    line = _check(*run(*argv, "--plan", str(plan), "--json"), 2)
    assert str(plan) in line and "manifest[0].path" in line and "absolute" in line, line
    assert os.listdir(target) == [], "the refused command wrote into its target"


def test_writers_refuse_a_path_that_resolves_outside_their_directory(tmp_path, sentinel):
    """Defence in depth, below the plan's own check: ckplan's raw writer, the framework saver and the S3 key
    builder each refuse a relative path with `..`, an absolute one, and a path through a symlink planted inside
    the directory they write into, before a byte is written."""
    from ckplan.confine import confined_key
    from ckplan.errors import InputError
    from ckplan.savers.raw import FileToWrite, write_files
    from ckplan.savers.saver import save_files

    outside, escape = sentinel
    root = tmp_path / "scratch"
    root.mkdir()
    (root / "link").symlink_to(outside.parent)  # a directory inside that leads outside
    (root / "final").symlink_to(outside)  # a final name that is a symlink to the sentinel
    bad = [f"../../{escape.name}", str(outside), "link/new.pt", "final", "a/../../x"]
    for path in bad:
        with pytest.raises(InputError, match="refusing to write"):
            write_files(root, [FileToWrite(path, 4096, 0, "weights")])
        with pytest.raises(InputError, match="refusing to write"):
            write_files(root, [FileToWrite(path, 8192, 0, "weights")], direct=True)
        if not path.startswith(("link", "final")):  # symlinks belong to a filesystem, not to object keys
            with pytest.raises(InputError, match="refusing to write"):
                confined_key("probe/", path)
    torch = pytest.importorskip("torch")
    for path in ["link/x.pt", "final", f"../{escape.name}.pt"]:
        with pytest.raises(InputError, match="refusing to write"):
            save_files(root, {path: {"t": torch.zeros(4)}}, "torch.save")
    assert sorted(os.listdir(outside.parent)) == ["sentinel"]
    assert sorted(os.listdir(root)) == ["final", "link"]


# (field to set, value, what the one line names): a plan that disagrees with itself or with the world it sizes
PLAN_CASES = [
    ("manifest.0.rank", 999, "rank 999"),
    ("manifest.0.node", 7, "node 7"),
    ("total_bytes", 1, "total_bytes"),
    ("manifest.0.bytes", 10**30, "manifest.0.bytes"),
    (
        "manifest.3.bytes",
        0,
        "manifest[3].path 'global_step1000/mp_rank_00_model_states.pt' is a weights file of 0 bytes",
    ),
    ("setup.framework", "tensorflow", "unknown framework 'tensorflow'"),
    ("setup.optimizer", "adamax", "unknown optimizer 'adamax'"),
    ("setup.precision", "fp8-ish", "unknown precision"),
    ("manifest.0.path", "", "is empty"),
    ("manifest.1.path", "@0", "listed twice"),
    ("manifest.0.path", "a//b.pt", "empty component"),
    ("manifest.0.path", "a/./b.pt", "'.' component"),
    ("manifest.0.path", "x\n.pt", "control or format character"),
    ("manifest.0.path", "x\u0085.pt", "control or format character"),  # C1: NEL
    ("manifest.0.path", "gpj.\u202ept", "control or format character"),  # a bidi override shows 'tp.jpg'
    ("nodes.0.writers", 0, "nodes.0.writers"),
    ("nodes.0.bytes", 5, "nodes"),
    ("setup.nodes", 3, "setup: nodes 3 is not gpus 2"),
    ("file_count", 1, "file_count"),
    ("bytes_per_rank_max", 0, "bytes_per_rank_max"),
    ("state_bytes", 0, "state_bytes"),
    ("setup.gpus", "2", "setup.gpus: Input should be a valid integer"),
    ("manifest.0.bytes", True, "manifest.0.bytes: Input should be a valid integer"),
]


def _set(doc: dict, dotted: str, value) -> dict:
    doc = json.loads(json.dumps(doc))
    *path, last = dotted.split(".")
    node = doc
    for step in path:
        node = node[int(step)] if isinstance(node, list) else node[step]
    if value == "@0":
        value = doc["manifest"][0]["path"]
    node[int(last) if isinstance(node, list) else last] = value
    return doc


@pytest.mark.parametrize("field,value,fragment", PLAN_CASES, ids=[f"{f}={v!r}"[:40] for f, v, _ in PLAN_CASES])
def test_an_inconsistent_plan_is_refused_naming_the_file_and_field(run, tmp_path, field, value, fragment):  # noqa: F811
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_set(_plan(), field, value)))
    line = _check(*run("recommend", "--plan", str(path), "--storage", "nfs", "--json"), 2)
    assert str(path) in line and fragment in line, line


def test_a_plan_whose_files_hold_nothing_is_refused(run, tmp_path):  # noqa: F811
    doc = _plan()
    for f in doc["manifest"]:
        f["bytes"] = 0
    # the sums made consistent, so that only the zero total is wrong
    from ckplan.frameworks.layout import ManifestFile
    from ckplan.sizing.plan import manifest_fields

    fields = manifest_fields([ManifestFile(**f) for f in doc["manifest"]], doc["operations"]["renames"])
    for name, value in fields.items():
        if name != "manifest":
            doc[name] = json.loads(json.dumps(value, default=lambda m: m.model_dump()))
    doc["state_bytes"], doc["small_file_bytes"] = 0, 0
    doc["breakdown"] = []
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    line = _check(*run("recommend", "--plan", str(path), "--storage", "nfs", "--json"), 2)
    assert "0 bytes" in line, line


def _profile() -> dict:
    from ckplan import catalog

    doc = json.loads(catalog.storage_classes()["nfs"].model_dump_json())
    doc["replay"] = {
        "seconds": 2.0,
        "bytes": 10**9,
        "files": 3,
        "writers": 2,
        "scale": 0.1,
        "plan_fingerprint": "0" * 16,
        "full_scale_seconds": 20.0,
    }
    doc["calibration"] = {
        "serialize_bytes_per_s": {"torch.save": 2e9, "safetensors": 3e9, "dcp": 2e9},
        "sample_bytes": 2**27,
        "tensor_bytes": 2**25,
        "torch_version": "2.13.0",
        "host": "h",
        "duration_s": 10,
    }
    return doc


PROFILE_CASES = [
    ("aggregate_limit_bytes_per_s", -1.0, "aggregate_limit_bytes_per_s"),
    ("aggregate_limit_bytes_per_s", 0.0, "aggregate_limit_bytes_per_s"),
    ("buffered_bandwidth.0.writers", 0, "buffered_bandwidth.0.writers"),
    ("buffered_bandwidth.0.writers", -4, "buffered_bandwidth.0.writers"),
    ("buffered_bandwidth.0.writers", 2**40, "buffered_bandwidth.0.writers"),
    ("hosts", 0, "hosts"),
    ("hosts", -3, "hosts"),
    ("buffered_bandwidth.0.bytes_per_s", 0.5, "buffered_bandwidth.0.bytes_per_s"),
    ("buffered_bandwidth.0.bytes_per_s", 1e-320, "buffered_bandwidth.0.bytes_per_s"),
    ("buffered_bandwidth.0.bytes_per_s", 1e300, "buffered_bandwidth.0.bytes_per_s"),
    ("buffered_bandwidth.1.writers", 1, "comes twice"),
    ("buffered_bandwidth.1.writers", 16, "in rising order"),
    ("fsync_latency.p50_s", 1.0, "p50_s"),
    ("fsync_latency.p50_s", -0.001, "fsync_latency.p50_s"),
    ("replay.scale", 0.0, "replay.scale"),
    ("replay.scale", 1.5, "replay.scale"),
    ("replay.seconds", 0.0, "replay.seconds"),
    ("calibration.serialize_bytes_per_s.torch.save", 0.0, "calibration.serialize_bytes_per_s"),
    ("small_files.files_per_s", 0.0, "small_files.files_per_s"),
    ("aggregate_files_per_s", 0.0, "aggregate_files_per_s"),
    ("best_write_bytes_per_s", 0.0, "best_write_bytes_per_s"),
    ("buffered_bandwidth.0.writers", True, "buffered_bandwidth.0.writers: Input should be a valid integer"),
    ("buffered_bandwidth.0.bytes_per_s", "1e9", "buffered_bandwidth.0.bytes_per_s: Input should be a valid number"),
]


def _set_key(doc: dict, dotted: str, value) -> dict:
    doc = json.loads(json.dumps(doc))
    if dotted.startswith("calibration.serialize_bytes_per_s."):
        doc["calibration"]["serialize_bytes_per_s"][dotted.rsplit("per_s.", 1)[1]] = value
        return doc
    return _set(doc, dotted, value)


@pytest.mark.parametrize("field,value,fragment", PROFILE_CASES, ids=[f"{f}={v!r}"[:40] for f, v, _ in PROFILE_CASES])
def test_an_unphysical_profile_is_refused_naming_the_file_and_field(run, tmp_path, field, value, fragment):  # noqa: F811
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(_set_key(_profile(), field, value)))
    line = _check(*run("recommend", "--storage", str(path), "--json"), 2)
    assert str(path) in line and fragment in line, line


def test_the_edited_profiles_base_is_accepted(run, tmp_path):  # noqa: F811
    """The cases above differ from an accepted profile by one field each."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(_profile()))
    code, out, err = run("recommend", "--storage", str(path), "--json")
    assert code == 0, err


def _timed(run, *argv: str) -> tuple[str, float]:  # noqa: F811
    start = time.monotonic()
    line = _check(*run(*argv, "--json"), 2)
    return line, time.monotonic() - start


def test_save_processes_are_capped_before_any_starts(run, tmp_path):  # noqa: F811
    from ckplan import catalog
    from ckplan.savers.saver import max_save_processes
    from ckplan.sizing.plan import build_plan

    pytest.importorskip("torch")
    ranks = max_save_processes() + 2
    plan = build_plan(
        arch=catalog.model("llama-3.1-8b"), parameters=10**8, framework="dcp", zero=3, gpus=ranks, gpus_per_node=ranks
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    target = tmp_path / "target"
    target.mkdir()
    line, took = _timed(run, "validate", str(target), "--plan", str(path), "--storage", "nfs", "--scale", "0.001")
    assert f"needs {ranks} save processes" in line and f"{max_save_processes()} here" in line, line
    assert took < 5 and os.listdir(target) == []


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["calibrate", "--ranks", "1048577"], "--ranks"),
        (["validate", "/tmp", "--plan", "@plan", "--storage", "nfs", "--repeats", "101"], "--repeats"),
        (["validate", "/tmp", "--plan", "@plan", "--storage", "nfs", "--repeats", "1e11"], "--repeats"),
        (["provision", "--params", "7e9", "--gpus", ",".join(str(8 * (i + 1)) for i in range(1000))], "--gpus"),
        (["size", "--model", "@deep.toml"], "layers"),
        (["probe", "s3://ckpt/p", "--endpoint-url", "http://127.0.0.1:9", "--max-bytes", "1"], "--max-bytes"),
        (["probe", "s3://ckpt/p", "--endpoint-url", "http://127.0.0.1:9", "--part-size", "6GiB"], "--part-size"),
        (["probe", "s3://ckpt/p", "--endpoint-url", "http://127.0.0.1:9", "--part-size", "4MiB"], "--part-size"),
    ],
    ids=[
        "calibrate-ranks",
        "repeats-101",
        "repeats-1e11",
        "provision-1000-sizes",
        "model-1e8-layers",
        "s3-max-bytes-1",
        "s3-part-6GiB",
        "s3-part-4MiB",
    ],
)
def test_resources_are_bounded_before_work_starts(run, tmp_path, argv, fragment):  # noqa: F811
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan()))
    toml = tmp_path / "deep.toml"
    toml.write_text(
        'name = "deep"\ndisplay = "Deep"\nhidden = 64\nlayers = 100000000\nffn = 256\nheads = 4\nkv_heads = 4\n'
        'vocab = 1000\npublished_parameters = 1000000000\nsource = "by hand"\n'
    )
    files = {"@plan": str(plan), "@deep.toml": str(toml)}
    args = [files.get(a, a) for a in argv]
    line, took = _timed(run, *args)
    assert fragment in line and took < 5, (line, took)


def test_a_plan_of_too_many_files_is_refused_within_seconds(run, tmp_path):  # noqa: F811
    from ckplan.sizing.plan import MAX_MANIFEST_FILES

    doc = _plan()
    row = doc["manifest"][0]
    doc["manifest"] = [{**row, "path": f"f/{i}.pt"} for i in range(MAX_MANIFEST_FILES + 1)]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    line, took = _timed(run, "recommend", "--plan", str(path), "--storage", "nfs")
    assert "manifest" in line and f"{MAX_MANIFEST_FILES}" in line.replace(",", ""), line
    assert took < 20, took


def test_a_plan_larger_than_the_limit_is_refused_before_it_is_parsed(run, tmp_path):  # noqa: F811
    from ckplan.readers import MAX_PLAN_BYTES

    path = tmp_path / "plan.json"
    with open(path, "wb") as f:
        f.truncate(MAX_PLAN_BYTES + 1)
    line, took = _timed(run, "recommend", "--plan", str(path), "--storage", "nfs")
    assert "too large" in line and took < 2, (line, took)


def test_the_limit_sized_plan_loads_within_seconds(tmp_path):
    """The largest plan ckplan reads (MAX_MANIFEST_FILES files, as `size --json` writes them) loads and plans in
    seconds: a measured figure for the README's limit, not a pass/fail timing (scripts/ have the benchmarks), so the
    bound is loose."""
    from ckplan.sizing.plan import MAX_MANIFEST_FILES

    gpus = MAX_MANIFEST_FILES - 8  # DCP writes one file per rank and .metadata
    plan = run_cli("size", "--params", "1e9", "--framework", "dcp", "--zero", "3", "--gpus", str(gpus), "--json")
    assert plan.returncode == 0, plan.stderr
    path = tmp_path / "plan.json"
    path.write_text(plan.stdout)
    assert len(json.loads(plan.stdout)["manifest"]) <= MAX_MANIFEST_FILES
    start = time.monotonic()
    proc = run_cli("recommend", "--plan", str(path), "--storage", "lustre", "--json")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 30


def _restore_plan(framework: str = "deepspeed", **layout: int | None) -> dict:
    """A built plan with a restore section, as JSON: two nodes of 8 GPUs unless told otherwise."""
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan

    shape: dict[str, int | None] = {"gpus": 16, "gpus_per_node": 8, **layout}
    model = "mixtral-8x7b" if (shape.get("ep") or 1) > 1 else "llama-3.1-8b"
    plan = build_plan(arch=catalog.model(model), parameters=10**8, framework=framework, **shape)  # type: ignore[arg-type]
    assert plan.restore is not None, f"{framework} {layout} plans no restore"
    return json.loads(plan.model_dump_json())


def _shared_file(restore: dict) -> dict:
    """The restore row of the largest file many ranks read (DeepSpeed's first model-states file)."""
    return max(restore["files"], key=lambda f: f["bytes"])


def _set_readers(restore: dict, value: int) -> None:
    _shared_file(restore)["readers"] = value


def _set_path(restore: dict, value: str) -> None:
    _shared_file(restore)["path"] = value


def _add_a_byte(restore: dict) -> None:
    _shared_file(restore)["bytes"] += 1


def _unknown_format(restore: dict) -> None:
    restore["rank_bytes_by_format"]["pickle"] = 0  # sums unchanged: only the name is wrong


def _shift(field: str, delta: int) -> Callable[[dict], None]:
    def shift(restore: dict) -> None:
        restore[field] += delta

    return shift


def _put(field: str, value: Callable[[dict], float]) -> Callable[[dict], None]:
    def put(restore: dict) -> None:
        restore[field] = value(restore)

    return put


def _shared_file_index(restore: dict) -> int:
    return restore["files"].index(_shared_file(restore))


# (what is changed, how, what the one line names; {i}: the changed file's row) on a 16-GPU DeepSpeed plan of 8 GPUs
# a node: one field each
RESTORE_CASES: list[tuple[str, Callable[[dict], None], str]] = [
    ("readers_per_node=0", _put("readers_per_node", lambda r: 0), "restore.readers_per_node is 0"),
    ("readers_per_node=9", _put("readers_per_node", lambda r: 9), "restore.readers_per_node is 9"),
    ("nodes=0", _put("nodes", lambda r: 0), "restore.nodes is 0"),
    ("nodes=3", _put("nodes", lambda r: 3), "restore.nodes is 3"),
    ("files.path", lambda r: _set_path(r, "global_step1000/elsewhere.pt"), "restore.files.{i}.path 'global_step1000/"),
    ("files.bytes+1", _add_a_byte, "restore.files.{i}.bytes is "),
    ("files.readers=1", lambda r: _set_readers(r, 1), "restore.files.{i}.readers is 1"),
    ("requested_bytes+1", _shift("requested_bytes", 1), "restore.requested_bytes is "),
    ("requested_bytes-1", _shift("requested_bytes", -1), "restore.requested_bytes is "),
    ("rank_bytes_by_format", _unknown_format, "restore.rank_bytes_by_format names 'pickle'"),
    (
        "read_amplification",
        _put("read_amplification", lambda r: r["read_amplification"] * 2),
        "restore.read_amplification",
    ),
    ("storage_bytes<node_bytes", _put("storage_bytes", lambda r: r["node_bytes"] - 1), "restore.storage_bytes"),
    ("storage_bytes>requested", _put("storage_bytes", lambda r: r["requested_bytes"] + 1), "restore.storage_bytes"),
]


@pytest.mark.parametrize("change,fragment", [(c, f) for _, c, f in RESTORE_CASES], ids=[i for i, _, _ in RESTORE_CASES])
def test_an_inconsistent_restore_section_is_refused_naming_the_field(run, tmp_path, change, fragment):  # noqa: F811
    doc = _restore_plan()
    row = _shared_file_index(doc["restore"])
    change(doc["restore"])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    line = _check(*run("recommend", "--plan", str(path), "--storage", "nfs", "--json"), 2)
    assert str(path) in line and fragment.format(i=row) in line, line


def _layouts_with_a_restore_section() -> list[tuple[str, dict[str, int | None]]]:
    """Every layout of the sizing registry, at each ZeRO stage, with and without model and expert parallelism,
    on whole and partial nodes: the ones that plan their restore reads."""
    from ckplan import catalog
    from ckplan.errors import InputError
    from ckplan.frameworks import FRAMEWORKS
    from ckplan.sizing.plan import build_plan

    found = []
    for framework in FRAMEWORKS:
        for zero in (None, 0, 1, 2, 3):
            for tp, pp, ep in ((1, 1, 1), (2, 2, 1), (1, 1, 2), (2, 2, 2)):
                for gpus in (16, 12):
                    shape: dict[str, int | None] = {"gpus": gpus, "gpus_per_node": 8, "zero": zero, "tp": tp, "pp": pp}
                    shape["ep"] = ep
                    model = catalog.model("mixtral-8x7b" if ep > 1 else "llama-3.1-8b")
                    try:
                        plan = build_plan(arch=model, parameters=10**8, framework=framework, **shape)  # type: ignore[arg-type]
                    except InputError:  # a layout this framework cannot take
                        continue
                    if plan.restore is not None:
                        found.append((framework, shape))
    return found


def test_every_real_plan_with_a_restore_section_is_accepted(run, tmp_path):  # noqa: F811
    """The restore checks refuse only what no layout plans: each layout's own plans pass them, read back as a file."""
    layouts = _layouts_with_a_restore_section()
    from ckplan.frameworks import FRAMEWORKS

    assert {framework for framework, _ in layouts} == set(FRAMEWORKS)
    path = tmp_path / "plan.json"
    for framework, shape in layouts:
        path.write_text(json.dumps(_restore_plan(framework, **shape)))
        code, _, err = run("recommend", "--plan", str(path), "--storage", "nfs", "--json")
        assert code == 0, (framework, shape, err)


def _replayed_profile() -> dict:
    """A profile of two hosts with a write and a read replay of a real plan, as JSON."""
    from ckplan.profile import ReadReplay, Replay
    from ckplan.sizing.plan import CheckpointPlan
    from tests.handmade import hand_calibration, hand_profile

    fingerprint = CheckpointPlan.model_validate(_restore_plan()).fingerprint
    replay = Replay(
        seconds=2.0,
        bytes=10**9,
        files=8,
        writers=8,
        scale=0.1,
        plan_fingerprint=fingerprint,
        full_scale_seconds=20.0,
        serialize_seconds=1.0,
        nodes=2,
    )
    read_replay = ReadReplay(
        seconds=1.0,
        bytes=10**9,
        files=8,
        readers=8,
        scale=0.1,
        plan_fingerprint=fingerprint,
        full_scale_seconds=10.0,
        deserialize_seconds=1.0,
        nodes=2,
    )
    profile = hand_profile(
        {1: 1e9, 8: 4e9},
        hosts_curve={1: 4e9, 2: 8e9},
        calibration=hand_calibration({"torch.save": 2e9, "safetensors": 3e9, "dcp": 2e9}),
        replay=replay,
    )
    doc = json.loads(profile.model_dump_json())
    doc["read_replay"] = json.loads(read_replay.model_dump_json())
    return doc


# (field, value, what the one line names): a replay that disagrees with itself or with the profile it is part of
REPLAY_CASES = [
    ("replay.writers", 9, "writers 9 exceeds files 8"),
    ("replay.bytes", 7, "bytes 7 is below files 8"),
    ("replay.full_scale_seconds", 1.5, "full_scale_seconds 1.5 is below seconds 2"),
    ("replay.nodes", 3, "replay.nodes 3 exceeds hosts 2"),
    ("replay.method", "framework saver", "serialize_seconds is 1 for method 'framework saver'"),
    ("read_replay.nodes", 3, "read_replay.nodes 3 exceeds hosts 2"),
    ("read_replay.method", "framework loader", "deserialize_seconds is 1 for method 'framework loader'"),
    ("read_replay.full_scale_seconds", 0.5, "read_replay"),
]


@pytest.mark.parametrize("field,value,fragment", REPLAY_CASES, ids=[f"{f}={v!r}"[:40] for f, v, _ in REPLAY_CASES])
def test_an_inconsistent_replay_is_refused_naming_the_field(run, tmp_path, field, value, fragment):  # noqa: F811
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(_set(_replayed_profile(), field, value)))
    line = _check(*run("recommend", "--storage", str(path), "--json"), 2)
    assert str(path) in line and fragment in line, line


def test_the_replayed_profile_and_its_plan_are_accepted(run, tmp_path):  # noqa: F811
    """The replay cases above differ from an accepted profile by one field each."""
    profile, plan = tmp_path / "profile.json", tmp_path / "plan.json"
    profile.write_text(json.dumps(_replayed_profile()))
    plan.write_text(json.dumps(_restore_plan()))
    code, _, err = run("recommend", "--plan", str(plan), "--storage", str(profile), "--json")
    assert code == 0, err
