"""The real frameworks as the oracle: each one trains a tiny Llama on CPU, saves, and its directory is compared
file by file with ckplan's manifest for the same model and setup.

Each case runs the framework for two AdamW steps (tests/framework_saves.py; torchrun with gloo on 127.0.0.1 for
several ranks), then:
- `ckplan size --config CONFIG --framework … --gpus … --json` names exactly the files on disk (the step number
  aside: ckplan's manifests are at step 1000), each within its tolerance (below) of its real size, on the rank
  that really wrote it (the file's group: see tests/framework_saves.py; checked where the tests run as root, as
  CI does);
- `ckplan size --from DIR` on the same directory finds the same files, their exact sizes and the same ranks.
The model is built from a config.json written here (transformers' from_config, no hub), the same file ckplan
reads, so both sides count the same tensors. The real sizes are the frameworks' own: nothing here is hand-written.

Megatron: megatron-core 0.16.1 (the last release for Python 3.11) installs, builds the GPTModel and reaches its
DistributedDataParallel, whose parameter and gradient buffers are allocated with torch.cuda.current_device()
(megatron/core/distributed/param_and_grad_buffer.py), which CPU PyTorch refuses ("Torch not compiled with CUDA
enabled"); the distributed optimizer that a torch_dist checkpoint holds needs those buffers. That case runs as
far as that, and skips with that message only where it is raised.

Needs the `frameworks` extra (scripts/setup --test-tools installs it); `pytest -m frameworks` selects these.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_json
from tests.framework_saves import MEGATRON_CPU_REFUSAL, OWNER_GID, STEPS

pytestmark = pytest.mark.frameworks

SAVES = Path(__file__).with_name("framework_saves.py")
# The tiny Llama: 584,320 parameters in 21 tensors, the smallest whose tensors are still real matrices (2 blocks,
# 4 heads, 128 wide); one config for every case.
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
}
PARAMETERS = 584_320
STEP_IN_PATH = re.compile(r"(global_step|checkpoint-|checkpoint_|step-|iter_|step=)\d+")
LAUNCH_TIMEOUT_S = 600
DEEPSPEED_SCRIPTS = ("zero_to_fp32.py", "zero_to_torch.py")  # copied verbatim beside `latest` at every ZeRO save


@dataclass(frozen=True)
class Tolerance:
    """|real − predicted| ≤ relative × predicted + absolute."""

    relative: float
    absolute: int

    def allows(self, real: int, predicted: int) -> bool:
        return abs(real - predicted) <= self.relative * predicted + self.absolute


# Files holding model or optimizer state (kind weights, optimizer, mixed). ckplan counts the tensors' bytes plus a
# torch.save's fixed records (TORCH_SAVE_OVERHEAD_BYTES and 300 bytes a tensor) or a safetensors header entry (120
# bytes a tensor); what the formats add is a fixed cost per tensor too (a zip entry per storage, 64-byte aligned,
# and a pickle record; DeepSpeed pads its flat partitions), so it is the same at any model size: within 0.5% of
# these files here, and nothing on a real model. DCP's .distcp gets a wider bound: every item in it is a torch.save
# of its own (about 1.6 KB: 129,577 bytes for a 128,000-byte chunk) and ckplan counts nothing per item, which is
# 1.5-4.3% of a file of this model (FSDP2's rank 1 writes 96 items in 3.5 MB) and under 0.01% of an 8B model's.
# A state missing or added (the fp32 master, a moment, the 16-bit copy) moves a file by 25% or more.
STATE_FILES = Tolerance(relative=0.01, absolute=4096)
DISTCP_FILES = Tolerance(relative=0.05, absolute=4096)
# The small files are estimates (frameworks/layout.py lists them as assumptions): trainer_state.json grows with
# the log history (ckplan takes 8,000 bytes; about 1,065 after two steps here), training_args.bin and config.json
# with the arguments, DCP's .metadata with the names and chunks (44,275 bytes for FSDP2 here, 31,500 estimated),
# ZeRO-3's model_states.pt with the parameter placeholders. Within 8 KiB, or half the estimate where that is more.
SMALL_FILES = Tolerance(relative=0.5, absolute=8192)


def tolerance(f: dict) -> Tolerance:
    if f["kind"] == "small":
        return SMALL_FILES
    return DISTCP_FILES if f["format"] == "dcp" else STATE_FILES


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """The model's config.json, the runs' hub cache, and the saves."""
    for module in ("transformers", "accelerate", "lightning", "deepspeed"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install -e '.[frameworks]' (scripts/setup --test-tools)")
    root = tmp_path_factory.mktemp("oracle")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text(json.dumps(CONFIG))
    return root


def launch(scratch: Path, kind: str, ranks: int, name: str, *cases: str) -> Path:
    """Run framework_saves.py KIND on `ranks` processes; the directory it saved into."""
    out = scratch / name
    out.mkdir()
    env = {
        **os.environ,
        # HOME stays: DeepSpeed's CPU accelerator JIT-builds its shm_comm op into ~/.cache/torch_extensions once
        # (about a minute on 2 cores), as it does for any user, and reuses it after
        "HF_HOME": str(scratch / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DS_ACCELERATOR": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }
    script = [str(SAVES), kind, "--config", str(scratch / "model"), "--out", str(out), *cases]
    if ranks == 1:  # one plain process, as a user runs a single-device job
        cmd = [sys.executable, *script]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={ranks}",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
            *script,
        ]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=LAUNCH_TIMEOUT_S, cwd=scratch)
    print(f"{name}: {kind} on {ranks} rank(s) ran {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return out


def normalise(path: str) -> str:
    return STEP_IN_PATH.sub(lambda m: f"{m[1]}N", path)


def on_disk(root: Path) -> dict[str, tuple[int, int | None]]:
    """Each regular file under root: (bytes, the rank that wrote it, from its group; None when not known)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                writer = st.st_gid - OWNER_GID if st.st_gid >= OWNER_GID else None
                out[str(p.relative_to(root))] = (st.st_size, writer)
    return out


