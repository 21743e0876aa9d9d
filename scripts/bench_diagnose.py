#!/usr/bin/env python3
"""Throughput and memory of `ckplan diagnose` on a generated 1 GB training log, beside `grep -c`.

The log is torchtitan-style: training-step lines with a save line every 2,000
lines whose duration grows slowly (so the verdict is 'growing'). The page cache
is warmed first, so that what is timed is the parser, not the disk. Then, in
alternating order, `ckplan diagnose LOG --json` and `grep -c -F 'Finished saving
the checkpoint' LOG` run --runs times each; both are whole processes timed from
start to exit (ckplan's time includes Python's start-up and its imports).
Reports MB/s (median, min … max), ckplan's median over grep's, and ckplan's
peak RSS (of its own process, from wait4), beside its peak RSS on a tenth of
the log: memory must stay bounded (tens of MB), not grow with the log.

Usage: scripts/bench_diagnose.py [--gb 1.0] [--runs 5] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP = (
    "[rank0]:2025-01-01 {h:02d}:{m:02d}:{s:02d},000 - root - INFO - step: {i}  loss:  2.3456  "
    "memory: 87.04GiB(93.48%)  tps: 52,142  mfu: 43.09%  lr: 1.0000e-04  grad_norm: 0.9876\n"
)
SAVE = "[rank0]:2025-01-01 {h:02d}:{m:02d}:{s:02d},000 - root - INFO - Finished saving the checkpoint in {d:.2f} seconds.\n"
GREP = ["grep", "-c", "-F", "Finished saving the checkpoint"]


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


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """(seconds from start to exit, the process's own peak RSS in bytes, its stdout)."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        if proc.returncode not in (0, 1):  # grep -c exits 1 when it counts 0
            err.seek(0)
            sys.exit(f"{cmd[0]} exited {proc.returncode}: {err.read().decode(errors='replace')}")
    return elapsed, usage.ru_maxrss * 1024, out.decode()


def spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} MB/s ({min(rates):,.0f} … {max(rates):,.0f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    ckplan = [sys.executable, "-m", "ckplan", "diagnose"]
    where = subprocess.run(
        [sys.executable, "-c", "import ckplan; print(ckplan.__file__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        log, tenth = Path(tmp) / "train.log", Path(tmp) / "tenth.log"
        saves = generate(log, int(args.gb * 1e9))
        size = log.stat().st_size
        # Copied in small pieces: a child's peak RSS (wait4) counts this process's RSS when it forked.
        with open(log, "rb") as src, open(tenth, "wb") as dst:
            for _ in range(size // 10 // 2**20):
                dst.write(src.read(2**20))
        subprocess.run(["cat", str(log), str(tenth)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        rates: dict[str, list[float]] = {"ckplan": [], "grep": []}
        peaks: list[int] = []
        for run in range(args.runs):
            for name in ("ckplan", "grep") if run % 2 == 0 else ("grep", "ckplan"):
                if name == "ckplan":
                    elapsed, peak, out = timed([*ckplan, str(log), "--json"])
                    d = json.loads(out)
                    assert d["saves"] == saves and d["bytes_read"] == size, (d["saves"], saves, d["bytes_read"], size)
                    peaks.append(peak)
                else:
                    elapsed, _, out = timed([*GREP, str(log)])
                    assert int(out) == saves, (out, saves)
                rates[name].append(size / elapsed / 1e6)
        _, tenth_peak, _ = timed([*ckplan, str(tenth), "--json"])
    ratio = statistics.median(rates["ckplan"]) / statistics.median(rates["grep"])
    print(
        f"log: {size / 1e9:.2f} GB, {saves:,} saves, page cache warm; {args.runs} alternating runs each; ckplan from {where}"
    )
    print(
        f"ckplan diagnose LOG --json: {spread(rates['ckplan'])}, peak RSS {max(peaks) / 2**20:.0f} MiB "
        f"(on a tenth of the log: {tenth_peak / 2**20:.0f} MiB)"
    )
    print(f"{' '.join(GREP)} LOG: {spread(rates['grep'])}")
    print(f"ckplan / grep (medians): {ratio:.2f}; verdict {d['verdict']}")


if __name__ == "__main__":
    main()
