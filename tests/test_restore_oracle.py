"""The real frameworks as the oracle of the restore manifest: each one saves a tiny Llama on CPU
(tests/framework_saves.py), then resumes from it the framework's own way (tests/framework_loads.py) with every rank
under strace, and the files each rank really opens are compared with what the layout says it reads
(Layout.restore, for `ckplan size --config` of the same setup).

- Which files each rank opens, and how often, must equal the layout's reads for that rank (the step number aside).
- The bytes: each open read whole (docs/restore-reads.md: torch.load reads every record, safetensors maps the whole
  file, DCP reads whole saved chunks), so a rank's bytes are the real sizes of what it opens. `ckplan size --from`
  on the same directory (real sizes) must give exactly those figures: the busiest rank, the node's distinct bytes
  (two ranks on one node) and the requested total.

strace (not an audit hook) sees the opens of every language: safetensors opens its files in Rust.
Needs the `frameworks` extra and strace; `pytest -m frameworks` selects these.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import run_json
from tests.test_framework_oracle import Tolerance, free_port, launch, normalise, scratch  # noqa: F401 (scratch: the fixture)

pytestmark = pytest.mark.frameworks

LOADS = Path(__file__).with_name("framework_loads.py")
RANKS = 2
LINE = re.compile(r"^(\d+)\s+(.*)$")
FD_PATH = re.compile(r"\b\d+<([^>]+)>")
READS = ("read", "pread64", "readv", "preadv", "preadv2")
WHOLE = Tolerance(relative=0.02, absolute=4096)  # torch.load leaves a few hundred bytes of zip records unread
# a file a rank is not declared to read, it may read a little of: DCP's replicated items (optimizer step counters,
# param_groups) are saved once, by the rank the save planner picks, and every rank reads them (2.8% of the other
# rank's file here, for this 21-tensor model; a few KB per tensor at any size)
STRAY = 0.1
# -y names each descriptor's file in the arguments; -s 0 leaves the data out
TRACED = "open,openat,lseek," + ",".join(READS) + ",mmap"
WRAPPER = f'#!/bin/sh\nexec strace -f -qq -y -s 0 --seccomp-bpf -e trace={TRACED} -o "$TRACE_DIR/rank-$RANK.txt" "$@"\n'


def resume(work: Path, kind: str, out: Path, root: Path, case: str) -> dict[int, Counter[str]]:
    """Resume from the save in `out` on RANKS ranks, each under strace: per rank, its opens for reading of the files
    under `root`, by path relative to it."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    traces = work / f"trace-{kind}-{case}"
    traces.mkdir()
    wrapper = traces / "strace-rank.sh"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    env = {
        **os.environ,
        "HF_HOME": str(work / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DS_ACCELERATOR": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "TRACE_DIR": str(traces),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--no-python",
        f"--nproc-per-node={RANKS}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(wrapper),
        sys.executable,
        str(LOADS),
        kind,
        "--config",
        str(work / "model"),
        "--out",
        str(out),
        case,
    ]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=work)
    print(f"resume {kind} {case}: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return {rank: bytes_read((traces / f"rank-{rank}.txt").read_text(), root) for rank in range(RANKS)}


def bytes_read(trace: str, root: Path) -> Counter[str]:
    """Bytes read from each file under `root`, by path relative to it: per open of the file, the length of the union
    of the ranges its read()s and pread()s covered, summed over the opens, plus the ranges mapped (safetensors maps
    the file and copies every tensor out of it). Ranges, not the calls' byte counts: Python's buffered reader reads
    8 KiB ahead and again after each seek, which torch.load and DCP do at every record."""
    ranges: dict[int, list[tuple[int, int]]] = {}  # per open: the ranges read
    # per file: the ranges mapped, counted once whatever the opens: safetensors maps its file twice (the header
    # through one mapping, the tensors through torch's), and two mappings of a file share its pages
    mapped: dict[str, list[tuple[int, int]]] = {}
    current: dict[int, tuple[int, str, int]] = {}  # fd → (its open, path, position)
    paths: dict[int, str] = {}
    pending: dict[str, str] = {}  # a thread's call that another thread's line interrupted
    base = root.resolve()
    for line in trace.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        tid, call = m[1], m[2]
        if call.endswith("<unfinished ...>"):
            pending[tid] = call.removesuffix("<unfinished ...>")
            continue
        if call.startswith("<... "):
            call = pending.pop(tid, "") + call.split(">", 1)[1]
        if ") = " not in call:
            continue
        name, args = call.split("(", 1)
        args, result = args.rsplit(") = ", 1)
        result = result.split(" ", 1)[0]
        if result.startswith("-") or result == "?":
            continue
        if name in ("open", "openat"):
            where = FD_PATH.fullmatch(result)  # -y names the new descriptor's file: 5</path>
            if where and Path(where[1]).is_relative_to(base) and Path(where[1]).is_file():
                opened = len(paths)
                paths[opened], ranges[opened] = str(Path(where[1]).relative_to(base)), []
                current[int(result.split("<", 1)[0])] = (opened, where[1], 0)
            continue
        fd_arg = FD_PATH.search(args)
        if fd_arg is None:
            continue
        fd = int(fd_arg[0].split("<", 1)[0])
        if fd not in current or current[fd][1] != fd_arg[1]:  # a descriptor number reused for another file
            continue
        opened, path, position = current[fd]
        parts = args.split(", ")
        if name == "lseek":
            current[fd] = (opened, path, int(result))
        elif name in ("read", "readv"):
            ranges[opened].append((position, position + int(result)))
            current[fd] = (opened, path, position + int(result))
        elif name in ("pread64", "preadv", "preadv2"):
            offset = int(parts[-1] if name != "preadv2" else parts[-2])
            ranges[opened].append((offset, offset + int(result)))
        elif name == "mmap":
            offset, length = int(parts[5], 0), int(parts[1])
            mapped.setdefault(paths[opened], []).append((offset, min(offset + length, Path(path).stat().st_size)))
    out: Counter[str] = Counter()
    for opened, covered in ranges.items():
        out[paths[opened]] += _union(covered)
    for path, covered in mapped.items():
        out[path] += _union(covered)
    return out


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, 0
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def declared(work: Path, size_args: list[str]) -> dict[int, Counter[str]]:
    """Per rank, the files the layout says it reads (normalised paths) and how many times, for the plan of
    `ckplan size --config` with the same setup."""
    from ckplan.frameworks import FRAMEWORKS
    from ckplan.frameworks.layout import Parallelism
    from ckplan.sizing.plan import CheckpointPlan

    plan = CheckpointPlan.model_validate(run_json("size", "--config", str(work / "model" / "config.json"), *size_args))
    s = plan.setup
    par = Parallelism(gpus=s.gpus, gpus_per_node=s.gpus_per_node, tp=s.tp, pp=s.pp, zero=s.zero)
    reads = FRAMEWORKS[s.framework].layout.restore(par, plan.manifest).reads
    assert reads is not None
    out: dict[int, Counter[str]] = {rank: Counter() for rank in range(s.gpus)}
    for r in reads:
        for rank in range(r.readers.start, r.readers.start + r.readers.step * r.readers.count, r.readers.step):
            out[rank][normalise(r.path)] += r.times
    return out


def check(
    work: Path, read: dict[int, Counter[str]], size_args: list[str], root: Path, from_args: list[str] | None
) -> None:
    """Each file the layout says a rank reads, it read whole (times its size, within WHOLE); any other file it
    touched, it read only a little of (within STRAY); and `size --from`, given the real sizes, sums the same."""
    want = declared(work, size_args)
    sizes = {normalise(str(p.relative_to(root))): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    wrong = []
    for rank in range(RANKS):
        got = Counter({normalise(p): n for p, n in read[rank].items()})
        print(f"rank {rank} read: " + ", ".join(f"{p} {n:,} of {sizes[p]:,}" for p, n in sorted(got.items())))
        for path, times in want[rank].items():
            if not WHOLE.allows(got[path], times * sizes[path]):
                wrong.append(f"rank {rank} read {got[path]:,} bytes of {path}, declared {times} × {sizes[path]:,}")
        for path in got.keys() - want[rank].keys():
            if not got[path] <= STRAY * sizes[path]:
                wrong.append(f"rank {rank} read {got[path]:,} bytes of {path}, which it is not declared to read")
    assert not wrong, "\n".join(wrong)
    if from_args is None:
        return
    per_rank = [sum(n * sizes[p] for p, n in want[rank].items()) for rank in range(RANKS)]
    distinct = sum(sizes[p] for p in set().union(*want.values()))
    measured = run_json("size", "--from", str(root), *from_args)["restore"]
    print(f"declared bytes per rank {per_rank}, node {distinct}; size --from: {measured['rank_bytes']:,}")
    assert measured["rank_bytes"] == max(per_rank)
    assert measured["requested_bytes"] == sum(per_rank)
    assert measured["node_bytes"] == measured["storage_bytes"] == distinct  # both ranks on one node


def test_hf_trainer_ddp_resume(scratch):  # noqa: F811
    out = launch(scratch, "hf", RANKS, "restore-hf-ddp", "ddp-fp32")
    read = resume(scratch, "hf", out, out, "ddp-fp32")
    check(scratch, read, ["--framework", "hf", "--gpus", "2", "--precision", "fp32"], out, [])


@pytest.fixture(scope="module")
def deepspeed_saves(scratch) -> Path:  # noqa: F811
    return launch(scratch, "deepspeed", RANKS, "restore-deepspeed", "z1-bf16", "z3-bf16")


@pytest.mark.parametrize("stage", ["1", "3"])
def test_deepspeed_load_checkpoint(scratch, deepspeed_saves, stage):  # noqa: F811
    case = f"z{stage}-bf16"
    read = resume(scratch, "deepspeed", deepspeed_saves, deepspeed_saves / case, case)
    check(scratch, read, ["--framework", "deepspeed", "--gpus", "2", "--zero", stage], deepspeed_saves / case, [])


def test_lightning_resume(scratch):  # noqa: F811
    out = launch(scratch, "lightning", RANKS, "restore-lightning", "bf16-mixed")
    read = resume(scratch, "lightning", out, out, "bf16-mixed")
    check(scratch, read, ["--framework", "lightning", "--gpus", "2"], out, ["--gpus", "2"])


@pytest.mark.parametrize("case", ["fsdp2", "ddp"])
def test_dcp_load(scratch, case):  # noqa: F811
    out = launch(scratch, "dcp", RANKS, f"restore-dcp-{case}", case)
    read = resume(scratch, "dcp", out, out, case)
    zero = "3" if case == "fsdp2" else "0"
    # size --from cannot tell DDP's files from FSDP's and takes the sharded load: compared where that holds
    check(scratch, read, ["--framework", "dcp", "--gpus", "2", "--zero", zero], out, [] if case == "fsdp2" else None)


def test_accelerate_load_state(scratch):  # noqa: F811
    out = launch(scratch, "accelerate", RANKS, "restore-accelerate", "bf16")
    read = resume(scratch, "accelerate", out, out, "bf16")
    check(scratch, read, ["--framework", "accelerate", "--gpus", "2"], out, [])
