"""Sizing arithmetic: parameter counts, bytes per parameter, framework file layouts."""

import re

import pytest

from ckplan import catalog
from ckplan.errors import InputError
from ckplan.model.architecture import parameter_count
from ckplan.model.architecture import tensors as model_tensors
from ckplan.model.states import state_breakdown
from ckplan.sizing.plan import build_plan, interval_demand, nearest_shape


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_parameter_count_matches_published(name):
    arch = catalog.model(name)
    assert abs(parameter_count(arch) - arch.published_parameters) <= arch.published_rounding // 2


def test_catalog_has_required_models():
    required = {
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "gpt-3-175b",
    }
    assert required <= set(catalog.models())


# Hand-computed bytes/param (weights + master + optimizer), DeepSpeed ZeRO-1 saves all of them; in fp32 its ZeRO
# optimizer also keeps an fp32 partition of the weights of its own, 4 bytes more (DEEPSPEED_FP32_MASTER).
# Adafactor, 8-bit Adam and Muon depend on tensor shapes; their expected values are derived
# below from Llama-3.1-8B's shapes by hand.
L8 = catalog.model("llama-3.1-8b")
N8 = 8_030_261_248
EMB = 128256 * 4096  # embed_tokens and lm_head each
HIDDEN_MATRICES = N8 - 2 * EMB - (2 * 32 + 1) * 4096
NORMS = (2 * 32 + 1) * 4096
FACTORS = 32 * (2 * (4096 + 4096) + 2 * (1024 + 4096) + 3 * (14336 + 4096)) + 2 * (128256 + 4096) + NORMS
# every tensor, norms included (4096 values), reaches bitsandbytes' 4096-value threshold for 8-bit states
BNB = 2 * (
    N8
    + sum(
        -(-numel // 2048) * 4
        for numel in [4096 * 4096] * 64 + [1024 * 4096] * 64 + [14336 * 4096] * 96 + [EMB] * 2 + [4096] * 65
    )
)

EXPECTED = {
    ("adam", "bf16-mixed"): 14,
    ("adam", "fp16-mixed"): 14,
    ("adam", "fp32"): 12,
    ("adam", "bf16"): 6,
    ("adamw", "bf16-mixed"): 14,
    ("adamw", "fp32"): 12,
    ("adamw", "bf16"): 6,
    ("adamw", "fp16-mixed"): 14,
    ("sgd", "bf16-mixed"): 6,
    ("sgd", "fp32"): 4,
    ("sgd", "bf16"): 2,
    ("sgd", "fp16-mixed"): 6,
    ("sgd-momentum", "bf16-mixed"): 10,
    ("sgd-momentum", "fp32"): 8,
    ("sgd-momentum", "bf16"): 4,
    ("sgd-momentum", "fp16-mixed"): 10,
    ("lion", "bf16-mixed"): 10,
    ("lion", "fp32"): 8,
    ("lion", "bf16"): 4,
    ("lion", "fp16-mixed"): 10,
    ("none", "bf16-mixed"): 6,
    ("none", "fp32"): 4,
    ("none", "bf16"): 2,
    ("none", "fp16-mixed"): 6,
    ("adafactor", "fp32"): 4 + 4 * FACTORS / N8,
    ("adafactor", "bf16-mixed"): 6 + 4 * FACTORS / N8,
    ("adafactor", "bf16"): 2 + 2 * FACTORS / N8,
    ("adafactor", "fp16-mixed"): 6 + 4 * FACTORS / N8,
    ("adam-8bit", "fp32"): 4 + BNB / N8,
    ("adam-8bit", "bf16-mixed"): 6 + BNB / N8,
    ("adam-8bit", "bf16"): 2 + BNB / N8,
    ("adam-8bit", "fp16-mixed"): 6 + BNB / N8,
    ("muon", "bf16-mixed"): 6 + (4 * HIDDEN_MATRICES + 8 * (N8 - HIDDEN_MATRICES)) / N8,
    ("muon", "fp32"): 4 + (4 * HIDDEN_MATRICES + 8 * (N8 - HIDDEN_MATRICES)) / N8,
    ("muon", "bf16"): 2 + (2 * HIDDEN_MATRICES + 4 * (N8 - HIDDEN_MATRICES)) / N8,
    ("muon", "fp16-mixed"): 6 + (4 * HIDDEN_MATRICES + 8 * (N8 - HIDDEN_MATRICES)) / N8,
}


DEEPSPEED_FP32_MASTER = 4


@pytest.mark.parametrize("optimizer,precision", sorted(EXPECTED))
def test_bytes_per_parameter(optimizer, precision):
    plan = build_plan(arch=L8, model_name="llama-3.1-8b", optimizer=optimizer, precision=precision, gpus=8, zero=1)
    expected = EXPECTED[(optimizer, precision)] + (DEEPSPEED_FP32_MASTER if precision == "fp32" else 0)
    assert plan.bytes_per_parameter == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "optimizer,precision,rounded,within", [("adam-8bit", "fp32", 6.0, 0.01), ("muon", "bf16-mixed", 10.5, 0.05)]
)
def test_reference_rounded_figures(optimizer, precision, rounded, within):
    """ckplan's bytes/param against the reference table's rounded figures for an 8B Llama: 8-bit Adam ≈ 6 (fp32
    weights 4 + two 1-byte states + the absmax per 2,048 values), Muon ≈ 10.5 mixed (2 + 4 master + 4 momentum on
    the hidden matrices, 8 for AdamW's two states on the rest): the states training holds, before a framework
    chooses which to write."""
    held = sum(s.bytes for s in state_breakdown(model_tensors(L8), optimizer, precision))
    assert held / N8 == pytest.approx(rounded, abs=within)


