"""--config: a Hugging Face config.json read into an Architecture (model/hf_config.py, catalog.config_model).

Each config below is the published config.json of a real model (the architecture fields as its Hub repository
gives them; tokenizer ids, dropout and rope settings kept where they were, since a reader must ignore them), written
to disk by the test and read back through the same path `--config` takes. The count is asserted against a published
figure, cited per model, and against ckplan's own catalog where the model is in both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckplan import catalog
from ckplan.errors import InputError
from ckplan.model.architecture import parameter_count, tensors
from ckplan.model.hf_config import FAMILIES, architecture_from_config
from tests.conftest import assert_one_line_error, run_cli, run_json

LLAMA_31_8B = {  # meta-llama/Llama-3.1-8B config.json
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
LLAMA_2_7B = {  # meta-llama/Llama-2-7b-hf config.json (no num_key_value_heads in the first release: MHA)
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.31.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}
MISTRAL_7B = {  # mistralai/Mistral-7B-v0.1 config.json
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1 config.json
    "architectures": ["MixtralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}
QWEN25_7B = {  # Qwen/Qwen2.5-7B config.json
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
}
QWEN25_05B = {  # Qwen/Qwen2.5-0.5B config.json: tied embeddings
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B config.json
    "architectures": ["Qwen2MoeForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5632,
    "max_position_embeddings": 8192,
    "max_window_layers": 21,
    "model_type": "qwen2_moe",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.39.0.dev0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts_per_tok": 4,
    "num_experts": 60,
    "norm_topk_prob": False,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
}
GEMMA_7B = {  # google/gemma-7b config.json: head_dim 256 with 16 heads of a 3072 model; embeddings shared
    "architectures": ["GemmaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 24576,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0.dev0",
    "use_cache": True,
    "vocab_size": 256000,
}
GEMMA_2B = {  # google/gemma-2b config.json: multi-query (1 kv head), head_dim 256 with 8 heads of a 2048 model
    "architectures": ["GemmaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 16384,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 8,
    "num_hidden_layers": 18,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.38.0.dev0",
    "use_cache": True,
    "vocab_size": 256000,
}
PYTHIA_160M = {  # EleutherAI/pythia-160m config.json
    "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.24.0",
    "use_cache": True,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}
PYTHIA_410M = {
    **PYTHIA_160M,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
}  # EleutherAI/pythia-410m config.json: the same fields at 410M's sizes
GPT2 = {  # openai-community/gpt2 config.json (GPT-2's own field names: n_embd, n_layer, n_head, n_positions)
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}
GPT2_MEDIUM = {**GPT2, "n_embd": 1024, "n_head": 16, "n_layer": 24}  # openai-community/gpt2-medium config.json
FALCON_RW_1B = {  # tiiuae/falcon-rw-1b config.json: ALiBi, sequential attention and MLP, biases, multi-head
    "alibi": True,
    "apply_residual_connection_post_layernorm": False,
    "architectures": ["FalconForCausalLM"],
    "attention_dropout": 0.0,
    "bias": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_dropout": 0.0,
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "falcon",
    "multi_query": False,
    "new_decoder_architecture": False,
    "num_attention_heads": 32,
    "num_hidden_layers": 24,
    "parallel_attn": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.27.4",
    "use_cache": True,
    "vocab_size": 50304,
}
FALCON_7B = {  # tiiuae/falcon-7b config.json: multi-query, parallel attention and MLP under one layer norm
    "alibi": False,
    "apply_residual_connection_post_layernorm": False,
    "architectures": ["FalconForCausalLM"],
    "attention_dropout": 0.0,
    "bias": False,
    "bos_token_id": 11,
    "eos_token_id": 11,
    "hidden_dropout": 0.0,
    "hidden_size": 4544,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "falcon",
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.27.4",
    "use_cache": True,
    "vocab_size": 65024,
}
FALCON_40B = {  # tiiuae/falcon-40b config.json: new_decoder_architecture, 8 kv heads, ln_attn and ln_mlp
    "alibi": False,
    "apply_residual_connection_post_layernorm": False,
    "architectures": ["FalconForCausalLM"],
    "attention_dropout": 0.0,
    "bias": False,
    "bos_token_id": 11,
    "eos_token_id": 11,
    "hidden_dropout": 0.0,
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "falcon",
    "new_decoder_architecture": True,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_kv_heads": 8,
    "parallel_attn": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.27.4",
    "use_cache": True,
    "vocab_size": 65024,
}
DEEPSEEK_V2_LITE = {  # deepseek-ai/DeepSeek-V2-Lite config.json: MLA without a q LoRA, 1 dense layer, 64 + 2 experts
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001,
    "bos_token_id": 100000,
    "eos_token_id": 100001,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_group": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "pretraining_tp": 1,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 1.0,
    "scoring_func": "softmax",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 1,
    "topk_method": "greedy",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 102400,
}
DEEPSEEK_V2 = {  # deepseek-ai/DeepSeek-V2 config.json: q LoRA rank 1536, 160 + 2 experts
    **DEEPSEEK_V2_LITE,
    "hidden_size": 5120,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_group": 8,
    "n_routed_experts": 160,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "routed_scaling_factor": 16.0,
    "topk_group": 3,
    "topk_method": "group_limited_greedy",
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "transformers_version": "4.39.3",
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json: 3 dense layers, 256 + 1 experts, the router's correction bias
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


def write_config(tmp_path: Path, repo: str, config: dict) -> Path:
    """The config where a download puts it: <model folder>/config.json."""
    path = tmp_path / repo.replace("/", "--") / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config, indent=2))
    return path


def count(tmp_path: Path, repo: str, config: dict) -> int:
    return parameter_count(catalog.config_model(write_config(tmp_path, repo, config)))


# --- the families, each against a published count ---------------------------------------------------------------


@pytest.mark.parametrize(
    "repo,config,name",
    [
        ("meta-llama/Llama-3.1-8B", LLAMA_31_8B, "llama-3.1-8b"),
        ("meta-llama/Llama-2-7b-hf", LLAMA_2_7B, "llama-2-7b"),
        ("mistralai/Mistral-7B-v0.1", MISTRAL_7B, "mistral-7b"),
        ("mistralai/Mixtral-8x7B-v0.1", MIXTRAL_8X7B, "mixtral-8x7b"),
        ("Qwen/Qwen2.5-7B", QWEN25_7B, "qwen2.5-7b"),
    ],
)
def test_catalog_models_from_their_config(tmp_path, repo, config, name):
    """The llama, mistral, mixtral and qwen2 families: the config gives the catalog's model, tensor for tensor, and
    the catalog's count is its published one (profiles/models/*.toml cite the safetensors metadata: Llama-3.1-8B
    8,030,261,248; Llama-2-7B 6,738,415,616; Mistral-7B 7,241,732,096; Mixtral-8x7B 46,702,792,704; Qwen2.5-7B
    7,615,616,512)."""
    arch = catalog.config_model(write_config(tmp_path, repo, config))
    listed = catalog.model(name)
    assert parameter_count(arch) == parameter_count(listed) == listed.published_parameters
    assert tensors(arch) == tensors(listed)


def test_qwen2_tied_embeddings(tmp_path):
    """Qwen/Qwen2.5-0.5B ties its embeddings: its model.safetensors header holds 290 tensors, 494,032,768
    parameters (BF16), with no lm_head (model card: 0.49B)."""
    arch = catalog.config_model(write_config(tmp_path, "Qwen/Qwen2.5-0.5B", QWEN25_05B))
    assert parameter_count(arch) == 494_032_768
    assert len(tensors(arch)) == 290
    assert not any(t.role == "head" for t in tensors(arch))


def test_qwen2_moe_shared_expert_and_router(tmp_path):
    """Qwen/Qwen1.5-MoE-A2.7B: 14,315,784,192 parameters (KerasHub's qwen1.5_moe_2.7b_en preset metadata; model
    card 14.3B). Each layer has 60 experts of width 1408, a shared expert of width 5632 and its (1, 2048) gate."""
    arch = catalog.config_model(write_config(tmp_path, "Qwen/Qwen1.5-MoE-A2.7B", QWEN15_MOE))
    assert parameter_count(arch) == 14_315_784_192
    layer0 = {t.name: t.shape for t in tensors(arch) if t.layer == 0}
    assert layer0["layers.0.mlp.gate.weight"] == (60, 2048)
    assert layer0["layers.0.mlp.experts.59.down_proj.weight"] == (2048, 1408)
    assert layer0["layers.0.mlp.shared_experts.up_proj.weight"] == (5632, 2048)
    assert layer0["layers.0.mlp.shared_expert_gate.weight"] == (1, 2048)
    assert layer0["layers.0.self_attn.q_proj.bias"] == (2048,)


def test_qwen2_moe_dense_layers(tmp_path):
    """Qwen2MoeDecoderLayer: mlp_only_layers and decoder_sparse_step make a layer dense (intermediate_size)."""
    arch = architecture_from_config(
        {**QWEN15_MOE, "decoder_sparse_step": 2, "mlp_only_layers": [1]}, name="x", source="x"
    )
    assert arch.dense_layers == [0, 1] + list(range(2, 24, 2))
    dense = architecture_from_config({**QWEN15_MOE, "num_experts": 0}, name="x", source="x")
    assert dense.experts == 1 and not dense.shared_expert_ffn


@pytest.mark.parametrize(
    "repo,config,published",
    [
        ("google/gemma-7b", GEMMA_7B, 8_537_680_896),
        ("google/gemma-2b", GEMMA_2B, 2_506_172_416),
    ],
)
def test_gemma_head_dim_and_shared_embedding(tmp_path, repo, config, published):
    """Gemma: 8,537,680,896 (gemma-7b) and 2,506,172,416 (gemma-2b), KerasHub's gemma_7b_en and gemma_2b_en preset
    metadata (model cards: 8.54B, 2.51B). head_dim 256 is not hidden / heads; the embedding is the output head."""
    arch = catalog.config_model(write_config(tmp_path, repo, config))
    assert parameter_count(arch) == published
    shapes = {t.name: t.shape for t in tensors(arch)}
    heads, kv, hidden = config["num_attention_heads"], config["num_key_value_heads"], config["hidden_size"]
    assert shapes["layers.0.self_attn.q_proj.weight"] == (heads * 256, hidden)
    assert shapes["layers.0.self_attn.k_proj.weight"] == (kv * 256, hidden)
    assert shapes["layers.0.self_attn.o_proj.weight"] == (hidden, heads * 256)
    assert "lm_head.weight" not in shapes


@pytest.mark.parametrize(
    "repo,config,published",
    [
        ("EleutherAI/pythia-160m", PYTHIA_160M, 162_322_944),
        ("EleutherAI/pythia-410m", PYTHIA_410M, 405_334_016),
    ],
)
def test_gpt_neox(tmp_path, repo, config, published):
    """GPT-NeoX (Pythia): Biderman et al. 2023, Pythia, Table 1 and the model cards: 162,322,944 and 405,334,016
    parameters. A fused query_key_value with bias, biased dense and MLP layers, two biased LayerNorms per block,
    untied embed_in and embed_out; rotary embeddings hold no parameters."""
    arch = catalog.config_model(write_config(tmp_path, repo, config))
    assert parameter_count(arch) == published
    shapes = {t.name: t.shape for t in tensors(arch)}
    h = config["hidden_size"]
    assert shapes["layers.0.self_attn.qkv_proj.weight"] == (3 * h, h)
    assert shapes["layers.0.self_attn.qkv_proj.bias"] == (3 * h,)
    assert shapes["layers.0.mlp.down_proj.bias"] == (h,)
    assert shapes["lm_head.weight"] == (50304, h)


@pytest.mark.parametrize(
    "repo,config,published",
    [
        ("openai-community/gpt2", GPT2, 124_439_808),
        ("openai-community/gpt2-medium", GPT2_MEDIUM, 354_823_168),
    ],
)
def test_gpt2(tmp_path, repo, config, published):
    """GPT-2: 124,439,808 and 354,823,168 parameters (KerasHub's gpt2_base_en and gpt2_medium_en preset metadata;
    the model card's 124M). Learned positions (n_positions rows), biases everywhere, tied embeddings; the causal
    mask buffer (attn.bias in old checkpoints) is not a parameter."""
    arch = catalog.config_model(write_config(tmp_path, repo, config))
    assert parameter_count(arch) == published
    shapes = {t.name: t.shape for t in tensors(arch)}
    assert shapes["embed_positions.weight"] == (1024, config["n_embd"])
    assert "lm_head.weight" not in shapes


def test_falcon_rw_exact(tmp_path):
    """tiiuae/falcon-rw-1b: 1,311,625,216 parameters (KerasHub's falcon_refinedweb_1b_en preset metadata). Not
    parallel: input and post-attention LayerNorms; multi_query false: a full 3 × hidden query_key_value; bias true."""
    arch = catalog.config_model(write_config(tmp_path, "tiiuae/falcon-rw-1b", FALCON_RW_1B))
    assert parameter_count(arch) == 1_311_625_216
    shapes = {t.name: t.shape for t in tensors(arch)}
    assert shapes["layers.0.self_attn.qkv_proj.weight"] == (3 * 2048, 2048)
    assert "layers.0.post_attention_layernorm.bias" in shapes


def test_falcon_multi_query_and_new_decoder_architecture(tmp_path):
    """Falcon-7B (model card: 7B) and Falcon-40B (40B) publish rounded counts only; the shapes are
    transformers' FalconAttention and FalconDecoderLayer: multi_query gives hidden + 2 × head_dim q-k-v rows and,
    with parallel_attn, one LayerNorm per block; new_decoder_architecture gives (heads + 2 × num_kv_heads) ×
    head_dim rows and two LayerNorms (ln_attn, ln_mlp)."""
    f7 = catalog.config_model(write_config(tmp_path, "tiiuae/falcon-7b", FALCON_7B))
    shapes = {t.name: t.shape for t in tensors(f7)}
    assert shapes["layers.0.self_attn.qkv_proj.weight"] == (4544 + 2 * 64, 4544)
    assert "layers.0.post_attention_layernorm.weight" not in shapes and "lm_head.weight" not in shapes
    assert abs(parameter_count(f7) - 7e9) < 0.5e9
    assert parameter_count(f7) == 6_921_720_704  # 65024 × 4544 + 32 × 207,070,080 + 2 × 4544, by hand
    f40 = catalog.config_model(write_config(tmp_path, "tiiuae/falcon-40b", FALCON_40B))
    shapes = {t.name: t.shape for t in tensors(f40)}
    assert shapes["layers.0.self_attn.qkv_proj.weight"] == ((128 + 2 * 8) * 64, 8192)
    assert "layers.0.post_attention_layernorm.weight" in shapes  # the second of the block's two norms
    assert round(parameter_count(f40) / 1e9) == 41  # the model card's "40B" is a name, the count 41.3B


def test_deepseek_v2_latent_attention(tmp_path):
    """DeepSeek-V2-Lite: 15,706,484,224 and DeepSeek-V2: 235,741,434,880 parameters, the Hugging Face Hub's
    safetensors totals of deepseek-ai/DeepSeek-V2-Lite and deepseek-ai/DeepSeek-V2 (model cards: 15.7B, 236B).
    MLA: kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, with q_a/q_b projections where q_lora_rank is set; the
    first first_k_dense_replace layers have a dense MLP; shared experts are one MLP n_shared_experts times wide."""
    lite = catalog.config_model(write_config(tmp_path, "deepseek-ai/DeepSeek-V2-Lite", DEEPSEEK_V2_LITE))
    assert parameter_count(lite) == 15_706_484_224
    shapes = {t.name: t.shape for t in tensors(lite)}
    assert shapes["layers.0.self_attn.q_proj.weight"] == (16 * 192, 2048)
    assert shapes["layers.0.self_attn.kv_a_proj_with_mqa.weight"] == (512 + 64, 2048)
    assert shapes["layers.0.self_attn.kv_b_proj.weight"] == (16 * 256, 512)
    assert shapes["layers.0.mlp.down_proj.weight"] == (2048, 10944)
    assert shapes["layers.1.mlp.shared_experts.gate_proj.weight"] == (2 * 1408, 2048)
    assert "layers.1.mlp.gate.e_score_correction_bias" not in shapes
    full = catalog.config_model(write_config(tmp_path, "deepseek-ai/DeepSeek-V2", DEEPSEEK_V2))
    assert parameter_count(full) == 235_741_434_880
    shapes = {t.name: t.shape for t in tensors(full)}
    assert shapes["layers.0.self_attn.q_a_proj.weight"] == (1536, 5120)
    assert shapes["layers.0.self_attn.q_a_layernorm.weight"] == (1536,)
    assert shapes["layers.0.self_attn.q_b_proj.weight"] == (128 * 192, 1536)


def test_deepseek_v3(tmp_path):
    """DeepSeek-V3: 671B parameters in the main model (technical report, arXiv 2412.19437; the 14B multi-token
    prediction module is apart), exactly 671,026,419,200: the Hub's safetensors total of microsoft/MAI-DS-R1, the
    DeepSeek-R1 weights (DeepSeek-V3's architecture) in BF16 without the MTP layer. Three dense layers, then
    256 routed experts, one shared, and the router's e_score_correction_bias (topk_method noaux_tc)."""
    arch = catalog.config_model(write_config(tmp_path, "deepseek-ai/DeepSeek-V3", DEEPSEEK_V3))
    assert parameter_count(arch) == 671_026_419_200
    assert arch.dense_layers == [0, 1, 2] and arch.experts == 256
    shapes = {t.name: t.shape for t in tensors(arch)}
    assert shapes["layers.3.mlp.gate.e_score_correction_bias"] == (256,)
    assert "layers.61.input_layernorm.weight" not in shapes  # the MTP layer is not loaded by transformers
    assert "layers.2.mlp.gate.weight" not in shapes and shapes["layers.2.mlp.up_proj.weight"] == (18432, 7168)


def test_every_family_is_covered():
    assert set(FAMILIES) == {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "gemma",
        "gpt_neox",
        "gpt2",
        "falcon",
        "deepseek_v2",
        "deepseek_v3",
    }


def test_name_comes_from_the_config_or_its_folder(tmp_path):
    assert catalog.config_model(write_config(tmp_path, "Qwen/Qwen2.5-7B", QWEN25_7B)).name == "Qwen--Qwen2.5-7B"
    named = {**QWEN25_7B, "_name_or_path": "Qwen/Qwen2.5-7B"}
    assert catalog.config_model(write_config(tmp_path, "elsewhere", named)).name == "Qwen/Qwen2.5-7B"
    other = tmp_path / "my-model.json"
    other.write_text(json.dumps(QWEN25_7B))
    assert catalog.config_model(other).name == "my-model"


# --- refusals: one line naming the field -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config,message",
    [
        ({**MISTRAL_7B, "model_type": "bert"}, "model_type 'bert' is not one ckplan sizes"),
        ({**MISTRAL_7B, "model_type": "mistrall"}, "did you mean mistral"),
        ({k: v for k, v in MISTRAL_7B.items() if k != "model_type"}, "config.json has no model_type"),
        ({k: v for k, v in MISTRAL_7B.items() if k != "num_hidden_layers"}, "config.json has no num_hidden_layers"),
        ({k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"}, "config.json has no num_local_experts"),
        ({k: v for k, v in GEMMA_7B.items() if k != "head_dim"}, "config.json has no head_dim"),
        ({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}, "config.json has no kv_lora_rank"),
        ({k: v for k, v in GPT2.items() if k != "n_embd"}, "config.json has no n_embd"),
        ({**MISTRAL_7B, "hidden_size": "4096"}, "config.json: hidden_size must be an integer, got '4096'"),
        ({**MISTRAL_7B, "hidden_size": 0}, "config.json: hidden_size must be between 1 and"),
        ({**MISTRAL_7B, "num_hidden_layers": 10**6}, "num_hidden_layers must be between 1 and 1,024"),
        ({**MISTRAL_7B, "tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        ({**QWEN15_MOE, "mlp_only_layers": "all"}, "mlp_only_layers must be a list of layer indices"),
        ({**DEEPSEEK_V3, "n_routed_experts": 4096, "num_hidden_layers": 1000}, "is more than ckplan sizes"),
        ([1, 2], "a JSON object was expected, got list"),
    ],
)
def test_bad_config_is_one_input_error(config, message):
    with pytest.raises(InputError) as exc:
        architecture_from_config(config, name="x", source="x")
    assert message in str(exc.value) and "\n" not in str(exc.value)


# --- the CLI, end to end -----------------------------------------------------------------------------------------


def test_size_config_json(tmp_path):
    path = write_config(tmp_path, "mistralai/Mixtral-8x7B-v0.1", MIXTRAL_8X7B)
    plan = run_json("size", "--config", str(path), "--gpus", "16")
    assert plan["parameters"] == 46_702_792_704
    assert plan["setup"]["model"] == "mistralai--Mixtral-8x7B-v0.1"
    assert f"derived from its config ({path}, model_type mixtral)" in plan["assumptions"][0]
    same = run_json("size", "--model", "mixtral-8x7b", "--gpus", "16")
    assert plan["total_bytes"] == same["total_bytes"] and plan["file_count"] == same["file_count"]


def test_recommend_takes_config(tmp_path):
    path = write_config(tmp_path, "google/gemma-2b", GEMMA_2B)
    result = run_json("recommend", "--config", str(path), "--storage", "nfs")
    assert result["plan"].startswith("google--gemma-2b (2,506,172,416 params)")


@pytest.mark.parametrize(
    "edit,fragment",
    [
        (lambda c: {**c, "model_type": "t5"}, "model_type 't5' is not one ckplan sizes"),
        (lambda c: {k: v for k, v in c.items() if k != "vocab_size"}, "has no vocab_size"),
    ],
)
def test_bad_config_cli_is_one_line(tmp_path, edit, fragment):
    path = write_config(tmp_path, "bad", edit(LLAMA_31_8B))
    proc = run_cli("size", "--config", str(path), "--json")
    assert_one_line_error(proc, fragment)
    assert str(path) in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    "extra,fragment",
    [
        (["--params", "7B"], "give one of --params, --model or --config, not both (got --params and --config)"),
        (["--model", "llama-2-7b"], "not both (got --model and --config)"),
    ],
)
def test_config_excludes_params_and_model(tmp_path, extra, fragment):
    path = write_config(tmp_path, "m", LLAMA_31_8B)
    assert_one_line_error(run_cli("size", "--config", str(path), *extra, "--json"), fragment)


def test_config_excludes_plan(tmp_path):
    path = write_config(tmp_path, "m", LLAMA_31_8B)
    plan = tmp_path / "plan.json"
    plan.write_text(run_cli("size", "--config", str(path), "--json", check=True).stdout)
    assert_one_line_error(
        run_cli("recommend", "--plan", str(plan), "--config", str(path), "--json"),
        "give --plan or the plan flags, not both (got --plan and --config)",
    )
