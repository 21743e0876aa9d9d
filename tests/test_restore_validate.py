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
