#!/usr/bin/env python3
"""At-scale accuracy: predicted against measured saves of 4-, 8- and 16-node plans on one shared target.

Default: the testbed (scripts/_testbed.py), a GlusterFS volume on one machine with 16 client nodes, each its own
namespace, FUSE client and `ckplan agent`, in two regimes whose knee is known from the links' rates:
- server-bound: the server's port 400 Mbit/s, each node 1 Gbit/s (the aggregate saturates at one host);
- knee at 4: the server's port 400 Mbit/s, each node 100 Mbit/s (linear to 4 hosts, flat after).
In each: quick probes from 2, 4 and 8 agents, each without a plan and with `--plan` of the 16-node plan (its
replay covers 2, 4 or 8 of the 16 nodes); then for each plan (DeepSpeed ZeRO-3, 2 GPUs per node, 4, 8 and 16
nodes, the same model so the same bytes) `recommend`'s predicted save from each profile (a range where the probe
did not reach saturation), against the real save: every node at once, one process per rank in its node's
namespace writing its files with torch.save of real tensors into its node's FUSE mount, fsync per file, timed
from a common start to the last rank's end; one unrecorded warm-up, then --repeats measured saves.

A third regime, small-files (server-bound's rates): one 8-node plan of many small files, DeepSpeed's pipeline
engine writing one file per layer per tensor-parallel rank (2,089 files, 0.27 GB), probed the same way, its
replay of that plan.

Judged: server-bound, every prediction within ±20% of the measured median; knee at 4, every prediction from a 4-
or 8-host probe within ±20%, every 2-host row a range that contains the measured median and says the probe did
not reach saturation; small-files, every prediction within ±25%. A row whose measured saves spread over 20% is
judged by the range rule (the prediction inside min…max).

`--disk /var/tmp,/dev/shm`: the second table, on this VM's own filesystems: K fio agents in network namespaces
(the test suite's fixture) share one directory; the real save is ckplan's replay writer (4 MiB writes, fsync
per file), one process per node, serialisation switched off in the prediction; judged as before: predictions
from the 4-host probe within ±25% of the 8- and 16-node saves on the disk, from the 2-host probe within
0.67-1.5×, a row spread over 30% by the range rule.

Needs root (ip netns; the testbed: glusterfs, FUSE). Usage: scripts/bench_scale.py
[--regimes server-bound,knee-4,small-files] [--fs glusterfs|cephfs]
[--params 6e7] [--repeats 3] | --disk /var/tmp,/dev/shm [--params 2.5e8] [--quick]
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

import _testbed as tb  # beside this script
from _harness import fio_hosts

from ckplan.savers.raw import FileToWrite, write_files
from ckplan.scratch import remove_tree

NODE_COUNTS = (4, 8, 16)
GPUS_PER_NODE = 2
NO_SERIALISER = ["--serialize-bandwidth", "torch.save=1000GB/s"]
# server port, each node
REGIMES = {"server-bound": ("400mbit", "1gbit"), "knee-4": ("400mbit", "100mbit"), "small-files": ("400mbit", "1gbit")}
# The small-file plan: DeepSpeed's pipeline engine writes one file per layer per tensor-parallel rank, so a model of
# 1,024 narrow layers under tp 2 × pp 8 on 8 nodes saves 2,089 files of ~48 kB (and 16 optimizer files of ~11 MB,
# SGD's fp32 master copy): 0.27 GB, about 5 s of bytes on the server's port against ~130 file creations per rank.
SMALL_FILES_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1024, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
SMALL_FILES_NODES = 8
PROBE_HOSTS = (2, 4, 8)
NOT_SATURATED = "did not reach saturation"


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


def disk_table(args: argparse.Namespace) -> None:
    targets = ["/dev/shm"] if args.quick else args.disk.split(",")
    params, repeats = ("1e8", 2) if args.quick else (args.params or "2.5e8", args.repeats)
    preset = ["--quick"] if args.quick else []
    work = Path(tempfile.mkdtemp(prefix="ckplan-bench-scale-"))
    plans = size_plans(work, params)
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


def size_plans(work: Path, params: str) -> dict[int, Path]:
    plans: dict[int, Path] = {}
    for n in NODE_COUNTS:
        plans[n] = work / f"plan-{n}.json"
        doc = ckplan("size", "--params", params, "--optimizer", "adam", "--framework", "deepspeed", "--zero", "3",
                     "--gpus", str(n * GPUS_PER_NODE), "--gpus-per-node", str(GPUS_PER_NODE))  # fmt: skip
        plans[n].write_text(json.dumps(doc))
    return plans


def size_small_files_plan(work: Path) -> dict[int, Path]:
    config, plan = work / "small-files-config.json", work / f"plan-small-files-{SMALL_FILES_NODES}.json"
    config.write_text(json.dumps(SMALL_FILES_CONFIG))
    doc = ckplan("size", "--config", str(config), "--optimizer", "sgd", "--framework", "deepspeed", "--zero", "1",
                 "--tp", "2", "--pp", "8", "--gpus", str(SMALL_FILES_NODES * GPUS_PER_NODE), "--gpus-per-node",
                 str(GPUS_PER_NODE), "--full-manifest")  # fmt: skip
    plan.write_text(json.dumps(doc))
    return {SMALL_FILES_NODES: plan}


def rank_worker() -> None:
    """One rank of a testbed save, run in its node's namespace: builds its tensors once, then for each
    {"dir", "start"} line on stdin waits for the common start (CLOCK_MONOTONIC is one clock for every network
    namespace), torch.saves its files with fsync, and prints its end."""
    from ckplan.savers.saver import build_state, save_files

    state = build_state(json.loads(sys.stdin.readline()))
    print("ready", flush=True)
    for line in sys.stdin:
        order = json.loads(line)
        time.sleep(max(0.0, order["start"] - time.monotonic()))
        save_files(Path(order["dir"]), state, "torch.save")
        print(time.monotonic(), flush=True)


class Ranks:
    """The plan's ranks as worker processes, each in its node's namespace writing to its node's mount."""

    def __init__(self, bed: tb.Testbed, plan: dict):
        by_rank: dict[int, list[dict]] = {}
        self.node_of: dict[int, int] = {}
        for f in plan["manifest"]:
            by_rank.setdefault(f["rank"], []).append({k: f[k] for k in ("path", "bytes", "kind", "rank")})
            self.node_of[f["rank"]] = f["node"]
        self.bed, self.procs = bed, {}
        for rank, files in sorted(by_rank.items()):
            node = bed.nodes[self.node_of[rank]]
            proc = subprocess.Popen(node.cmd(sys.executable, __file__, "--rank-worker"), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)  # fmt: skip
            proc.stdin.write(json.dumps(files) + "\n")
            proc.stdin.flush()
            self.procs[rank] = proc
        for proc in self.procs.values():
            assert proc.stdout.readline().strip() == "ready", "a rank worker failed to build its state"

    def save(self, name: str) -> float:
        """Every rank at once; seconds from the common start to the last rank's end. The files are removed after."""
        start = time.monotonic() + 1.0
        for rank, proc in self.procs.items():
            where = self.bed.nodes[self.node_of[rank]].mount / name
            proc.stdin.write(json.dumps({"dir": str(where), "start": start}) + "\n")
            proc.stdin.flush()
        ends = [float(proc.stdout.readline()) for proc in self.procs.values()]
        remove_tree(self.bed.path / name)
        return max(ends) - start

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stdin.close()
            proc.wait(timeout=60)