def installed_script_bytes(name: str) -> int:
    spec = importlib.util.find_spec("deepspeed")
    assert spec is not None and spec.submodule_search_locations
    return os.path.getsize(Path(spec.submodule_search_locations[0]) / "utils" / name)


def compare(scratch: Path, save: Path, size_args: list[str], from_args: list[str] | None = None) -> dict:
    """Assert that ckplan's manifest and `size --from` match the real save; the plan, for further checks."""
    plan = run_json("size", "--config", str(scratch / "model" / "config.json"), *size_args)
    assert plan["parameters"] == PARAMETERS
    predicted = {normalise(f["path"]): f for f in plan["manifest"]}
    real = on_disk(save)
    by_norm = {normalise(p): v for p, v in real.items()}
    assert sorted(by_norm) == sorted(predicted), "files on disk vs ckplan's manifest"
    rows, wrong = [], []
    ranks_known = all(writer is not None for _, writer in real.values())
    for path, f in sorted(predicted.items()):
        size, writer = by_norm[path]
        name = Path(path).name
        if name in DEEPSPEED_SCRIPTS:
            ok = f["bytes"] == size == installed_script_bytes(name)  # verbatim copies: exact
        else:
            ok = tolerance(f).allows(size, f["bytes"])
        rows.append(f"  {path:68s} {size:>9,} {f['bytes']:>9,} {size / f['bytes']:7.4f} rank {writer} {f['rank']}")
        if not ok:
            wrong.append(f"{path}: {size:,} bytes on disk, {f['bytes']:,} predicted ({f['kind']})")
        if ranks_known and writer != f["rank"]:
            wrong.append(f"{path}: written by rank {writer}, predicted rank {f['rank']}")
    total = sum(size for size, _ in real.values())
    print(
        f"{save.name}: {total:,} bytes on disk, {plan['total_bytes']:,} predicted ({total / plan['total_bytes']:.4f}×)"
    )
    print("\n".join(rows))
    assert not wrong, "\n".join(wrong)

    measured = run_json("size", "--from", str(save), *(from_args or []))
    scanned = {f["path"]: (f["bytes"], f["rank"]) for f in measured["manifest"]}
    assert sorted(scanned) == sorted(real), "size --from vs the files on disk"
    for path, (size, writer) in real.items():
        assert scanned[path][0] == size, path
        assert scanned[path][1] == predicted[normalise(path)]["rank"], f"size --from's rank for {path}"
        if ranks_known:
            assert scanned[path][1] == writer, path
    assert measured["total_bytes"] == total
    return plan


# --- HF Trainer ---------------------------------------------------------------------------------------------------

HF_CASES = {
    # case: (ranks, ckplan size arguments)
    "ddp-bf16": (1, ["--framework", "hf", "--gpus", "1"]),
    "ddp-fp32": (2, ["--framework", "hf", "--gpus", "2", "--precision", "fp32"]),
    "ds2-bf16": (2, ["--framework", "hf", "--gpus", "2", "--zero", "2"]),
    "ds2-fp32": (2, ["--framework", "hf", "--gpus", "2", "--zero", "2", "--precision", "fp32"]),
    "ds3-bf16": (2, ["--framework", "hf", "--gpus", "2", "--zero", "3"]),
    "ds3-bf16-gather": (2, ["--framework", "hf", "--gpus", "2", "--zero", "3", "--option", "gather_16bit=true"]),
}


@pytest.mark.parametrize("case", HF_CASES)
def test_hf_trainer(scratch, case):
    ranks, args = HF_CASES[case]
    out = launch(scratch, "hf", ranks, f"hf-{case}", case)
    compare(scratch, out, args)


# --- Lightning ----------------------------------------------------------------------------------------------------

LIGHTNING_CASES = {
    # without --zero: Lightning's one stage is the default
    "1-bf16-mixed": (1, "bf16-mixed", ["--framework", "lightning", "--gpus", "1"]),
    "2-bf16-mixed": (2, "bf16-mixed", ["--framework", "lightning", "--gpus", "2"]),
    "1-32-true": (1, "32-true", ["--framework", "lightning", "--gpus", "1", "--precision", "fp32"]),
}


