"""Issue 15's layouts, each checked against a published or framework-derived figure named in the docstring:
HF Trainer + DeepSpeed, MLPerf Storage / DLIO's checkpoint workloads, expert parallelism."""

from __future__ import annotations

import math
import re

import pytest

from ckplan import catalog
from ckplan.errors import InputError
from ckplan.sizing.plan import build_plan

GIB = 2**30
L8 = catalog.model("llama-3.1-8b")
N8 = 8_030_261_248


def _du_h(nbytes: int) -> str:
    """`du -h`'s figure for a file: GiB rounded up, to one decimal below 10 and to an integer above."""
    gib = nbytes / GIB
    return f"{math.ceil(gib * 10) / 10:.1f}G" if gib < 10 else f"{math.ceil(gib)}G"


def _file(plan, pattern: str):
    found = [f for f in plan.manifest if re.fullmatch(pattern, f.path)]
    assert len(found) == 1, [f.path for f in plan.manifest]
    return found[0]


# --- HF Trainer + DeepSpeed -------------------------------------------------------------------------------------

def test_hf_deepspeed_zero2_writes_16_bytes_per_parameter():
    """DeepSpeed issue 6598 (Llama-3.1-8B-Instruct, ZeRO-2, bf16, one H100, transformers 4.44.2): `du -h` of a
    Trainer checkpoint gave 90G bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt, 15G mp_rank_00_model_states.pt
    and four HF weight shards of 4.7G, 4.7G, 4.6G and 1.1G: ~120 GiB, 16 B/param, because rank 0's gathered
    16-bit weights (2 B/param) come on top of DeepSpeed's 14 B/param."""
    plan = build_plan(arch=L8, model_name="llama-3.1-8b", framework="hf", zero=2, gpus=1, gpus_per_node=1)
    assert plan.bytes_per_parameter == pytest.approx(16)
    assert plan.total_bytes / N8 == pytest.approx(16, rel=1e-4)
    assert plan.total_bytes / GIB == pytest.approx(120, rel=0.005)
    optim = _file(plan, r"checkpoint-1000/global_step1000/bf16_zero_pp_rank_0_mp_rank_00_optim_states\.pt")
    model = _file(plan, r"checkpoint-1000/global_step1000/mp_rank_00_model_states\.pt")
    assert (_du_h(optim.bytes), _du_h(model.bytes)) == ("90G", "15G")
    shards = [f for f in plan.manifest if f.path.endswith(".safetensors")]
    # the run saved .bin shards (save_safetensors=False); safetensors shards split at the same 5 GB
    assert [f.path for f in shards] == [f"checkpoint-1000/model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    assert [_du_h(f.bytes) for f in shards] == ["4.7G", "4.7G", "4.6G", "1.1G"]
    assert "checkpoint-1000/optimizer.pt" not in {f.path for f in plan.manifest}
    assert [s.name for s in plan.breakdown][-1] == "gathered_weights" and not plan.not_saved


def test_hf_deepspeed_rank0_writes_the_gathered_weights_every_rank_its_shard():
    """transformers Trainer._save_checkpoint: save_model on the main process (should_save) writes the
    safetensors, config.json, generation_config.json and training_args.bin; engine.save_checkpoint then writes
    DeepSpeed's files from every rank into checkpoint-N/ (the deepspeed layout's files under that directory);
    every process writes rng_state_{i}.pth."""
    plan = build_plan(arch=L8, model_name="x", framework="hf", zero=2, gpus=16)
    ds = build_plan(arch=L8, model_name="x", framework="deepspeed", zero=2, gpus=16)
    names = {f.path for f in plan.manifest}
    assert {f"checkpoint-1000/{f.path}" for f in ds.manifest} <= names
    assert {"checkpoint-1000/latest", "checkpoint-1000/zero_to_fp32.py", "checkpoint-1000/trainer_state.json",
            "checkpoint-1000/training_args.bin", "checkpoint-1000/config.json"} <= names
    assert {f"checkpoint-1000/rng_state_{i}.pth" for i in range(16)} <= names
    assert all(f.rank == 0 for f in plan.manifest if f.path.endswith(".safetensors"))
    assert sum(f.bytes for f in plan.manifest if f.path.endswith(".safetensors")) == pytest.approx(2 * N8, rel=1e-5)
    assert plan.writers == 16 and plan.bytes_per_parameter == pytest.approx(16)
    # rank 0 writes the whole 16-bit model on top of its optimizer shard: 2 + 2 + 12/16 B/param
    assert plan.bytes_per_rank_max / N8 == pytest.approx(2 + 2 + 12 / 16, rel=1e-4)


def test_hf_deepspeed_zero3_gathers_only_with_the_option():
    """DeepSpeed's stage3_gather_16bit_weights_on_model_save defaults to false; Trainer.save_model then saves
    no weights (accelerator.get_state_dict raises, the empty file is removed) and DeepSpeed's ZeRO-3 files hold
    the fp32 partition: 12 B/param. With the option, rank 0 also writes the gathered 16-bit model: 14 B/param."""
    default = build_plan(arch=L8, model_name="x", framework="hf", zero=3, gpus=8)
    assert default.bytes_per_parameter == pytest.approx(12)
    assert not [f for f in default.manifest if f.path.endswith(".safetensors")]
    assert any("written twice per save" in a for a in default.assumptions)
    gathered = build_plan(arch=L8, model_name="x", framework="hf", zero=3, gpus=8, options={"gather_16bit": "true"})
    assert gathered.bytes_per_parameter == pytest.approx(14)
    assert gathered.total_bytes - default.total_bytes == pytest.approx(2 * N8, rel=1e-4)
    with pytest.raises(InputError, match="needs --zero 3"):
        build_plan(arch=L8, model_name="x", framework="hf", zero=2, options={"gather_16bit": "true"})
    with pytest.raises(InputError, match="true or false"):
        build_plan(arch=L8, model_name="x", framework="hf", zero=3, options={"gather_16bit": "yes please"})