def test_dtype_override_and_unknown_state():
    plan = build_plan(
        arch=L8,
        model_name="x",
        optimizer="adam",
        precision="bf16-mixed",
        dtype_overrides={"exp_avg_sq": "bf16", "master": "none"},
    )
    assert plan.bytes_per_parameter == pytest.approx(2 + 4 + 2)
    with pytest.raises(InputError, match="unknown state"):
        build_plan(arch=L8, model_name="x", dtype_overrides={"momentum": "bf16"})


def test_zero3_and_fsdp_save_the_fp32_copy_only():
    ds3 = build_plan(arch=L8, model_name="x", framework="deepspeed", zero=3)
    dcp = build_plan(arch=L8, model_name="x", framework="dcp", zero=3)
    assert ds3.bytes_per_parameter == pytest.approx(12) and dcp.bytes_per_parameter == pytest.approx(12)
    assert [s.name for s in ds3.not_saved] == ["weights"]


def _names(plan):
    return [f.path for f in plan.manifest]


def test_deepspeed_zero1_single_node():
    plan = build_plan(arch=L8, model_name="x", framework="deepspeed", zero=1, gpus=8)
    names = _names(plan)
    assert names[:4] == ["latest", "zero_to_fp32.py", "zero_to_torch.py", "global_step1000/mp_rank_00_model_states.pt"]
    assert [n for n in names if "optim" in n] == [
        f"global_step1000/bf16_zero_pp_rank_{i}_mp_rank_00_optim_states.pt" for i in range(8)
    ]
    assert plan.writers == 8 and plan.file_count == 12
    model_states = next(f for f in plan.manifest if f.path.endswith("mp_rank_00_model_states.pt"))
    assert model_states.rank == 0 and model_states.bytes == pytest.approx(2 * N8, rel=1e-4)


