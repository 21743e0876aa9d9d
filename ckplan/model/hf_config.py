"""A Hugging Face config.json as an Architecture: the exact tensors transformers builds from it, read without
transformers and without the network.

Pure: `architecture_from_config` takes the parsed document; the file is read at the edge (catalog.config_model).
Each family reads the fields its transformers model reads, with that model's defaults where the config class has
one that real configs leave out (num_key_value_heads, tie_word_embeddings, a bias flag); a size the model cannot be
built without is required, and its absence is one InputError naming it.

Not counted: buffers (rotary frequencies, GPT-2's causal mask) and DeepSeek-V3's multi-token-prediction layer
(num_nextn_predict_layers), which transformers does not load: the published 671B excludes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ckplan.errors import InputError, did_you_mean
from ckplan.model.architecture import Architecture, LatentAttention, parameter_count
from ckplan.units import MAX_PARAMETERS

# Bounds that keep the tensor list (one entry per tensor, experts × layers × 3 for a mixture of experts) small;
# the largest published models are far inside them (Llama 3.1 405B: 126 layers; DeepSeek-V3: 61 × 256 experts).
MAX_DIMENSION = 2**24
MAX_LAYERS = 1024
MAX_EXPERTS = 4096
MAX_EXPERT_BLOCKS = 131_072  # layers × experts

_REQUIRED = object()


class _Config:
    """Typed reads of one config.json, each refusal naming the field."""

    def __init__(self, data: Mapping[str, Any], label: str) -> None:
        self.data, self.label = data, label

    def _get(self, names: tuple[str, ...]) -> Any:
        for name in names:
            if self.data.get(name) is not None:
                return self.data[name]
        return None

    def integer(self, *names: str, default: Any = _REQUIRED, minimum: int = 1, maximum: int = MAX_DIMENSION) -> Any:
        """The first of `names` present (legacy spellings after the current one), as an integer in range."""
        value = self._get(names)
        if value is None:
            if default is _REQUIRED:
                raise InputError(f"{self.label} has no {names[0]}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{self.label}: {names[0]} must be an integer, got {value!r}")
        if not minimum <= value <= maximum:
            raise InputError(f"{self.label}: {names[0]} must be between {minimum:,} and {maximum:,}, got {value:,}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"{self.label}: {name} must be true or false, got {value!r}")
        return value

    def layer_list(self, name: str) -> list[int]:
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise InputError(f"{self.label}: {name} must be a list of layer indices, got {value!r}")
        return value

    def string(self, name: str, default: str) -> str:
        value = self.data.get(name)
        return value if isinstance(value, str) else default

    def common(self, tied: bool) -> dict[str, Any]:
        """The fields every Llama-style family spells the same way (transformers' LlamaConfig names)."""
        heads = self.integer("num_attention_heads")
        return dict(
            hidden=self.integer("hidden_size"),
            layers=self.integer("num_hidden_layers", maximum=MAX_LAYERS),
            ffn=self.integer("intermediate_size"),
            heads=heads,
            kv_heads=self.integer("num_key_value_heads", default=heads),
            vocab=self.integer("vocab_size"),
            head_dim=self.integer("head_dim", default=None),
            tied_embeddings=self.flag("tie_word_embeddings", tied),
        )


def _llama(c: _Config) -> dict[str, Any]:
    bias = c.flag("attention_bias", False)
    return c.common(tied=False) | dict(qkv_bias=bias, attn_out_bias=bias, mlp_bias=c.flag("mlp_bias", False))


def _mistral(c: _Config) -> dict[str, Any]:
    return c.common(tied=False)


def _mixtral(c: _Config) -> dict[str, Any]:
    return c.common(tied=False) | dict(experts=c.integer("num_local_experts", maximum=MAX_EXPERTS))


def _qwen2(c: _Config) -> dict[str, Any]:
    return c.common(tied=False) | dict(qkv_bias=True)  # Qwen2Attention: q, k and v with biases, o without


def _qwen2_moe(c: _Config) -> dict[str, Any]:
    fields = c.common(tied=False) | dict(qkv_bias=c.flag("qkv_bias", True))
    experts = c.integer("num_experts", maximum=MAX_EXPERTS, minimum=0)
    step = c.integer("decoder_sparse_step", default=1)
    only_mlp = set(c.layer_list("mlp_only_layers"))
    # Qwen2MoeDecoderLayer: sparse where the layer is not in mlp_only_layers, num_experts > 0 and (i + 1) % step == 0
    dense = [i for i in range(fields["layers"]) if i in only_mlp or not experts or (i + 1) % step]
    if len(dense) == fields["layers"]:
        return fields
    shared = c.integer("shared_expert_intermediate_size", minimum=0)
    return fields | dict(
        experts=experts,
        moe_ffn=c.integer("moe_intermediate_size"),
        shared_expert_ffn=shared,
        shared_expert_gate=bool(shared),
        dense_layers=dense,
    )


def _gemma(c: _Config) -> dict[str, Any]:
    bias = c.flag("attention_bias", False)
    fields = c.common(tied=True) | dict(head_dim=c.integer("head_dim"), qkv_bias=bias, attn_out_bias=bias)
    return fields


def _gpt_neox(c: _Config) -> dict[str, Any]:
    heads = c.integer("num_attention_heads")
    bias = c.flag("attention_bias", True)
    return dict(
        hidden=c.integer("hidden_size"),
        layers=c.integer("num_hidden_layers", maximum=MAX_LAYERS),
        ffn=c.integer("intermediate_size"),
        heads=heads,
        kv_heads=heads,
        vocab=c.integer("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", False),
        mlp="plain",
        norm="layernorm",
        fused_qkv=True,
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=True,
    )


def _gpt2(c: _Config) -> dict[str, Any]:
    hidden, heads = c.integer("n_embd", "hidden_size"), c.integer("n_head", "num_attention_heads")
    return dict(
        hidden=hidden,
        layers=c.integer("n_layer", "num_hidden_layers", maximum=MAX_LAYERS),
        ffn=c.integer("n_inner", default=4 * hidden),
        heads=heads,
        kv_heads=heads,
        vocab=c.integer("vocab_size"),
        learned_positions=c.integer("n_positions", "max_position_embeddings"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        mlp="plain",
        norm="layernorm",
        fused_qkv=True,
        linear_bias=True,
    )


def _falcon(c: _Config) -> dict[str, Any]:
    # FalconConfig / FalconAttention / FalconDecoderLayer; n_embed, n_layer, n_head and n_head_kv are the
    # RefinedWeb spellings FalconConfig still accepts
    hidden, heads = c.integer("hidden_size", "n_embed"), c.integer("num_attention_heads", "n_head")
    new_arch = c.flag("new_decoder_architecture", False)
    if new_arch:
        kv_heads = c.integer("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv_heads = 1 if c.flag("multi_query", True) else heads
    parallel = c.flag("parallel_attn", True)
    ln_in_parallel = c.integer("num_ln_in_parallel_attn", default=2 if new_arch else None)
    norms = 2 if not parallel or ln_in_parallel == 2 else 1
    return dict(
        hidden=hidden,
        layers=c.integer("num_hidden_layers", "n_layer", maximum=MAX_LAYERS),
        ffn=c.integer("ffn_hidden_size", default=4 * hidden),
        heads=heads,
        kv_heads=kv_heads,
        vocab=c.integer("vocab_size"),
        tied_embeddings=c.flag("tie_word_embeddings", True),
        mlp="plain",
        norm="layernorm",
        fused_qkv=True,
        linear_bias=c.flag("bias", False),
        layer_norms=norms,
    )


def _deepseek(version: int) -> Callable[[_Config], dict[str, Any]]:
    def read(c: _Config) -> dict[str, Any]:
        heads = c.integer("num_attention_heads")
        bias = c.flag("attention_bias", False)
        fields = dict(
            hidden=c.integer("hidden_size"),
            layers=c.integer("num_hidden_layers", maximum=MAX_LAYERS),
            ffn=c.integer("intermediate_size"),
            heads=heads,
            kv_heads=heads,
            vocab=c.integer("vocab_size"),
            tied_embeddings=c.flag("tie_word_embeddings", False),
            qkv_bias=bias,
            attn_out_bias=bias,
            attention=LatentAttention(
                q_lora_rank=c.integer("q_lora_rank", default=0, minimum=0),
                kv_lora_rank=c.integer("kv_lora_rank"),
                qk_nope_head_dim=c.integer("qk_nope_head_dim", minimum=0),
                qk_rope_head_dim=c.integer("qk_rope_head_dim", minimum=0),
                v_head_dim=c.integer("v_head_dim"),
            ),
        )
        experts = c.integer("n_routed_experts", default=0, minimum=0, maximum=MAX_EXPERTS)
        first_dense = c.integer("first_k_dense_replace", default=0, minimum=0)
        every = c.integer("moe_layer_freq", default=1)
        # DeepseekV2/V3DecoderLayer: a MoE block where n_routed_experts is set, i >= first_k_dense_replace and
        # i % moe_layer_freq == 0; a dense MLP of intermediate_size elsewhere
        dense = [i for i in range(fields["layers"]) if not experts or i < first_dense or i % every]
        if len(dense) == fields["layers"]:
            return fields
        # the router's score-correction bias exists for the aux-loss-free balancing (topk_method noaux_tc), V3's
        default_topk = "noaux_tc" if version == 3 else "greedy"
        shared = c.integer("n_shared_experts", default=0, minimum=0)
        moe_ffn = c.integer("moe_intermediate_size")
        return fields | dict(
            experts=experts,
            moe_ffn=moe_ffn,
            shared_expert_ffn=moe_ffn * shared,
            dense_layers=dense,
            router_bias=c.string("topk_method", default_topk) == "noaux_tc",
        )

    return read


FAMILIES: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "gemma": _gemma,
    "gpt_neox": _gpt_neox,
    "gpt2": _gpt2,
    "falcon": _falcon,
    "deepseek_v2": _deepseek(2),
    "deepseek_v3": _deepseek(3),
}


def architecture_from_config(config: Any, *, name: str, source: str, label: str = "config.json") -> Architecture:
    """The Architecture a config.json describes, its derived count as the published one. `label` names the
    document in messages (the file's path)."""
    if not isinstance(config, Mapping):
        raise InputError(
            f"{label} is not a Hugging Face config: a JSON object was expected, got {type(config).__name__}"
        )
    model_type = config.get("model_type")
    if model_type is None:
        raise InputError(f"{label} has no model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        known = did_you_mean(str(model_type), sorted(FAMILIES))
        raise InputError(f"{label}: model_type {model_type!r} is not one ckplan sizes{known}")
    try:
        fields = FAMILIES[model_type](_Config(config, label))
        if fields.get("experts", 1) * fields["layers"] > MAX_EXPERT_BLOCKS:
            raise InputError(
                f"{label}: {fields['experts']:,} experts in {fields['layers']:,} layers is more than ckplan "
                f"sizes ({MAX_EXPERT_BLOCKS:,} expert layers)"
            )
        arch = Architecture(name=name, display=name, published_parameters=1, source=source, **fields)
    except ValidationError as exc:  # a combination the fields' own checks let through (a dense layer out of range)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{label}: {where + ': ' if where else ''}{first['msg']}") from None
    count = parameter_count(arch)
    if count > MAX_PARAMETERS:
        raise InputError(f"{label} describes {count:,} parameters; ckplan sizes at most {MAX_PARAMETERS:,}")
    return arch.model_copy(update={"published_parameters": count})
