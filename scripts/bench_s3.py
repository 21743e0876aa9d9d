#!/usr/bin/env python3
"""Benchmark the S3 probe against a local S3 endpoint (moto's server on 127.0.0.1).

1. `ckplan probe s3://…` (default preset): throughput at each concurrency, small-object
   PUT rate and latency percentiles.
2. Client comparison on the same 512 MiB of data: the probe's own multipart streams
   (4 streams of 128 MiB, 8 MiB parts), boto3 upload_file with the default TransferConfig,
   boto3 with a tuned TransferConfig (16 MiB parts, 16 threads), and `aws s3 cp` with its
   defaults. Target: the probe's streams at least match `aws s3 cp`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # ckplan from this checkout
from _harness import credentials_env, moto_server, s3_client  # noqa: E402  (beside this script)

BUCKET = "bench"
TOTAL = 512 * 2**20
REPEATS = 3


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return TOTAL / (time.perf_counter() - start)


def main() -> None:
    os.environ.update(credentials_env())
    bindir = Path(sys.executable).parent
    with moto_server() as url, tempfile.TemporaryDirectory() as tmp:
        s3 = s3_client(url)
        s3.create_bucket(Bucket=BUCKET)
        out = subprocess.run(
            [
                str(bindir / "ckplan"),
                "probe",
                f"s3://{BUCKET}/probe",
                "--endpoint-url",
                url,
                "--writers",
                "4",
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        p = json.loads(out.stdout)
        print("Probe, default preset, 4 writers\n\n| streams | median | min … max |\n|---|---|---|")
        for b in p["buffered_bandwidth"]:
            sp = b["spread"]
            print(
                f"| {b['writers']} | {b['bytes_per_s'] / 1e6:.0f} MB/s | {sp['min'] / 1e6:.0f} … {sp['max'] / 1e6:.0f} MB/s |"
            )
        lat, small = p["fsync_latency"], p["small_files"]
        print(
            f"\nSmall objects ({small['file_bytes_min'] // 1024}–{small['file_bytes_max'] // 1024} KiB, 4 writers): "
            f"{small['files_per_s']:.0f} PUT/s; latency p50 {lat['p50_s'] * 1e3:.1f} ms, p99 {lat['p99_s'] * 1e3:.1f} ms, "
            f"p99.9 {lat['p999_s'] * 1e3:.1f} ms ({lat['samples']} requests)\n"
        )

        data = Path(tmp) / "blob"
        data.write_bytes(os.urandom(TOTAL))
        import boto3.s3.transfer as t

        from ckplan.probe.backends.s3 import Scratch, Writer, client, parse_url, remove_prefix

        loc = parse_url(f"s3://{BUCKET}/cmp", url)
        probe_client = client(loc, 30, 16)

        def probe_streams() -> None:
            with Scratch(probe_client, loc) as scratch:
                w = Writer(probe_client, scratch, 8 * 2**20, threading.Event(), lambda n: None)
                threads = [
                    threading.Thread(target=w.multipart, args=(f"{scratch.prefix}s{i}", TOTAL // 4)) for i in range(4)
                ]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()

        tuned = t.TransferConfig(multipart_chunksize=16 * 2**20, max_concurrency=16)
        aws = shutil.which("aws", path=str(bindir)) or "aws"
        clients = {
            "ckplan probe streams (4 × 128 MiB, 8 MiB parts)": probe_streams,
            "boto3 upload_file, default TransferConfig (8 MiB, 10 threads)": lambda: s3.upload_file(
                str(data), BUCKET, "cmp/default"
            ),
            "boto3 upload_file, tuned (16 MiB, 16 threads)": lambda: s3.upload_file(
                str(data), BUCKET, "cmp/tuned", Config=tuned
            ),
            "aws s3 cp, defaults": lambda: subprocess.run(
                [aws, "--endpoint-url", url, "s3", "cp", "--quiet", str(data), f"s3://{BUCKET}/cmp/awscli"], check=True
            ),
        }
        results = {name: [] for name in clients}
        names = list(clients)
        for r in range(REPEATS):  # alternating order: each client runs early in one round and late in the next
            for name in names if r % 2 == 0 else reversed(names):
                results[name].append(timed(clients[name]))
                remove_prefix(s3, BUCKET, "cmp/")
        base = results["aws s3 cp, defaults"]
        print(
            f"Same {TOTAL // 2**20} MiB, {REPEATS} rounds, the order reversed every other round; the ratio is taken "
            "within each round, then its median and range\n\n"
            "| client | median | min … max | vs aws s3 cp, median (min … max) |\n|---|---|---|---|"
        )
        for name, values in results.items():
            ratios = [v / b for v, b in zip(values, base, strict=True)]
            print(
                f"| {name} | {statistics.median(values) / 1e6:.0f} MB/s | {min(values) / 1e6:.0f} … "
                f"{max(values) / 1e6:.0f} | {statistics.median(ratios):.2f}× ({min(ratios):.2f} … {max(ratios):.2f}) |"
            )


if __name__ == "__main__":
    main()