@pytest.mark.parametrize("case", LIGHTNING_CASES)
def test_lightning(scratch, case):
    ranks, precision, args = LIGHTNING_CASES[case]
    out = launch(scratch, "lightning", ranks, f"lightning-{case}", precision)
    compare(scratch, out, args, ["--gpus", str(ranks)])
    # the checkpoints/ directory itself, and the one file in it
    inner = run_json("size", "--from", str(out / "checkpoints"), "--gpus", str(ranks))
    assert [f["path"] for f in inner["manifest"]] == [f"checkpoints/epoch=0-step={STEPS}.ckpt"]
    assert inner["setup"]["framework"] == "lightning"


# --- torch.distributed.checkpoint ---------------------------------------------------------------------------------

DCP_CASES = {
    "ddp": ["--framework", "dcp", "--gpus", "2", "--zero", "0"],
    "fsdp2": ["--framework", "dcp", "--gpus", "2", "--zero", "3"],
}


@pytest.mark.parametrize("case", DCP_CASES)
def test_dcp(scratch, case):
    out = launch(scratch, "dcp", 2, f"dcp-{case}", case)
    compare(scratch, out, DCP_CASES[case])


# --- DeepSpeed ----------------------------------------------------------------------------------------------------

DEEPSPEED_CASES = [f"z{stage}-{precision}" for stage in (1, 2, 3) for precision in ("bf16", "fp32")]


@pytest.fixture(scope="module")
def deepspeed_saves(scratch) -> Path:
    """Every ZeRO stage and precision, one engine after another in one 2-rank launch (DeepSpeed's import and
    torchrun's start cost more than the six saves)."""
    return launch(scratch, "deepspeed", 2, "deepspeed", *DEEPSPEED_CASES)


@pytest.mark.parametrize("case", DEEPSPEED_CASES)
def test_deepspeed(scratch, deepspeed_saves, case):
    stage, precision = case[1], case.split("-")[1]
    args = ["--framework", "deepspeed", "--gpus", "2", "--zero", stage]
    args += ["--precision", "bf16-mixed" if precision == "bf16" else "fp32"]
    plan = compare(scratch, deepspeed_saves / case, args)
    # Adam: 14 B/param mixed at ZeRO-1/2 (bf16 module weights, fp32 master, two moments), 16 in fp32 (the module's
    # fp32 weights beside the ZeRO optimizer's own fp32 partition), 12 at ZeRO-3 either way (the partition is the
    # only copy of the weights saved): what the real files hold, and what ckplan says
    expected = 12 if stage == "3" else 14 if precision == "bf16" else 16
    kinds = {normalise(f["path"]): f["kind"] for f in plan["manifest"]}
    real = sum(size for p, (size, _) in on_disk(deepspeed_saves / case).items() if kinds[normalise(p)] != "small")
    assert real / PARAMETERS == pytest.approx(expected, rel=0.01)
    assert plan["bytes_per_parameter"] == expected


# --- Accelerate ---------------------------------------------------------------------------------------------------

ACCELERATE_CASES = {
    # case: (ranks, precision, ckplan size arguments)
    "1-bf16": (1, "bf16", ["--framework", "accelerate", "--gpus", "1"]),
    "1-fp32": (1, "fp32", ["--framework", "accelerate", "--gpus", "1", "--precision", "fp32"]),
    "2-bf16": (2, "bf16", ["--framework", "accelerate", "--gpus", "2"]),
    "2-fp32": (2, "fp32", ["--framework", "accelerate", "--gpus", "2", "--precision", "fp32"]),
}


@pytest.mark.parametrize("case", ACCELERATE_CASES)
def test_accelerate(scratch, case):
    ranks, precision, args = ACCELERATE_CASES[case]
    out = launch(scratch, "accelerate", ranks, f"accelerate-{case}", precision)
    plan = compare(scratch, out, args)
    # the module's fp32 parameters (mixed precision keeps no half copy) and AdamW's two fp32 moments: 12 B/param,
    # within 1.5% per file class and in total
    real = on_disk(out)
    kinds = {normalise(f["path"]): f["kind"] for f in plan["manifest"]}
    for kind in ("weights", "optimizer"):
        on = sum(b for p, (b, _) in real.items() if kinds[normalise(p)] == kind)
        said = sum(f["bytes"] for f in plan["manifest"] if f["kind"] == kind)
        assert on == pytest.approx(said, rel=0.015), kind
    assert sum(b for b, _ in real.values()) == pytest.approx(plan["total_bytes"], rel=0.015)
    assert plan["bytes_per_parameter"] == 12


# --- Megatron-Core ------------------------------------------------------------------------------------------------


def test_megatron_torch_dist(scratch):
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        pytest.skip("megatron-core is not installed: pip install -e '.[frameworks]'")
    out = launch(scratch, "megatron", 2, "megatron", "bf16")
    refusal = out / "skip.txt"
    if refusal.exists():
        reason = refusal.read_text()
        assert MEGATRON_CPU_REFUSAL in reason
        pytest.skip(f"megatron-core does not train on CPU: {reason}")
    compare(scratch, out, ["--framework", "megatron", "--gpus", "2", "--zero", "1"])
