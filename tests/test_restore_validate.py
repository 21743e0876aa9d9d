"""Real cold loads (savers/loader.py) and `ckplan validate --restore`: files of a few MB saved with PyTorch, loaded
back the frameworks' way, one process per rank, on the disk (a directory under /tmp, on /) and on /dev/shm."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

MiB = 2**20


def resident_bytes(path: Path) -> int:
    """What util-linux fincore says of the file's pages in the page cache: an independent look at the kernel's count."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[0])


@pytest.fixture(params=["disk", "shm"])
def target(request):
    if request.param == "disk":
        parent = Path(tempfile.gettempdir())
    else:
        parent = Path("/dev/shm")
        if not parent.is_dir():
            pytest.skip("no /dev/shm here")
    path = Path(tempfile.mkdtemp(prefix="ckplan-restore-test-", dir=parent))
    yield request.param, path
    shutil.rmtree(path, ignore_errors=True)


FILES = {
    0: [
        {"path": "ck/optimizer-0.pt", "bytes": 6 * MiB, "kind": "optimizer", "rank": 0},
        {"path": "ck/model.safetensors", "bytes": 4 * MiB, "kind": "weights", "rank": 0},
        {"path": "ck/trainer_state.json", "bytes": 8000, "kind": "small", "rank": 0},
    ],
    1: [{"path": "ck/optimizer-1.pt", "bytes": 6 * MiB, "kind": "optimizer", "rank": 1}],
}