def test_deepspeed_zero0_model_states_hold_the_optimizer():
    """ZeRO-0 keeps the optimizer inside mp_rank_00_model_states.pt, written by rank 0 alone: bf16 weights (2) + fp32
    master (4) + Adam's two fp32 states (8) = 14 bytes per parameter, plus torch.save's 4,096-byte header and 300 bytes
    for each of the model's 291 tensors (32 layers × 9 + embedding, final norm, head).

    Deliberate break this catches: ZeRO-0 model states without their optimizer bytes (2 B/param only)."""
    plan = build_plan(arch=L8, model_name="x", framework="deepspeed", zero=0, gpus=8)
    assert [(f.path, f.rank) for f in plan.manifest] == [
        ("latest", 0),
        ("global_step1000/mp_rank_00_model_states.pt", 0),
    ]
    states = plan.manifest[1]
    assert states.bytes == 14 * N8 + 4096 + 300 * 291 == 112_423_748_868
    assert plan.total_bytes == 112_423_748_868 + 16  # and the 'latest' tag file
    assert plan.writers == 1 and plan.bytes_per_rank_max == plan.total_bytes


def test_deepspeed_zero3_every_rank_writes_model_states():
    plan = build_plan(arch=L8, model_name="x", framework="deepspeed", zero=3, gpus=16, precision="fp16-mixed")
    assert (
        sum(1 for n in _names(plan) if re.fullmatch(r"global_step1000/zero_pp_rank_\d+_mp_rank_00_model_states\.pt", n))
        == 16
    )
    assert (
        sum(1 for n in _names(plan) if re.fullmatch(r"global_step1000/zero_pp_rank_\d+_mp_rank_00_optim_states\.pt", n))
        == 16
    )
    assert plan.nodes_writing == 2 and plan.max_writers_per_node == 8


def test_deepspeed_1024_gpus_zero1_tp8_pp8():
    arch = catalog.model("llama-3.1-405b")
    plan = build_plan(arch=arch, model_name="llama-3.1-405b", framework="deepspeed", zero=1, gpus=1024, tp=8, pp=8)
    names = _names(plan)
    dp, mp = 16, 64
    assert plan.setup.dp == dp
    optim = [n for n in names if n.endswith("_optim_states.pt")]
    assert len(optim) == dp * mp
    assert "global_step1000/bf16_zero_pp_rank_15_mp_rank_63_optim_states.pt" in optim
    assert len([n for n in names if re.fullmatch(r"global_step1000/mp_rank_\d\d_model_states\.pt", n)]) == mp
    # 126 blocks + embedding + final norm + head, each split over 8 tensor ranks
    layer_files = [n for n in names if "/layer_" in n]
    assert len(layer_files) == (126 + 3) * 8
    assert "global_step1000/layer_00-model_07-model_states.pt" in layer_files
    assert "global_step1000/layer_128-model_00-model_states.pt" in layer_files
    assert plan.file_count == len(optim) + mp + len(layer_files) + 3  # latest and the two recovery scripts
    assert plan.writers == 1024 and plan.nodes_writing == 128
    assert plan.state_bytes == pytest.approx(14 * arch.published_parameters, rel=1e-9)
    # pipeline stage 0 (dp rank 0 of each tp rank) carries the embedding: its node is the busiest
    assert plan.nodes[0].bytes == plan.bytes_per_node_max


def test_dcp_one_file_per_rank_plus_metadata():
    plan = build_plan(arch=L8, model_name="x", framework="dcp", zero=3, gpus=32)
    names = _names(plan)
    assert names[:32] == [f"step-1000/__{r}_0.distcp" for r in range(32)]
    assert names[-1] == "step-1000/.metadata" and plan.file_count == 33
    sizes = [f.bytes for f in plan.manifest[:32]]
    assert max(sizes) - min(sizes) <= 1
    assert plan.operations.renames == 1


def test_megatron_torch_dist():
    plan = build_plan(
        arch=catalog.model("llama-3.1-70b"), model_name="x", framework="megatron", zero=1, gpus=64, tp=4, pp=2
    )
    names = _names(plan)
    assert len([n for n in names if n.endswith(".distcp")]) == 64
    assert {
        "iter_0001000/.metadata",
        "iter_0001000/common.pt",
        "iter_0001000/metadata.json",
        "latest_checkpointed_iteration.txt",
    } <= set(names)
    assert plan.bytes_per_parameter == pytest.approx(14)


