#!/usr/bin/env python3
"""Benchmark `ckplan size`: CLI start-up and the cost of a full 1,024-GPU manifest.

Targets (issue 2): median wall time of `ckplan size --params 7e9 --optimizer adam`
under 0.3 s; sizing a 1T-parameter model on 1,024 GPUs with its full manifest
under 1 s. Prints one line per figure; exits 1 if a target is missed.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time

RUNS = 15
LARGE = "import time, resource; t = time.perf_counter(); "\
        "from ckplan import catalog; from ckplan.sizing.plan import build_plan, nearest_shape; "\
        "p = build_plan(arch=nearest_shape(1e12, catalog.models()), parameters=10**12, gpus=1024, tp=8, pp=8, zero=1); "\
        "d = p.model_dump_json(); e = time.perf_counter() - t; "\
        "print(e, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, p.file_count, len(d))"


def main() -> int:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or shutil.which("ckplan")
    cmd = [exe, "size", "--params", "7e9", "--optimizer", "adam"]
    env = {**os.environ, "NO_COLOR": "1"}
    subprocess.run(cmd, capture_output=True, check=True, env=env)  # warm the page cache and .pyc files
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, env=env)
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    print(f"ckplan size --params 7e9 --optimizer adam: median {median:.3f} s over {RUNS} runs "
          f"(min {min(times):.3f} s, max {max(times):.3f} s); target < 0.300 s")
    elapsed, peak, files, size = subprocess.run([sys.executable, "-c", LARGE], capture_output=True, text=True, check=True).stdout.split()
    print(f"1T params, 1,024 GPUs (tp 8, pp 8, ZeRO-1), full manifest of {int(files):,} files: "
          f"{float(elapsed):.3f} s to plan and serialise ({int(size) / 1e6:.1f} MB JSON), "
          f"process peak RSS {int(peak) / 2**20:.0f} MiB; target < 1 s")
    return 0 if median < 0.3 and float(elapsed) < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
