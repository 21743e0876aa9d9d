"""Every mitigation in planning/mitigations.py, alone and combined, on a hand-built plan, target and PlanningData
(tests/handmade.py).

The plan: two nodes, one writer each; each writer writes a 10 GB torch.save file and 99 empty raw files
(100 files per node). Serialiser 10 GB/s (given): 1 s per writer. The target: shared, 1 GB/s per node, 2 GB/s
measured on two hosts at once, 100 files/s per node, fsync p99 0. So, by hand:
  sync save = max(1 + 10 GB ÷ 1 GB/s, 1 + 10, 20 GB ÷ 2 GB/s) + 100 files ÷ 100 = 11 + 1 = 12 s.
"""

from __future__ import annotations

import math

import pytest

from ckplan.planning.mitigations import build, what_ifs
from tests.handmade import CODEC, DATA, FAST, NVME, PLAN, POLICY, SLOW, TARGET, TMPFS

GB = 10**9


def run(**kw):
    return build(PLAN, TARGET, POLICY, DATA, name="x", **kw)


def test_as_planned():
    s = run()
    assert (s.mode, s.save_seconds, s.stall_seconds) == ("sync", pytest.approx(12.0), pytest.approx(12.0))


def test_async():
    # stall: the busiest GPU's 10 GB ÷ 20 GB/s snapshot = 0.5 s; persist unchanged, 12 s
    s = run(how="async")
    assert (s.mode, s.stall_seconds, s.save_seconds) == ("async", pytest.approx(0.5), pytest.approx(12.0))


def test_tmpfs_staging():
    # local write on tmpfs (10 GB/s, 1,000 files/s): max(1 + 1, 1 + 1, 20 GB ÷ 20 GB/s) + 100 ÷ 1,000 = 2.1 s, blocking;
    # drain to the target, files copied (no serialiser): max(10, 10, 10) + 1 = 11 s; persist 2.1 + 11 = 13.1 s
    s = run(how="tmpfs")
    assert (s.mode, s.stall_seconds, s.save_seconds) == ("staged", pytest.approx(2.1), pytest.approx(13.1))
    # tmpfs holds half the host's memory: 10 GB per node does not fit in half of 16 GB
    small = build(PLAN, TARGET, POLICY.model_copy(update={"host_memory_bytes": 16e9}), DATA, how="tmpfs", name="x")
    assert math.isinf(small.stall_seconds) and "does not fit on tmpfs" in small.notes[0]


def test_local_nvme_staging():
    # local write at 5 GB/s, 500 files/s: 1 + 2 + 0.2 = 3.2 s; persist 3.2 + 11 = 14.2 s
    s = run(how="local-nvme")
    assert (s.stall_seconds, s.save_seconds) == (pytest.approx(3.2), pytest.approx(14.2))
    small = build(PLAN, TARGET, POLICY.model_copy(update={"local_disk_bytes": 5e9}), DATA, how="local-nvme", name="x")
    assert math.isinf(small.save_seconds)


def test_compression():
    # 2× smaller: 10 GB in all, 5 GB per node; each writer's bytes and serialisation halve (5 GB, 0.5 s):
    # max(0.5 + 5, 0.5 + 5, 10 GB ÷ 2 GB/s) + 1 s files = 6.5 s; the codec: 10 GB ÷ 10 GB/s = 1 s, beside it
    s = run(compress=True)
    assert (s.save_seconds, s.stall_seconds) == (pytest.approx(6.5), pytest.approx(6.5))
    assert "zstd-1 at 2.00×" in s.notes[0]
    # a codec slower than the write decides the save: 10 GB ÷ 1 GB/s = 10 s per writer
    slow = DATA.model_copy(update={"codec": CODEC.model_copy(update={"bytes_per_s_per_core": 1e9})})
    s = build(PLAN, TARGET, POLICY, slow, compress=True, name="x")
    assert s.save_seconds == pytest.approx(10.0) and any("slower than the write" in n for n in s.notes)
    # async: the codec stretches the persist, not the snapshot
    a = build(PLAN, TARGET, POLICY, slow, how="async", compress=True, name="x")
    assert (a.stall_seconds, a.save_seconds) == (pytest.approx(0.5), pytest.approx(10.0))


def test_merge():
    # one file per writer: 1 file ÷ 100 files/s = 0.01 s instead of 1 s → 11.01 s
    s = run(merge=True)
    assert s.save_seconds == pytest.approx(11.01) and "one file per writer" in s.notes


def test_incremental():
    # the changed 25%: 5 GB in all, 2.5 GB per writer (0.25 s serialise): max(2.75, 2.75, 2.5) + 1 = 3.75 s
    s = run(incremental=True)
    assert s.save_seconds == pytest.approx(3.75) and "writes the changed 25% only" in s.notes
    # on top of compression: 25% of the halved bytes, 1.25 GB per writer: 0.125 + 1.25 + 1 = 2.375 s
    both = run(incremental=True, compress=True)
    assert both.save_seconds == pytest.approx(2.375)


def test_faster_storage():
    # the given class: 4 GB/s per node, 1,000 files/s: max(1 + 2.5, 1 + 2.5, 20 GB ÷ 8 GB/s) + 0.1 = 3.6 s
    s = run(storage=FAST)
    assert s.save_seconds == pytest.approx(3.6)


def test_what_ifs_each_mitigation_then_the_best_combination():
    rows = {w.mitigation: w for w in what_ifs(PLAN, TARGET, POLICY, 3600, DATA)}
    assert list(rows) == [
        "async save",
        "/dev/shm staging, drain to target",
        "local NVMe staging, drain to target",
        "compression",
        "merge shards (one file per writer)",
        "incremental (25% changed)",
        "faster storage: fast",
        "best combination: async save + compression + merged shards",
    ]
    expected = {
        "async save": (12.0, 0.5),
        "/dev/shm staging, drain to target": (13.1, 2.1),
        "local NVMe staging, drain to target": (14.2, 3.2),
        "compression": (6.5, 6.5),
        "merge shards (one file per writer)": (11.01, 11.01),
        "incremental (25% changed)": (3.75, 3.75),
        # the fastest shared class that beats the target ("slow", 0.5 GB/s, does not)
        "faster storage: fast": (3.6, 3.6),
        # every async variant stalls 0.5 s, so the same τ; the one with the shortest persist wastes least
        # (R′ = R + persist − stall): compressed and merged, 0.5 + 5 + 0.01 = 5.51 s. Staging stalls ≥ 2.1 s.
        "best combination: async save + compression + merged shards": (5.51, 0.5),
    }
    for name, (save, stall) in expected.items():
        assert (rows[name].save_seconds, rows[name].stall_seconds) == (pytest.approx(save), pytest.approx(stall)), name
    best = rows["best combination: async save + compression + merged shards"]
    assert best.expected_waste_fraction == min(w.expected_waste_fraction for w in rows.values())


def test_no_faster_class_no_row():
    data = DATA.model_copy(update={"storage_classes": {"tmpfs": TMPFS, "local-nvme": NVME, "slow": SLOW}})
    assert not any(w.mitigation.startswith("faster storage") for w in what_ifs(PLAN, TARGET, POLICY, 3600, data))


def test_what_ifs_use_the_model_even_when_the_save_time_was_given():
    given = POLICY.model_copy(update={"save_time_s": 300.0})
    rows = {w.mitigation: w for w in what_ifs(PLAN, TARGET, given, 3600, DATA)}
    assert rows["merge shards (one file per writer)"].save_seconds == pytest.approx(11.01)