def testbed_verdict(regime: str, hosts: int, pred: float, shortest: float | None, label: str,
                    times: list[float]) -> str:  # fmt: skip
    lo, hi, med = min(times), max(times), statistics.median(times)
    spread = (hi - lo) / med
    if regime == "small-files":
        if spread > 0.20:
            return f"range rule (spread {spread:.0%}): {'inside' if lo <= pred <= hi else 'OUTSIDE'} min…max"
        return f"±25%: {'pass' if abs(pred / med - 1) <= 0.25 else 'FAIL'}"
    if regime == "knee-4" and hosts == 2:
        inside = (shortest or pred) <= med <= pred
        labelled = NOT_SATURATED in label
        ok = inside and labelled
        return f"range contains measured, labelled: {'pass' if ok else 'FAIL'}"
    if spread > 0.20:
        return f"range rule (spread {spread:.0%}): {'inside' if lo <= pred <= hi else 'OUTSIDE'} min…max"
    return f"±20%: {'pass' if abs(pred / med - 1) <= 0.20 else 'FAIL'}"


def measure_testbed(args: argparse.Namespace, work: Path) -> None:
    """The probes' profiles, the plans and the measured saves, kept in `work` (measurements.json lists them), so
    that the predictions can be made again from the same measurements (--judge)."""
    params = args.params or "6e7"
    regimes = args.regimes.split(",")
    plans = size_plans(work, params) if set(regimes) - {"small-files"} else {}
    done: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "params": params,
                  "repeats": args.repeats, "fs": args.fs, "regimes": {}}  # fmt: skip
    for regime in regimes:
        server_rate, client_rate = REGIMES[regime]
        these = size_small_files_plan(work) if regime == "small-files" else plans
        probes: dict[str, list] = {}
        saves: dict[int, list[float]] = {}
        with tb.testbed(nodes=max(these), server_rate=server_rate, client_rate=client_rate, agents=True,
                        fs=args.fs) as bed:  # fmt: skip
            for hosts in PROBE_HOSTS:
                for replay in (False, True):
                    label = f"{hosts} hosts" + (" + replay" if replay else "")
                    out = work / f"{regime}-{label.replace(' ', '_')}.json"
                    extra = ["--plan", str(these[max(these)])] if replay else []
                    ckplan("probe", str(bed.path), "--hosts", ",".join(bed.agents[:hosts]), "--writers",
                           str(GPUS_PER_NODE), "--quick", "--no-calibrate", "--out", str(out), *extra)  # fmt: skip
                    probes[label] = [hosts, str(out)]
                    print(f"{regime}: probed with {label}", file=sys.stderr)
            for n in these:
                ranks = Ranks(bed, json.loads(these[n].read_text()))
                try:
                    ranks.save("warm-up")
                    saves[n] = [ranks.save(f"save{i}") for i in range(args.repeats)]
                finally:
                    ranks.close()
                print(f"{regime}: {n} nodes {[round(t, 2) for t in saves[n]]}", file=sys.stderr)
        done["regimes"][regime] = {"plans": {n: str(p) for n, p in these.items()}, "probes": probes, "saves": saves}
        (work / "measurements.json").write_text(json.dumps(done, indent=1))


