"""The deserialiser calibration: real loads of a few MB from memory, against timings taken here independently."""

from __future__ import annotations

import io
import math
import mmap
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

MiB = 2**20
SAMPLE, TENSOR = 16 * MiB, 2 * MiB


def _median_rate(nbytes: int, run, repeats: int = 5) -> float:
    run()  # warm-up, as the calibration has
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return nbytes / sorted(times)[repeats // 2]


def test_deserialisers_measured_from_memory_near_independent_timings(tmp_path):
    from ckplan.savers.calibrate import measure_codecs

    nbytes, saves, loads = measure_codecs(SAMPLE, 5, tmp_path, tensor_bytes=TENSOR)
    assert nbytes == SAMPLE
    assert set(loads) == set(saves) == {"torch.save", "safetensors", "dcp"}
    for fmt, s in loads.items():
        assert s.repeats == 5 and math.isfinite(s.median) and 0 < s.min <= s.median <= s.max, fmt
    # the load sample stays in the scratch directory until the calibration's ScratchDir removes it
    assert [p.name for p in tmp_path.iterdir()] == ["load.safetensors"]

    # independent timings in this process, one thread, of the same physical work by other means
    torch.set_num_threads(1)
    tensors = [torch.randn(TENSOR // 4) for _ in range(SAMPLE // TENSOR)]
    stream = io.BytesIO()
    torch.save({f"t{i}": t for i, t in enumerate(tensors)}, stream)
    whole = stream.getvalue()
    torch_load = _median_rate(SAMPLE, lambda: torch.load(io.BytesIO(whole), weights_only=True))
    # DCP's reader: per tensor, torch.load of its bytes, then a copy into the state dict's tensor
    items = []
    for t in tensors:
        stream = io.BytesIO()
        torch.save(t, stream)
        items.append(stream.getvalue())
    targets = [torch.empty_like(t) for t in tensors]

    def dcp_items() -> None:
        for item, target in zip(items, targets, strict=True):
            target.copy_(torch.load(io.BytesIO(item), weights_only=True))

    dcp = _median_rate(SAMPLE, dcp_items)
    # safetensors' load_file maps the file: its cost is mapping pages in, so map the same file with Python's mmap and
    # read one byte per page
    path = tmp_path / "load.safetensors"

    def mapped() -> None:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m:
            sum(m[i] for i in range(0, len(m), 4096))

    touched = _median_rate(path.stat().st_size, mapped)
    # a noisy 2-core VM shared with other tests: each within 3× of its independent figure, and up to 7× below it,
    # as this VM serves fresh memory 3-7× slower: the calibration's process faults in new pages for each load's
    # tensors, where these repeats in one process get the allocator's freed ones back (5.8 GB/s against 1.7 GB/s
    # for torch.load once, in a CI run under load)
    for fmt, independent in (("torch.save", torch_load), ("dcp", dcp), ("safetensors", touched)):
        assert independent / 7 < loads[fmt].median < independent * 3, (fmt, loads[fmt].median, independent)
    # a load from memory copies (torch.load) or maps (safetensors): slower than nothing, faster than 100 GB/s for a
    # copy; the map has no copy at all, so it beats torch.load's copy
    assert 1e8 < loads["torch.save"].median < 1e11 and 1e8 < loads["dcp"].median < 1e11
    assert loads["safetensors"].median > loads["torch.save"].median


def test_calibration_keeps_the_deserialisers_with_their_spread(tmp_path):
    from ckplan.profile import Calibration
    from ckplan.savers.calibrate import calibrate

    c = calibrate("quick", 1)
    assert set(c.deserialize_bytes_per_s) == {"torch.save", "safetensors", "dcp"}
    for fmt, rate in c.deserialize_bytes_per_s.items():
        s = c.deserialize_spread[fmt]
        assert s.repeats == 3 and s.min <= rate <= s.max and rate == s.median
    assert Calibration.model_validate_json(c.model_dump_json()) == c
