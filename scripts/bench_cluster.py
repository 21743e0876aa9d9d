#!/usr/bin/env python3
"""Multi-host probe on this machine: 4 test hosts (network namespaces with real fio servers)
writing to one directory on the local disk at once. Prints the per-host figures, the
straggler, and the aggregate over 1, 2 and 4 hosts. Needs root (ip netns).

Usage: scripts/bench_cluster.py [--dir /var/tmp] [--writers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from _harness import fio_hosts  # beside this script


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--writers", type=int, default=2)
    args = ap.parse_args()
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or "ckplan"
    with fio_hosts(4) as servers, tempfile.TemporaryDirectory(dir=args.dir, prefix="ckplan-cluster-") as target:
        hosts = ",".join(addr for addr, _ in servers)
        p = json.loads(
            subprocess.run(
                [exe, "probe", target, "--hosts", hosts, "--writers", str(args.writers), "--json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    print(f"4 hosts ({hosts}), {args.writers} writers each, default preset, {p['measurement']['duration_s']:.0f} s\n")
    print(
        "Slowest host's bandwidth with all 4 hosts writing:\n\n| writers per host | median | min … max |\n|---|---|---|"
    )
    for b in p["buffered_bandwidth"]:
        print(
            f"| {b['writers']} | {b['bytes_per_s'] / 1e6:.0f} MB/s | "
            f"{b['spread']['min'] / 1e6:.0f} … {b['spread']['max'] / 1e6:.0f} |"
        )
    print(f"\n{p['notes'][0]}\n")
    print("Scaling over hosts:\n\n| hosts | all clients | per host |\n|---|---|---|")
    for a in p["aggregate_bandwidth"]:
        print(f"| {a['hosts']} | {a['bytes_per_s'] / 1e6:.0f} MB/s | {a['bytes_per_s'] / a['hosts'] / 1e6:.0f} MB/s |")
    s = p["small_files"]
    print(
        f"\nSmall files, slowest host: {s['files_per_s']:.0f} files/s; all hosts {p['aggregate_files_per_s']:.0f} files/s; "
        f"fsync p99 (worst host) {p['fsync_latency']['p99_s'] * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