def judge_testbed(works: list[Path]) -> None:
    """The table: each measured save beside `recommend`'s prediction from each profile, made now."""
    runs = [json.loads((work / "measurements.json").read_text()) for work in works]
    done = runs[0]
    rows, curves = [], []
    for regime, got, plans in (
        (regime, got, {int(n): Path(p) for n, p in got.get("plans", run.get("plans", {})).items()})  # kept runs
        # from before the small-files regime name their plans once, for every regime
        for run in runs
        for regime, got in run["regimes"].items()
    ):
        for label, (_, prof) in got["probes"].items():
            curve = ", ".join(f"{a['hosts']}: {a['bytes_per_s'] / 1e6:.1f}"
                              for a in json.loads(Path(prof).read_text())["aggregate_bandwidth"])  # fmt: skip
            curves.append(f"{regime} {label}: aggregate MB/s by hosts {curve}")
        for n_text, times in got["saves"].items():
            n = int(n_text)
            plan = json.loads(plans[n].read_text())
            for label, (hosts, prof) in got["probes"].items():
                if label.endswith("replay") and n != max(plans):
                    continue  # its replay is of the largest plan
                rec = ckplan("recommend", "--plan", str(plans[n]), "--storage", prof)
                model = rec["save_model"]
                pred, shortest = float(rec["save_seconds"]), model.get("shortest_seconds")
                how = f"{model['aggregate']['model']}, {model['limited_by']}"
                if model.get("replay_seconds"):
                    how += f"; replay of {model.get('replay_nodes')} nodes"
                judged = testbed_verdict(regime, hosts, pred, shortest, model["aggregate"]["label"], times)
                rows.append((regime, label, n, plan["total_bytes"], plan["file_count"], pred, shortest, how, times,
                             judged))  # fmt: skip
    print(f"\n{done['date']}; the testbed ({done.get('fs', 'glusterfs')}, server port 400 Mbit/s; nodes 1 Gbit/s "
          "server-bound and small-files, 100 Mbit/s knee-4); server-bound and knee-4: 16 nodes, DeepSpeed ZeRO-3, "
          f"{done['params']} params, adam; small-files: {SMALL_FILES_NODES} nodes, DeepSpeed ZeRO-1 tp 2 × pp 8 of a "
          f"1,024-layer model, SGD; {GPUS_PER_NODE} ranks per node, torch.save per rank; quick probes; warm-up + "
          f"{done['repeats']} concurrent saves per row\n")  # fmt: skip
    print("| regime | probe | nodes | GB per save | files | predicted | aggregate, bound | measured median (min … max) "
          "| predicted ÷ measured | judged |\n|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for regime, label, n, total, files, pred, shortest, how, times, judged in rows:
        med = statistics.median(times)
        shown = f"{shortest:.2f} … {pred:.2f} s" if shortest else f"{pred:.2f} s"
        print(f"| {regime} | {label} | {n} | {total / 1e9:.3f} | {files:,} | {shown} | {how} | {med:.2f} s "
              f"({min(times):.2f} … {max(times):.2f}) | {pred / med:.2f}× | {judged} |")  # fmt: skip
    print("\nThe profiles' measured aggregates:\n")
    for line in curves:
        print(f"- {line}")


def main() -> None:
    if sys.argv[1:] == ["--rank-worker"]:
        rank_worker()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--regimes", default=",".join(REGIMES), help="the testbed's regimes to run")
    ap.add_argument("--fs", choices=sorted(tb.FILESYSTEMS), default="glusterfs", help="the testbed's filesystem")
    ap.add_argument("--disk", help="instead of the testbed, these directories (the second table): /var/tmp,/dev/shm")
    ap.add_argument("--params", help="the model's parameters (default 6e7 on the testbed, 2.5e8 on the disk)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="--disk: /dev/shm, 1e8 params, quick probes, 2 saves")
    ap.add_argument(
        "--keep", type=Path, help="the testbed's measurements go into this new directory (else a temporary one)"
    )
    ap.add_argument("--judge", type=Path, nargs="+", metavar="DIR", help="no measuring: the table from --keep's runs")
    args = ap.parse_args()
    if args.disk or args.quick:
        disk_table(args)
    elif args.judge:
        judge_testbed(args.judge)
    else:
        work = args.keep or Path(tempfile.mkdtemp(prefix="ckplan-bench-scale-"))
        work.mkdir(parents=True, exist_ok=bool(args.keep is None))
        try:
            measure_testbed(args, work)
            judge_testbed([work])
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
