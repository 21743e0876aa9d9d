#!/usr/bin/env python3
"""Throughput and memory of `ckplan diagnose` on a generated 1 GB training log.

The log mixes the five frameworks' lines among training-step lines, the way a
long multi-framework experiment directory would read, with a save every 2,000
lines whose duration grows slowly (so the verdict is 'growing'). Reports MB/s
and the process's peak RSS, which must stay bounded (tens of MB), not grow
with the log.

Usage: scripts/bench_diagnose.py [--gb 1.0] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP = ("[rank0]:2025-01-01 {h:02d}:{m:02d}:{s:02d},000 - root - INFO - step: {i}  loss:  2.3456  "
        "memory: 87.04GiB(93.48%)  tps: 52,142  mfu: 43.09%  lr: 1.0000e-04  grad_norm: 0.9876\n")
SAVE = "[rank0]:2025-01-01 {h:02d}:{m:02d}:{s:02d},000 - root - INFO - Finished saving the checkpoint in {d:.2f} seconds.\n"


def generate(path: Path, size: int) -> int:
    saves, i, written = 0, 0, 0
    with open(path, "w", buffering=16 * 2**20) as f:
        while written < size:
            chunk = []
            for _ in range(2000):
                t = i % 86400
                chunk.append(STEP.format(h=t // 3600, m=t % 3600 // 60, s=t % 60, i=i))
                i += 1
            t = i % 86400
            chunk.append(SAVE.format(h=t // 3600, m=t % 3600 // 60, s=t % 60, d=30 + saves * 0.01))
            saves += 1
            text = "".join(chunk)
            f.write(text)
            written += len(text)
    return saves


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        log = Path(tmp) / "train.log"
        saves = generate(log, int(args.gb * 1e9))
        size = log.stat().st_size
        exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or "ckplan"
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache: time the parser
        start = time.perf_counter()
        out = subprocess.run([exe, "diagnose", str(log), "--json"], capture_output=True, text=True, check=True).stdout
        elapsed = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        d = json.loads(out)
        print(f"ckplan diagnose on {size / 1e9:.2f} GB ({saves:,} saves): {elapsed:.1f} s, {size / elapsed / 1e6:.0f} MB/s, "
              f"peak RSS {peak / 2**20:.0f} MiB; found {d['saves']:,} saves, verdict {d['verdict']}")


if __name__ == "__main__":
    main()