def test_hf_shards_and_rng_files():
    plan = build_plan(arch=L8, model_name="x", framework="hf", zero=0, gpus=4)
    names = _names(plan)
    shards = [n for n in names if n.endswith(".safetensors")]
    # fp32 weights: 32.1 GB split at 5 GB -> 7 shards
    assert len(shards) == 7 and shards[0] == "checkpoint-1000/model-00001-of-00007.safetensors"
    assert all(f.bytes <= 5 * 10**9 + 10**6 for f in plan.manifest if f.path.endswith(".safetensors"))
    assert {f"checkpoint-1000/rng_state_{i}.pth" for i in range(4)} <= set(names)
    assert {
        "checkpoint-1000/optimizer.pt",
        "checkpoint-1000/model.safetensors.index.json",
        "checkpoint-1000/scheduler.pt",
        "checkpoint-1000/trainer_state.json",
        "checkpoint-1000/training_args.bin",
    } <= set(names)
    big = build_plan(
        arch=L8, model_name="x", framework="hf", zero=0, gpus=1, gpus_per_node=1, options={"hf_shard_size": "50GB"}
    )
    assert "checkpoint-1000/model.safetensors" in _names(big) and "checkpoint-1000/rng_state.pth" in _names(big)


def test_lightning_single_file():
    plan = build_plan(arch=L8, model_name="x", framework="lightning", zero=0, gpus=8)
    assert _names(plan) == ["checkpoints/epoch=0-step=1000.ckpt"]
    assert plan.writers == 1 and plan.bytes_per_parameter == pytest.approx(12)


def test_lightning_defaults_to_its_one_stage():
    """Lightning's layout has one stage (no sharding); without a stage it takes it, as hf takes 0."""
    plan = build_plan(arch=L8, model_name="x", framework="lightning", gpus=8)
    assert plan.setup.zero == 0 and _names(plan) == ["checkpoints/epoch=0-step=1000.ckpt"]


@pytest.mark.parametrize(
    "framework,zero,expected",
    [
        ("deepspeed", 0, 12),  # the client optimizer steps the module's parameters: no copy
        ("deepspeed", 1, 16),  # fp32 module weights + the ZeRO optimizer's fp32 partition + two moments
        ("deepspeed", 2, 16),
        ("deepspeed", 3, 12),  # the partition is the only copy of the weights it saves
        ("hf", 0, 12),
        ("hf", 2, 20),  # DeepSpeed's 16 and the fp32 model rank 0 gathers into safetensors
        ("megatron", 0, 12),
        ("megatron", 1, 16),  # the distributed optimizer's fp32_param beside the fp32 model weights
        ("dcp", 0, 12),
        ("dcp", 3, 12),
        ("lightning", 0, 12),
    ],
)
def test_adam_fp32_bytes_per_parameter_per_framework(framework, zero, expected):
    """fp32 Adam: torch's own optimizers keep no master, DeepSpeed's ZeRO optimizers do. Measured with DeepSpeed
    0.19.8 and transformers 5.25 on CPU (tests/test_framework_oracle.py): ZeRO-1/2's optimizer shards hold
    single_partition_of_fp32_groups and both moments, 12 B/param over the ranks, beside mp_rank_00's 4 B/param of
    fp32 module weights. Megatron's figure is read from megatron-core's source (it does not train on CPU)."""
    plan = build_plan(arch=L8, model_name="x", framework=framework, zero=zero, gpus=8, precision="fp32")
    assert plan.bytes_per_parameter == pytest.approx(expected)


