#!/usr/bin/env python3
"""Accuracy of ckplan's load-time predictions against real cold restores on this machine.

For each target (the disk and /dev/shm), in one invocation:
  - a fresh default `ckplan probe TARGET` without a plan: its cold read curve gives the model-only prediction;
  - for each layout, a fresh default `ckplan probe TARGET --plan PLAN`: with a read replay of the plan's busiest
    restore node, the replay-informed prediction (shown as "—" where the profile holds none);
  - `ckplan validate TARGET --plan PLAN --restore --repeats N`: N real loads of the files its last save wrote,
    one process per rank, cold (each file's pages dropped first; not possible on /dev/shm, said in the table),
    after one unrecorded warm-up load.
Layouts (2e8 parameters, 2 ranks on one node, Adam, bf16 mixed precision): DeepSpeed ZeRO-3 (each rank its own
shards), DCP (FSDP: each rank its own shard and .metadata), HF Trainer under DDP (every rank reads the whole
checkpoint: the node's page cache serves the second rank's reads).
The order alternates: the layouts run in reverse on every other target, and within a layout the loads run before
the plan's probe on every other layout, so drift over the run hits both predictions alike. Right before each
measured series the validate's own saves and its warm-up load run: this VM returns freed memory to its host, and
writes into fresh memory run 3-7x slower until it is faulted back in.

Targets: |error| ≤ 20% for the model-only and the replay-informed prediction in every row whose measured loads
spread (max − min) by less than 30% of their median; noisier rows are shown with their spread and judged on the range
only. In every row, both predictions must lie within the measured min…max range of the median (|prediction −
median| ≤ max − min, as bench_accuracy.py judges saves). Prints a Markdown table.

Usage: scripts/bench_restore.py [--targets /var/tmp /dev/shm] [--params 2e8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
from pathlib import Path

from bench_accuracy import ckplan

from ckplan.profile import StorageProfile
from ckplan.savers.restore import restore_node
from ckplan.sizing.plan import CheckpointPlan
from ckplan.validate.model import LOAD_TARGET_PERCENT, NOISY_SPREAD, scaled_load_prediction

LAYOUTS = {
    "DeepSpeed ZeRO-3": ["--framework", "deepspeed", "--zero", "3"],
    "DCP (FSDP)": ["--framework", "dcp", "--zero", "3"],
    "HF Trainer, DDP": ["--framework", "hf", "--zero", "0"],
}


def load_prediction(plan: CheckpointPlan, profile: StorageProfile):
    _, reads, readers = restore_node(plan)
    return scaled_load_prediction(plan, profile, reads, readers, 1.0)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="+", default=["/var/tmp", "/dev/shm"])
    ap.add_argument("--params", default="2e8")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.repeats < 5:
        ap.error("--repeats: at least 5 loads per row")
    work = Path(tempfile.mkdtemp(prefix="ckplan-bench-restore-"))
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {args.params} params, 2 ranks, {args.repeats} cold loads per "
        "row after one warm-up load\n"
    )
    print(
        "| target | layout | bytes read (distinct / requested) | measured (median, min…max, spread) | model-only "
        "| error | replay-informed | error | judged |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    misses, judged = 0, 0
    notes: list[str] = []
    for t_index, target in enumerate(args.targets):
        base = work / f"base-{t_index}.json"
        ckplan("probe", target, "--writers", "2", "--out", str(base))
        base_profile = StorageProfile.model_validate_json(base.read_text())
        curve = ", ".join(f"{p.writers}: {p.bytes_per_s / 1e9:.2f} GB/s" for p in base_profile.read_bandwidth)
        notes.append(f"{target}: the default probe's cold read curve (readers: rate) {curve or 'none'}")
        layouts = list(LAYOUTS.items())
        if t_index % 2:
            layouts.reverse()
        for l_index, (label, flags) in enumerate(layouts):
            plan_file = work / f"plan-{t_index}-{l_index}.json"
            plan_file.write_text(
                ckplan("size", "--params", args.params, "--gpus", "2", "--gpus-per-node", "2", *flags, "--json")
            )
            replay_file = work / f"replay-{t_index}-{l_index}.json"

            def probe_with_plan() -> None:
                ckplan("probe", target, "--writers", "2", "--plan", str(plan_file), "--out", str(replay_file))

            def loads() -> dict:
                v = json.loads(
                    ckplan(
                        "validate",
                        target,
                        "--plan",
                        str(plan_file),
                        "--storage",
                        str(base),
                        "--repeats",
                        str(args.repeats),
                        "--restore",
                        "--json",
                    )  # fmt: skip
                )
                return v["restore"]

            if (t_index + l_index) % 2:
                r = loads()
                probe_with_plan()
            else:
                probe_with_plan()
                r = loads()
            plan = CheckpointPlan.model_validate_json(plan_file.read_text())
            replay_profile = StorageProfile.model_validate_json(replay_file.read_text())
            model = load_prediction(plan, base_profile)
            assert model.source == "model"
            replay = load_prediction(plan, replay_profile) if replay_profile.read_replay else None
            if replay is not None:
                assert replay.source == "replay", "the plan's probe holds a read replay of the same plan"
            m = r["measured"]
            med, spread = m["median"], (m["max"] - m["min"]) / m["median"]
            predictions = [model.seconds] + ([replay.seconds] if replay else [])
            errors = [(p - med) / med * 100 for p in predictions]
            in_range = all(abs(p - med) <= m["max"] - m["min"] for p in predictions)
            quiet = spread < NOISY_SPREAD
            ok = in_range and (not quiet or all(abs(e) <= LOAD_TARGET_PERCENT for e in errors))
            judged += quiet
            misses += not ok
            verdict = ("ok" if ok else "MISSED") + (
                "" if quiet else f" (spread {spread:.0%} ≥ {NOISY_SPREAD:.0%}: range rule only)"
            )
            replay_cells = f"{replay.seconds:.2f} s | {errors[1]:+.1f}%" if replay else "— | —"
            how = "cold" if r["cold"] else "from memory"
            print(
                f"| {target} ({how}) | {label} | {r['bytes'] / 1e9:.2f} / {r['requested_bytes'] / 1e9:.2f} GB | "
                f"{med:.2f} s ({m['min']:.2f}…{m['max']:.2f}, {spread:.0%}) | {model.seconds:.2f} s | "
                f"{errors[0]:+.1f}% | {replay_cells} | {verdict} |",
                flush=True,
            )
            notes.append(
                f"{target} {label}: model-only = {model.deserialize_seconds:.2f} s deserialise + "
                f"{model.read_seconds:.2f} s read ({model.limited_by}, {model.read_curve} curve "
                f"{model.node_read_bandwidth_bytes_per_s / 1e9:.2f} GB/s at {model.streams_per_node:.3g} streams); "
                f"validate's diagnosis: {r['diagnosis']}"
            )
    shutil.rmtree(work, ignore_errors=True)
    print("\n" + "\n".join(f"- {n}" for n in notes))
    print(
        f"\n{judged} row(s) judged on error (spread < {NOISY_SPREAD:.0%}); {misses} row(s) missed a target "
        f"(±{LOAD_TARGET_PERCENT:.0f}% in quiet rows, inside the measured range in every row)"
    )


if __name__ == "__main__":
    main()
