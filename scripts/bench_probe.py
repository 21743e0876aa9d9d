#!/usr/bin/env python3
"""Benchmark the filesystem probe on this machine's disk and /dev/shm.

1. Writer parity: ckplan's replay writer against fio on the same target and
   pattern (W writers, one file each, buffered writes, fsync at the end), in
   back-to-back pairs whose order alternates, so that drift of the target
   between runs hits both alike. Target: the median of the pairs' ratios is at
   least 0.90.
2. Preset durations: wall time of `ckplan probe --quick`, default and --thorough.
3. Repeatability: three default probes of the same target; best bandwidth and
   small-file rate should agree within 10%. Beside it, the widest range of the
   repeats inside one probe: the target's own run-to-run noise.

Usage: scripts/bench_probe.py [--targets /var/tmp /dev/shm] [--skip-thorough]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ckplan.probe import fio
from ckplan.profile import Spread
from ckplan.savers.raw import FileToWrite, write_files

WRITERS = 2
FILE_BYTES = 1024 * 2**20
PAIRS = 9
PROBES = 3


def fio_bandwidth(directory: Path) -> float:
    job = fio.FioJob(
        "parity",
        {
            "directory": fio.escape_path(directory),
            "rw": "write",
            "bs": "4M",
            "size": FILE_BYTES,
            "numjobs": WRITERS,
            "ioengine": "psync",
            "end_fsync": 1,
            "group_reporting": 1,
            "unlink": 1,
            "fallocate": "none",
        },
    )  # like a real save: no preallocation (see docs/benchmarks.md)
    doc = fio.run_fio([job], directory, "the parity benchmark")
    return float(doc["jobs"][0]["write"]["bw_bytes"])


def writer_bandwidth(directory: Path) -> float:
    root = directory / "replay"
    files = [FileToWrite(f"f{w}", FILE_BYTES, w, "weights") for w in range(WRITERS)]
    seconds = write_files(root, files)
    shutil.rmtree(root)
    return WRITERS * FILE_BYTES / seconds


def parity(target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target, prefix="ckplan-bench-") as d:
        directory = Path(d)
        fio_bw, ours = [], []
        for i in range(PAIRS):
            if i % 2:
                ours.append(writer_bandwidth(directory))
                fio_bw.append(fio_bandwidth(directory))
            else:
                fio_bw.append(fio_bandwidth(directory))
                ours.append(writer_bandwidth(directory))
    ratios = [o / f for o, f in zip(ours, fio_bw, strict=False)]
    r = statistics.median(ratios)
    print(
        f"| {target} | {WRITERS} × {FILE_BYTES // 2**20} MiB, buffered + fsync, {PAIRS} pairs "
        f"| fio {statistics.median(fio_bw) / 1e9:.2f} GB/s ({min(fio_bw) / 1e9:.2f}…{max(fio_bw) / 1e9:.2f}) "
        f"| ckplan writer {statistics.median(ours) / 1e9:.2f} GB/s ({min(ours) / 1e9:.2f}…{max(ours) / 1e9:.2f}) "
        f"| {r:.2f} ({min(ratios):.2f}…{max(ratios):.2f}) | {'ok' if r >= 0.9 else 'MISSED'} |"
    )


def ckplan(*args: str) -> tuple[float, dict]:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or "ckplan"
    start = time.perf_counter()
    out = subprocess.run([exe, *args, "--json"], capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, json.loads(out)


def presets(target: Path, skip_thorough: bool) -> None:
    for flag in ["--quick", None] + ([] if skip_thorough else ["--thorough"]):
        wall, _ = ckplan("probe", str(target), *([flag] if flag else []))
        print(f"| {target} | {flag or 'default'} | {wall:.1f} s |")


def repeatability(target: Path) -> None:
    best, files, inside_bw, inside_files = [], [], [], []
    for _ in range(PROBES):
        _, p = ckplan("probe", str(target))
        top = max(p["buffered_bandwidth"], key=lambda b: b["bytes_per_s"])
        best.append(p["best_write_bytes_per_s"])
        files.append(p["small_files"]["files_per_s"])
        inside_bw.append(Spread(**top["spread"]).relative_range)
        inside_files.append(Spread(**p["small_files"]["spread"]).relative_range)
    for label, values, inside, unit, div in (
        ("best write bandwidth", best, inside_bw, "GB/s", 1e9),
        ("small files", files, inside_files, "files/s", 1),
    ):
        med = statistics.median(values)
        spread = (max(values) - min(values)) / med
        print(
            f"| {target} | {label} | {med / div:,.2f} {unit} | {min(values) / div:,.2f} … {max(values) / div:,.2f} | "
            f"{spread * 100:.1f}% | {max(inside) * 100:.0f}% | {'ok' if spread <= 0.10 else 'MISSED'} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="+", default=["/var/tmp", "/dev/shm"])
    ap.add_argument("--skip-thorough", action="store_true")
    args = ap.parse_args()
    targets = [Path(t) for t in args.targets]
    print(
        "Writer parity (target: median ratio ≥ 0.90)\n\n"
        "| target | pattern | fio | ckplan writer | writer ÷ fio, median of pairs (min…max) | |\n|---|---|---|---|---|---|"
    )
    for t in targets:
        parity(t)
    print("\nPreset durations\n\n| target | preset | wall time |\n|---|---|---|")
    for t in targets:
        presets(t, args.skip_thorough)
    print(
        f"\nRepeatability of {PROBES} default probes (target: range ≤ 10% of median)\n\n"
        "| target | figure | median | min … max | range | widest range of repeats inside one probe | |\n"
        "|---|---|---|---|---|---|---|"
    )
    for t in targets:
        repeatability(t)


if __name__ == "__main__":
    main()
