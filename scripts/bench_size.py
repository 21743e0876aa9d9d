#!/usr/bin/env python3
"""Benchmark `ckplan size`: CLI start-up and the cost of a full 1,024-GPU manifest.

Targets: `ckplan size --params 7e9 --optimizer adam` at most 1.6× the time of
`python -c "import typer, rich, pydantic"` (issue 17), measured as a ratio in alternating runs on
this noisy VM (each pair: the baseline, then ckplan, then the order swapped), median and min…max of
the per-pair ratios; and sizing a 1T-parameter model on 1,024 GPUs with its full manifest under 1 s
(issue 2). Prints one line per figure; exits 1 if a target is missed.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time

RUNS = 15
LARGE = (
    "import time, resource; t = time.perf_counter(); "
    "from ckplan import catalog; from ckplan.sizing.plan import build_plan, nearest_shape; "
    "p = build_plan(arch=nearest_shape(1e12, catalog.models()), parameters=10**12, gpus=1024, tp=8, pp=8, zero=1); "
    "d = p.model_dump_json(); e = time.perf_counter() - t; "
    "print(e, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, p.file_count, len(d))"
)


def main() -> int:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or shutil.which("ckplan")
    cmd = [exe, "size", "--params", "7e9", "--optimizer", "adam"]
    base = [sys.executable, "-c", "import typer, rich, pydantic"]
    env = {**os.environ, "NO_COLOR": "1"}

    def timed(argv: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        return time.perf_counter() - t

    timed(cmd), timed(base)  # warm the page cache and .pyc files
    ours, theirs, ratios = [], [], []
    for i in range(RUNS):
        first, second = (base, cmd) if i % 2 == 0 else (cmd, base)
        a, b = timed(first), timed(second)
        t_base, t_cmd = (a, b) if first is base else (b, a)
        ours.append(t_cmd)
        theirs.append(t_base)
        ratios.append(t_cmd / t_base)
    median = statistics.median(ratios)
    print(
        f"ckplan size --params 7e9 --optimizer adam: {statistics.median(ours):.3f} s median "
        f"({min(ours):.3f}…{max(ours):.3f}); python -c 'import typer, rich, pydantic': {statistics.median(theirs):.3f} s "
        f"({min(theirs):.3f}…{max(theirs):.3f}); ratio {median:.2f}× median ({min(ratios):.2f}…{max(ratios):.2f}) "
        f"over {RUNS} alternating pairs; target ≤ 1.60×"
    )
    elapsed, peak, files, size = subprocess.run(
        [sys.executable, "-c", LARGE], capture_output=True, text=True, check=True
    ).stdout.split()
    print(
        f"1T params, 1,024 GPUs (tp 8, pp 8, ZeRO-1), full manifest of {int(files):,} files: "
        f"{float(elapsed):.3f} s to plan and serialise ({int(size) / 1e6:.1f} MB JSON), "
        f"process peak RSS {int(peak) / 2**20:.0f} MiB; target < 1 s"
    )
    return 0 if median <= 1.6 and float(elapsed) < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
