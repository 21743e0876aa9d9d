#!/usr/bin/env python3
"""At-scale accuracy: predicted against measured saves of 4-, 8- and 16-node plans on one shared target.

K fio agents in network namespaces (real fio servers, the test suite's fixture) share one directory, as nodes
share one NFS server or one Lustre OST pool. On each target (the disk and /dev/shm by default):

1. probes with 2 and with 4 hosts, each without a plan and with `--plan` of the 16-node plan (its replay covers
   2 or 4 of the 16 nodes, so the coverage rule decides); each profile's measured aggregate is printed under the
   table;
2. for each plan (DeepSpeed ZeRO-3, 2 GPUs per node, 4, 8 and 16 nodes, the same model so the same bytes),
   `recommend`'s predicted save from each profile, with serialisation switched off
   (`--serialize-bandwidth torch.save=1000GB/s`): 16 serialising processes on 2 cores would measure the CPU,
   not the storage;
3. the real concurrent save: one process per node, all started at once, each writing its node's files (one
   thread per rank, 4 MiB writes, fsync per file, rename, directory fsync: ckplan's replay writer), timed from
   the common start to the last node's end. One unrecorded warm-up save before each series (this VM returns
   freed memory to its host: the first writes after idle run slow), then --repeats measured saves.

Judged as issue 22 states: predictions from the 4-host probe (three host counts: the fit) within ±25% of the
measured median of the 8- and 16-node saves on the disk; from the 2-host probe within 0.67-1.5×; a row whose
measured saves spread over 30% is judged by the range rule alone (the prediction inside min…max).

Needs root (ip netns). Usage: scripts/bench_scale.py [--targets /var/tmp,/dev/shm] [--params 2.5e8]
[--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import fio_hosts  # beside this script

from ckplan.savers.raw import FileToWrite, write_files

NODE_COUNTS = (4, 8, 16)
GPUS_PER_NODE = 2
NO_SERIALISER = ["--serialize-bandwidth", "torch.save=1000GB/s"]


def ckplan(*args: str) -> dict:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or "ckplan"
    proc = subprocess.run([exe, *args, "--json"], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"ckplan {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def node_writer(root: str, files: list[tuple[str, int, int]], go, done) -> None:
    go.wait()
    write_files(Path(root), [FileToWrite(p, b, r, "optimizer") for p, b, r in files])
    done.put(time.monotonic())


def concurrent_save(target: Path, plan: dict) -> float:
    """Every node of the plan writes its files at once, one process each; seconds from the start to the last end."""
    ctx = mp.get_context("fork")
    go, done = ctx.Event(), ctx.Queue()
    by_node: dict[int, list[tuple[str, int, int]]] = {}
    for f in plan["manifest"]:
        by_node.setdefault(f["node"], []).append((f["path"], f["bytes"], f["rank"]))
    root = Path(tempfile.mkdtemp(dir=target, prefix="ckplan-bench-scale-"))
    try:
        procs = [
            ctx.Process(target=node_writer, args=(str(root / f"node{n}"), files, go, done))
            for n, files in by_node.items()
        ]
        for p in procs:
            p.start()
        time.sleep(0.5)  # every process started and waiting
        start = time.monotonic()
        go.set()
        for p in procs:
            p.join(timeout=600)
        if any(p.exitcode != 0 for p in procs):  # a crash, or still running at 600 s (exitcode None)
            for p in procs:
                p.kill()
            sys.exit("a node's writer failed")
        return max(done.get(timeout=5) for _ in procs) - start
    finally:
        shutil.rmtree(root, ignore_errors=True)


def predicted(plan_path: Path, profile_path: Path) -> tuple[float, str]:
    rec = ckplan("recommend", "--plan", str(plan_path), "--storage", str(profile_path), *NO_SERIALISER)
    model = rec["save_model"]
    how = model["aggregate"]["model"] + (" (extrapolated)" if model["aggregate"]["extrapolated"] else "")
    if model["source"] == "replay" or model.get("replay_seconds"):
        how += f"; replay of {model.get('replay_nodes')} node(s), {model['limited_by']} binds"
    return float(rec["save_seconds"]), how


def verdict(probe: str, nodes: int, pred: float, times: list[float], on_disk: bool) -> str:
    lo, hi, med = min(times), max(times), statistics.median(times)
    spread = (hi - lo) / med
    inside = lo <= pred <= hi
    if spread > 0.30:
        return f"range rule (spread {spread:.0%}): {'inside' if inside else 'OUTSIDE'} min…max"
    ratio = pred / med
    if probe.startswith("4 hosts") and nodes in (8, 16) and on_disk:
        return f"±25%: {'pass' if abs(ratio - 1) <= 0.25 else 'FAIL'}"
    if probe.startswith("2 hosts"):
        return f"0.67-1.5×: {'pass' if 0.67 <= ratio <= 1.5 else 'FAIL'}"
    return "not judged (reported)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="/var/tmp,/dev/shm")
    ap.add_argument("--params", default="2.5e8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one target (/dev/shm), 1e8 params, quick probes, 2 saves")
    args = ap.parse_args()
    targets = ["/dev/shm"] if args.quick else args.targets.split(",")
    params, repeats = ("1e8", 2) if args.quick else (args.params, args.repeats)
    preset = ["--quick"] if args.quick else []
    work = Path(tempfile.mkdtemp(prefix="ckplan-bench-scale-"))
    plans: dict[int, Path] = {}
    for n in NODE_COUNTS:
        plans[n] = work / f"plan-{n}.json"
        doc = ckplan("size", "--params", params, "--optimizer", "adam", "--framework", "deepspeed", "--zero", "3",
                     "--gpus", str(n * GPUS_PER_NODE), "--gpus-per-node", str(GPUS_PER_NODE))  # fmt: skip
        plans[n].write_text(json.dumps(doc))
    rows = []
    curves: list[str] = []  # each profile's measured aggregate, so the table explains itself
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for target in map(Path, targets):
        with fio_hosts(4) as servers:
            addrs = [a for a, _ in servers]
            probes: dict[str, Path] = {}
            for label, hosts, plan in (
                ("2 hosts", 2, None),
                ("2 hosts + replay", 2, 16),
                ("4 hosts", 4, None),
                ("4 hosts + replay", 4, 16),
            ):
                out = work / f"{target.name}-{label.replace(' ', '_')}.json"
                extra = ["--plan", str(plans[plan]), "--scale", "1"] if plan else []
                ckplan("probe", str(target), "--hosts", ",".join(addrs[:hosts]), "--writers", str(GPUS_PER_NODE),
                       "--no-calibrate", "--out", str(out), *preset, *extra)  # fmt: skip
                probes[label] = out
                curve = ", ".join(
                    f"{a['hosts']}: {a['bytes_per_s'] / 1e9:.2f}"
                    for a in json.loads(out.read_text())["aggregate_bandwidth"]
                )
                curves.append(f"{target} {label}: aggregate GB/s by hosts {curve}")
                print(f"probed {target} with {label}", file=sys.stderr)
        for n in NODE_COUNTS:
            plan = json.loads(plans[n].read_text())
            concurrent_save(target, plan)  # warm-up, not counted
            times = [concurrent_save(target, plan) for _ in range(repeats)]
            print(f"{target}: {n} nodes {[round(t, 2) for t in times]}", file=sys.stderr)
            for label, prof in probes.items():
                if label.endswith("replay") and n != 16:
                    continue  # its replay is of the 16-node plan
                pred, how = predicted(plans[n], prof)
                rows.append((str(target), label, n, plan["total_bytes"], pred, how, times,
                             verdict(label, n, pred, times, str(target) != "/dev/shm")))  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{date}; DeepSpeed ZeRO-3, {params} params, adam, {GPUS_PER_NODE} GPUs per node; 4 fio agents in network "
          f"namespaces on one target; warm-up + {repeats} concurrent saves per row; predictions without the "
          "serialiser\n")  # fmt: skip
    print("| target | probe | nodes | GB per save | predicted | aggregate | measured median (min … max) | "
          "predicted ÷ measured | judged |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for target, label, n, total, pred, how, times, judged in rows:
        med = statistics.median(times)
        print(f"| {target} | {label} | {n} | {total / 1e9:.2f} | {pred:.2f} s | {how} | {med:.2f} s "
              f"({min(times):.2f} … {max(times):.2f}) | {pred / med:.2f}× | {judged} |")  # fmt: skip
    print("\nThe profiles' measured aggregates (median of the repeats):\n")
    for line in curves:
        print(f"- {line}")


if __name__ == "__main__":
    main()