@pytest.mark.skipif(shutil.which("fincore") is None, reason="needs util-linux fincore")
def test_cold_loads_drop_the_pages_first_and_read_them_back(target):
    from ckplan.savers.loader import drop_cached_pages, in_memory_filesystem, run_loads
    from ckplan.savers.saver import run_saves

    kind, root = target
    run_saves(root, FILES, "hf", 2, "sync", keep_last=True)
    saved = root / "save-1"
    assert not (root / "save-0").exists() and (saved / "ck" / "model.safetensors").is_file()
    paths = [saved / f["path"] for fs in FILES.values() for f in fs]
    assert in_memory_filesystem(root) == (kind == "shm")
    for p in paths:
        drop_cached_pages(p)
    sizes = [p.stat().st_size for p in paths]
    # on the disk the pages are gone; on tmpfs they are the file itself and stay
    assert [resident_bytes(p) for p in paths] == (
        [0] * len(paths) if kind == "disk" else [-(-s // 4096) * 4096 for s in sizes]
    )

    def item(path: str, fmt: str, times: int = 1) -> dict:
        return {"format": fmt, "path": str(saved / path), "times": times}

    shared = [item("ck/model.safetensors", "safetensors"), item("ck/trainer_state.json", "raw", 2)]
    loads = {
        0: [item("ck/optimizer-0.pt", "torch.save"), *shared],
        1: [item("ck/optimizer-1.pt", "torch.save"), *shared],
    }
    walls = run_loads(loads, 3, paths)
    assert len(walls) == 3 and all(0 < w < 60 for w in walls)
    # every loaded file's pages came back into the cache: the loads read them (safetensors' mapping touched)
    assert all(resident_bytes(p) >= s for p, s in zip(paths, sizes, strict=True))
    # independent: one cold torch.load of one optimizer file here takes less than the two ranks' whole load
    drop_cached_pages(paths[0])
    start = time.perf_counter()
    torch.load(paths[0], map_location="cpu")
    one = time.perf_counter() - start
    assert one < max(walls) * 3


def test_dcp_loads_each_rank_its_own_keys(target):
    from ckplan.savers.loader import run_loads
    from ckplan.savers.saver import run_saves

    _, root = target
    files = {r: [{"path": f"__{r}_0.distcp", "bytes": 3 * MiB, "kind": "optimizer", "rank": r}] for r in (0, 1)}
    run_saves(root, files, "dcp", 1, "sync", keep_last=True)
    saved = root / "save-0"
    assert sorted(p.name for p in saved.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    loads = {r: [{"format": "dcp", "path": str(saved), "times": 1, "writers": {r: files[r]}}] for r in (0, 1)}
    walls = run_loads(loads, 2, list(saved.iterdir()))
    assert len(walls) == 2 and all(w > 0 for w in walls)
    # a rank that asks for keys the checkpoint does not hold fails as a measurement, naming the loads
    from ckplan.errors import MeasurementFailed

    wrong = {0: [{"format": "dcp", "path": str(saved), "times": 1, "writers": {5: files[0]}}]}
    with pytest.raises(MeasurementFailed, match="rank 0's load failed during the loads"):
        run_loads(wrong, 1, [])


# --- `ckplan validate --restore` -------------------------------------------------------------------------------------

SCALE = 0.0005  # 1e9 parameters: a few MB per rank
READ_BPS, TORCH_LOAD_BPS, SAFETENSORS_BPS = 1e9, 2e9, 20e9


@pytest.fixture(scope="module")
def hand_read_profile(tmp_path_factory):
    """A profile with round figures: cold reads at 1 GB/s at any reader count, torch.load at 2 GB/s, safetensors 20."""
    from ckplan.profile import BandwidthPoint
    from tests.handmade import hand_calibration, hand_profile

    calibration = hand_calibration({"torch.save": 1e9}).model_copy(
        update={"deserialize_bytes_per_s": {"torch.save": TORCH_LOAD_BPS, "safetensors": SAFETENSORS_BPS}}
    )
    profile = hand_profile({1: 1e9, 2: 1e9}, calibration=calibration).model_copy(
        update={"read_bandwidth": [BandwidthPoint(writers=w, bytes_per_s=READ_BPS) for w in (1, 2)]}
    )
    path = tmp_path_factory.mktemp("profile") / "hand.json"
    path.write_text(profile.model_dump_json())
    return path


def sized(tmp_path, *layout: str) -> tuple[Path, dict]:
    from tests.conftest import run_cli

    path = tmp_path / "plan.json"
    path.write_text(
        run_cli("size", "--params", "1e9", "--gpus", "2", "--gpus-per-node", "2", *layout, "--json", check=True).stdout
    )
    import json

    return path, json.loads(path.read_text())


def scaled(nbytes: int) -> int:
    return max(1, int(nbytes * SCALE))


def validate_restore(tmp_path, root: Path, plan: Path, profile: Path) -> dict:
    from tests.conftest import run_json

    v = run_json(
        "validate", str(root), "--plan", str(plan), "--storage", str(profile), "--scale", str(SCALE),
        "--repeats", "3", "--restore",
    )  # fmt: skip
    assert list(root.iterdir()) == [], "validate --restore left files behind"
    return v["restore"]


def check_measured(r: dict, kind: str) -> None:
    m = r["measured"]
    assert m["repeats"] == 3 and 0 < m["min"] <= r["measured_seconds"] <= m["max"] < 60
    assert r["error_percent"] == pytest.approx((r["predicted_seconds"] - m["median"]) / m["median"] * 100)
    spread = (m["max"] - m["min"]) / m["median"]
    assert r["judged_on"] == ("range" if spread >= 0.30 else "error")
    assert r["cold"] == (kind == "disk")
    assert any("cannot be dropped" in n for n in r["notes"]) == (kind == "shm")


def test_hf_ddp_every_rank_loads_the_whole_checkpoint(tmp_path, target, hand_read_profile):
    kind, root = target
    plan, p = sized(tmp_path, "--framework", "hf", "--zero", "0")
    files = {f["path"].rsplit("/", 1)[1]: scaled(f["bytes"]) for f in p["manifest"]}
    # by hand (docs/restore-reads.md §1): each rank reads the model, optimizer.pt, scheduler.pt, config.json,
    # trainer_state.json twice and its own RNG file; training_args.bin and generation_config.json are not read
    shared = ["model.safetensors", "optimizer.pt", "scheduler.pt", "config.json"]
    rank = sum(files[n] for n in shared) + 2 * files["trainer_state.json"] + files["rng_state_0.pth"]
    distinct = sum(files[n] for n in shared) + files["trainer_state.json"] + files["rng_state_0.pth"] * 2
    r = validate_restore(tmp_path, root, plan, hand_read_profile)
    assert r["readers"] == 2 and r["files"] == 7 and r["requested_bytes"] == 2 * rank
    pred = r["prediction"]
    # the load model counts a file a rank reads twice once against storage (its page cache serves the second read)
    rank_distinct = rank - files["trainer_state.json"]
    assert (pred["rank_bytes"], pred["node_bytes"], pred["storage_bytes"], pred["nodes"]) == (
        rank_distinct,
        distinct,
        distinct,
        1,
    )
    # the files on the target are the saver's: torch.save's zip and safetensors' header add a little
    assert r["bytes"] == pytest.approx(distinct, rel=0.05)
    deserialise = (
        files["model.safetensors"] / SAFETENSORS_BPS
        + (files["optimizer.pt"] + files["scheduler.pt"] + files["rng_state_0.pth"]) / TORCH_LOAD_BPS
    )
    # deserialisation overlaps the reads (predict_load): the longer of the two
    assert r["predicted_seconds"] == pytest.approx(max(deserialise, max(rank_distinct, distinct) / READ_BPS), rel=1e-9)
    assert r["loader"].startswith("safetensors load_file")
    check_measured(r, kind)


def test_deepspeed_zero3_ranks_load_their_own_shards(tmp_path, hand_read_profile):
    root = Path(tempfile.mkdtemp(prefix="ckplan-restore-test-", dir=tempfile.gettempdir()))
    try:
        plan, p = sized(tmp_path, "--framework", "deepspeed", "--zero", "3")
        own = [scaled(f["bytes"]) for f in p["manifest"] if f["rank"] == 1 and "global_step" in f["path"]]
        states = [scaled(f["bytes"]) for f in p["manifest"] if f["path"].endswith("_model_states.pt")]
        latest = scaled(16)
        r = validate_restore(tmp_path, root, plan, hand_read_profile)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # by hand (§5): `latest` on every rank, then each rank its own model-states file (twice: check_ckpt_list loads it
    # first) and its own optim-states file; the load model counts the second read of a file against the CPU only
    assert r["readers"] == 2 and r["files"] == 5
    assert r["prediction"]["rank_bytes"] == latest + sum(own)
    shards = sum(scaled(f["bytes"]) for f in p["manifest"] if "global_step" in f["path"])
    assert r["requested_bytes"] == 2 * latest + shards + sum(states)
    check_measured(r, "disk")


def test_dcp_ranks_load_their_own_files_through_dcp(tmp_path, hand_read_profile):
    root = Path(tempfile.mkdtemp(prefix="ckplan-restore-test-", dir="/dev/shm"))
    try:
        plan, p = sized(tmp_path, "--framework", "dcp", "--zero", "3")
        r = validate_restore(tmp_path, root, plan, hand_read_profile)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    shard = {f["rank"]: scaled(f["bytes"]) for f in p["manifest"] if f["path"].endswith(".distcp")}
    assert r["readers"] == 2 and r["files"] == 3 and r["loader"].startswith("torch.distributed.checkpoint.load")
    # each rank its own shard and the .metadata (§4, FSDP loaded on the same mesh)
    metadata = next(scaled(f["bytes"]) for f in p["manifest"] if f["path"].endswith(".metadata"))
    assert r["prediction"]["rank_bytes"] == max(shard.values()) + metadata
    check_measured(r, "shm")


def test_restore_bad_input(tmp_path, hand_read_profile):
    from tests.conftest import assert_one_line_error, run_cli

    plan, _ = sized(tmp_path, "--framework", "hf", "--zero", "0")
    record = tmp_path / "r.jsonl"
    record.write_text("")
    proc = run_cli(
        "validate", "--plan", str(plan), "--storage", str(hand_read_profile), "--record", str(record), "--restore"
    )
    assert_one_line_error(proc, "not both")


def test_local_readers_and_judgement():
    from ckplan.frameworks.layout import Readers
    from ckplan.profile import Spread
    from ckplan.sizing.restore import local_readers
    from ckplan.validate.model import judge

    # ranks 3, 7, 11, 15 read; node 1 holds ranks 4…7 and node 2 ranks 8…11, numbered from 0 on each
    every_fourth = Readers(3, 4, 4)
    assert local_readers(every_fourth, 4, 8) == Readers(3, 4, 1)
    assert local_readers(every_fourth, 0, 16) == every_fourth
    assert local_readers(every_fourth, 0, 3) is None
    assert local_readers(Readers(0, 1, 16), 8, 16) == Readers(0, 1, 8)
    assert local_readers(Readers(5, 1, 1), 4, 8) == Readers(1, 1, 1)
    quiet, noisy = Spread.of([1.0, 1.1, 1.2]), Spread.of([1.0, 1.2, 1.4])
    assert judge(1.3, quiet) == ("error", True)  # +18% of 1.1, outside min…max: within ±20%
    assert judge(1.33, quiet) == ("error", False)  # +21%
    assert judge(1.39, noisy) == ("range", True)  # spread 33%: inside min…max is enough
    assert judge(1.41, noisy) == ("range", False)