def test_deepspeed_zero2_fp32_optimizer_shards_hold_the_master():
    """Each of 8 ranks' shards: 1/8 of the fp32 master and both moments, 12 B/param, plus torch.save's records."""
    plan = build_plan(arch=L8, model_name="x", framework="deepspeed", zero=2, gpus=8, precision="fp32")
    shards = [f for f in plan.manifest if f.path.endswith("_optim_states.pt")]
    assert [f.path.split("/")[1] for f in shards] == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(8)]
    assert sum(f.bytes for f in shards) == pytest.approx(12 * N8, rel=1e-6)
    assert "master_weights" in {s.name for s in plan.breakdown} and not plan.not_saved


def test_deepspeed_writes_both_recovery_scripts():
    """DeepSpeed 0.19.8's engine._copy_recovery_script copies utils/zero_to_fp32.py (38,580 bytes) and
    utils/zero_to_torch.py (2,490 bytes) beside `latest` at every ZeRO save, from rank 0; ZeRO-0 copies neither."""
    for framework, root in (("deepspeed", ""), ("hf", "checkpoint-1000/")):
        plan = build_plan(arch=L8, model_name="x", framework=framework, zero=2, gpus=8)
        scripts = {f.path: (f.bytes, f.rank) for f in plan.manifest if f.path.endswith(".py")}
        assert scripts == {f"{root}zero_to_fp32.py": (38_580, 0), f"{root}zero_to_torch.py": (2_490, 0)}
    assert not [f for f in build_plan(arch=L8, model_name="x", zero=0).manifest if f.path.endswith(".py")]


@pytest.mark.parametrize(
    "framework,kw,fragment",
    [
        ("hf", {"tp": 2}, "ddp"),
        ("lightning", {"tp": 2}, "ddp"),
        ("deepspeed", {"zero": 3, "pp": 2, "gpus": 16}, "pipeline"),
        ("deepspeed", {"gpus": 8, "tp": 3}, "divisible"),
        ("deepspeed", {"gpus": 12}, "whole number"),
        ("deepspeed", {"zero": 4}, "zero"),
    ],
)
def test_contradictory_parallelism(framework, kw, fragment):
    with pytest.raises(InputError, match=f"(?i){fragment}"):
        build_plan(arch=L8, model_name="x", framework=framework, **kw)


@pytest.mark.parametrize(
    "framework,zero,shown",
    [
        ("deepspeed", 0, " ZeRO-0"),
        ("deepspeed", 2, " ZeRO-2"),
        ("dcp", 3, " ZeRO-3"),
        ("megatron", 1, " ZeRO-1"),
        ("dlio", 3, " ZeRO-3"),
        ("hf", 0, ""),
        ("hf", 2, " ZeRO-2"),
        ("lightning", 0, ""),
    ],
)
def test_describe_names_the_zero_stage_where_the_framework_has_one(framework, zero, shown):
    """Each layout's shows_zero_stage: always, only a nonzero stage (HF Trainer under DeepSpeed), or never."""
    plan = build_plan(arch=L8, model_name="x", framework=framework, zero=zero, gpus=8)
    assert f"· {framework}{shown} ·" in plan.describe()


def test_params_only_scales_bytes_exactly():
    arch = nearest_shape(7e9, catalog.models())
    plan = build_plan(arch=arch, parameters=7_000_000_000)
    assert plan.state_bytes == pytest.approx(14 * 7e9, rel=1e-6)
    assert any("borrowed" in a for a in plan.assumptions)


def test_interval_demand():
    plan = build_plan(arch=L8, model_name="x", gpus=8, zero=1)
    d = interval_demand(plan, 600, 0.05)
    assert d.average_bandwidth_bytes_per_s == pytest.approx(plan.total_bytes / 600)
    assert d.burst_bandwidth_bytes_per_s == pytest.approx(plan.total_bytes / 30)
    assert d.naive_bandwidth_bytes_per_s == pytest.approx(8 * d.burst_bandwidth_bytes_per_s)
    assert d.iops_needed == pytest.approx(plan.operations.total / 30)
