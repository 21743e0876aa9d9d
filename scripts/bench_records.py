#!/usr/bin/env python3
"""Memory and time of `ckplan diagnose` on generated save-record files of 100,000 and 1,000,000 lines.

Each file is a job of --ranks ranks saving into one shared directory at steps 1, 2, … (one line per rank per
step, as ckplan.record writes them). `ckplan diagnose FILE --json` runs as a whole process, timed from start to
exit; its peak RSS is its own (wait4). The page cache is warmed first. Checked in every run: the lines and steps
it counts, and (the file given twice) that every line of the second copy is dropped as a duplicate.

Beside it, the peak RSS of holding the same lines as SaveRecord objects in a list (what diagnose did before it
streamed): memory that grows with the lines.

Usage: scripts/bench_records.py [--lines 100000,1000000] [--ranks 1000] [--runs 3] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_diagnose import timed

LINE = (
    '{{"format":"ckplan.save-record","version":1,"framework":"dcp","step":{step},"rank":{rank},'
    '"world_size":{world},"host":"node{node:04d}","run":"job-4242","mode":"sync","start":{start:.6f},'
    '"end":{end:.6f},"seconds":{seconds:.6f},"blocking_seconds":{seconds:.6f},"persist_seconds":null,'
    '"path":"/mnt/ckpt/step-{step:07d}","counted":"directory","bytes":{nbytes},"files":{files}}}\n'
)
HELD = (
    "import sys\nfrom ckplan.record import SaveRecord\n"
    "with open(sys.argv[1], 'rb') as f:\n    held = [SaveRecord.model_validate_json(line) for line in f]\n"
    "print(len(held))\n"
)


def generate(path: Path, lines: int, ranks: int) -> int:
    """The record file; the number of steps."""
    steps = lines // ranks
    with open(path, "w", buffering=16 * 2**20) as f:
        for step in range(1, steps + 1):
            t0 = 1.8e9 + step * 600
            f.write(
                "".join(
                    LINE.format(
                        step=step, rank=rank, world=ranks, node=rank // 8, start=t0, end=t0 + 20 + rank % 7,
                        seconds=20 + rank % 7, nbytes=(rank + 1) * 10**6, files=rank + 1,
                    )
                    for rank in range(ranks)
                )
            )  # fmt: skip
    return steps


def spread(values: list[float], unit: str, scale: float = 1.0) -> str:
    return f"{statistics.median(values) / scale:,.2f} {unit} ({min(values) / scale:,.2f} … {max(values) / scale:,.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", default="100000,1000000")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    diagnose = [sys.executable, "-m", "ckplan", "diagnose"]
    print(f"{args.ranks} ranks per step, one shared directory; {args.runs} runs each; page cache warm")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for lines in (int(n) for n in args.lines.split(",")):
            path = Path(tmp) / f"saves-{lines}.jsonl"
            steps = generate(path, lines, args.ranks)
            subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
            seconds, peaks = [], []
            for _ in range(args.runs):
                elapsed, peak, out = timed([*diagnose, str(path), "--json"])
                d = json.loads(out)
                assert (d["lines"], len(d["steps"])) == (lines, steps), (d["lines"], len(d["steps"]))
                assert d["steps"][0]["bytes"] == args.ranks * 10**6, d["steps"][0]["bytes"]
                seconds.append(elapsed)
                peaks.append(peak)
            _, twice_peak, out = timed([*diagnose, str(path), str(path), "--json"])
            twice = json.loads(out)
            assert twice["lines"] == lines and any(n.startswith(f"{lines:,} duplicate") for n in twice["notes"])
            _, held_peak, out = timed([sys.executable, "-c", HELD, str(path)])
            assert int(out) == lines
            size = path.stat().st_size
            print(
                f"{lines:,} lines ({size / 1e6:,.0f} MB, {steps:,} steps): diagnose --json "
                f"{spread(seconds, 's')}, {lines / statistics.median(seconds):,.0f} lines/s; peak RSS "
                f"{spread(peaks, 'MiB', 2**20)}; the file given twice: peak RSS {twice_peak / 2**20:,.0f} MiB, "
                f"{lines:,} duplicates dropped; the lines held as SaveRecords: peak RSS {held_peak / 2**20:,.0f} MiB"
            )
            path.unlink()


if __name__ == "__main__":
    main()
