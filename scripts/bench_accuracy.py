#!/usr/bin/env python3
"""Accuracy of the save-time model against real PyTorch saves on this machine.

For each target (the disk and /dev/shm): a fresh `ckplan probe` (default preset),
then `ckplan validate` of three layouts, each one node with 2 writer processes:
  - few large files: DCP, one .distcp per rank (dcp, ZeRO-3);
  - many files: DeepSpeed ZeRO-1 with pipeline parallelism (per-layer files);
  - HF Trainer: safetensors shards plus per-process RNG files.
Target: |error| ≤ 15% on every row. Prints a Markdown table.

Usage: scripts/bench_accuracy.py [--targets /var/tmp /dev/shm] [--gb 1.5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LAYOUTS = {
    "few large files (DCP, 1 file/rank)": ["--framework", "dcp", "--zero", "3"],
    "many files (DeepSpeed ZeRO-1, pp 2)": ["--framework", "deepspeed", "--zero", "1", "--pp", "2"],
    "HF safetensors shards + RNG files": ["--framework", "hf", "--zero", "0", "--option", "hf_shard_size=500MB"],
}
PARAMS = 7e9


def ckplan(*args: str) -> str:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or "ckplan"
    return subprocess.run([exe, *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="+", default=["/var/tmp", "/dev/shm"])
    ap.add_argument("--gb", type=float, default=1.5, help="bytes per save after scaling")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ckplan-accuracy-"))
    print("| target | layout | files | bytes | predicted | measured (median, min…max) | error | diagnosis |")
    print("|---|---|---|---|---|---|---|---|")
    misses = 0
    for target in args.targets:
        profile = work / f"profile-{Path(target).name}.json"
        ckplan("probe", target, "--writers", "2", "--out", str(profile))
        for label, flags in LAYOUTS.items():
            plan = work / "plan.json"
            plan.write_text(ckplan("size", "--params", str(PARAMS), "--gpus", "2", "--gpus-per-node", "2", *flags, "--json"))
            total = json.loads(plan.read_text())["total_bytes"]
            scale = min(1.0, args.gb * 1e9 / total)
            v = json.loads(ckplan("validate", target, "--plan", str(plan), "--storage", str(profile),
                                  "--scale", f"{scale:.6f}", "--repeats", str(args.repeats), "--json"))
            m = v["measured"]
            ok = abs(v["error_percent"]) <= 15
            misses += not ok
            print(f"| {target} | {label} | {v['files']} | {v['bytes'] / 1e9:.2f} GB | {v['predicted_seconds']:.2f} s | "
                  f"{v['measured_seconds']:.2f} s ({m['min']:.2f}…{m['max']:.2f}) | {v['error_percent']:+.1f}% "
                  f"{'ok' if ok else 'MISSED'} | {v['diagnosis']} |")
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{misses} row(s) outside ±15%")


if __name__ == "__main__":
    main()
