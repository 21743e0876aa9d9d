"""Decoder-only transformer architectures and the tensors they hold.

The parameter count is derived from the config numbers, never typed in, so the
catalog can be checked against the published counts exactly. The tensor list
also drives optimizers whose state depends on tensor shapes (Adafactor, 8-bit
Adam, Muon) and the per-layer files of pipeline-parallel layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from ckplan.schema import Model

Role = Literal["embedding", "head", "matrix", "vector", "router"]


# Bounds on a model's config: far beyond any published model (the deepest have ~130 blocks, the widest mixtures
# 256 routed experts), and low enough that listing every tensor stays quick: a --model file with 1e8 layers took
# 2.1 GB within 30 s.
MAX_LAYERS = 10_000
MAX_EXPERTS = 65_536
MAX_EXPERT_LAYERS = 2**20  # layers × experts: the expert tensors are most of a mixture's list


class LatentAttention(Model):
    """DeepSeek's multi-head latent attention (MLA, DeepSeek-V2 §2.1): q and kv pass through low-rank projections.

    q_lora_rank 0 is a full-rank q projection (DeepSeek-V2-Lite). Each head's query and key have a part without
    rotary position (qk_nope_head_dim) and a rotary part (qk_rope_head_dim, shared by the heads for the key).
    """

    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(ge=0)
    qk_rope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(gt=0)


class Architecture(Model):
    """The config numbers of one model, as in its published config.json.

    The fields after `learned_positions` describe what the catalog's Llama-style models do not have; their
    defaults leave those models' tensors as they are.
    """

    name: str
    display: str
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0, le=MAX_LAYERS)
    ffn: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    experts: int = Field(default=1, gt=0, le=MAX_EXPERTS)
    mlp: Literal["gated", "plain"] = "gated"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    linear_bias: bool = False  # every linear layer has a bias (GPT-2/3 style)
    qkv_bias: bool = False  # only q, k, v have biases (Qwen2 style)
    learned_positions: int = 0  # rows of a learned position embedding; 0 for RoPE
    head_dim: int | None = Field(default=None, gt=0)  # None: hidden / heads (Gemma's is 256 at any width)
    fused_qkv: bool = False  # one q-k-v matrix (GPT-2 c_attn, GPT-NeoX and Falcon query_key_value)
    attn_out_bias: bool = False  # the attention output projection has a bias (Llama's attention_bias, GPT-NeoX)
    mlp_bias: bool = False  # the MLP's projections have biases (GPT-NeoX, Llama's mlp_bias)
    layer_norms: int = Field(default=2, ge=1, le=2)  # norms per block: 1 for Falcon-7B's parallel attention
    attention: LatentAttention | None = None  # DeepSeek MLA instead of q, k, v and o projections
    moe_ffn: int | None = Field(default=None, gt=0)  # each routed expert's MLP width; None: ffn
    shared_expert_ffn: int = Field(default=0, ge=0)  # width of the always-active shared expert MLP; 0: none
    shared_expert_gate: bool = False  # a (1, hidden) sigmoid gate on the shared expert (Qwen2-MoE)
    router_bias: bool = False  # a per-expert bias on the routing scores (DeepSeek-V3's e_score_correction_bias)
    dense_layers: list[int] = Field(default_factory=list)  # blocks with a dense MLP of width ffn in an MoE model
    published_parameters: int = Field(gt=0)
    published_rounding: int = Field(default=1, gt=0)  # 1 = the source gives an exact count
    source: str

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.layers * self.experts > MAX_EXPERT_LAYERS:
            raise ValueError(
                f"layers × experts is {self.layers * self.experts:,}, over {MAX_EXPERT_LAYERS:,}: ckplan lists every "
                "tensor of the model, and that many would take minutes and gigabytes"
            )
        moe = ("moe_ffn", "shared_expert_ffn", "shared_expert_gate", "router_bias", "dense_layers")
        if self.experts == 1 and any(getattr(self, f) for f in moe):
            given = [f for f in moe if getattr(self, f)]
            raise ValueError(f"{', '.join(given)} describe a mixture of experts, and experts is 1")
        if self.shared_expert_gate and not self.shared_expert_ffn:
            raise ValueError("shared_expert_gate needs a shared expert (shared_expert_ffn)")
        bad = [i for i in self.dense_layers if not 0 <= i < self.layers]
        if bad or len(set(self.dense_layers)) != len(self.dense_layers):
            raise ValueError(
                f"dense_layers must be distinct block indices below layers ({self.layers}), got {self.dense_layers}"
            )
        if self.attention is not None and self.fused_qkv:
            raise ValueError("fused_qkv does not apply to latent attention")
        return self


@dataclass(frozen=True, slots=True)
class Tensor:
    """One parameter tensor. `layer` is None for tensors outside the transformer blocks; `expert` is the expert
    index of a mixture-of-experts MLP tensor (None for every other tensor, the router included)."""

    name: str
    shape: tuple[int, ...]
    role: Role
    layer: int | None
    expert: int | None = None

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Modules:
    """The parameter tensors of one architecture's modules, by kind of module."""

    def __init__(self, arch: Architecture):
        self.arch, h = arch, arch.hidden
        self.h = h
        head_dim = arch.head_dim or h // arch.heads
        # without an explicit head_dim, q and o are hidden × hidden, as in every such config (DLIO's 1T has
        # hidden 25,872 over 192 heads, which does not divide: its q is still 25,872 wide)
        self.q, self.kv = (arch.heads * head_dim if arch.head_dim else h), arch.kv_heads * head_dim
        self.qkv_bias = arch.linear_bias or arch.qkv_bias
        self.out_bias = arch.linear_bias or arch.attn_out_bias
        self.mlp_bias = arch.linear_bias or arch.mlp_bias

    def norm(self, prefix: str, layer: int | None, width: int | None = None) -> list[Tensor]:
        width = self.h if width is None else width
        items = [Tensor(f"{prefix}.weight", (width,), "vector", layer)]
        if self.arch.norm == "layernorm":
            items.append(Tensor(f"{prefix}.bias", (width,), "vector", layer))
        return items

    @staticmethod
    def linear(name: str, rows: int, cols: int, layer: int, bias: bool, expert: int | None = None) -> list[Tensor]:
        items = [Tensor(f"{name}.weight", (rows, cols), "matrix", layer, expert)]
        if bias:
            items.append(Tensor(f"{name}.bias", (rows,), "vector", layer, expert))
        return items

    def mlp(self, prefix: str, width: int, layer: int, expert: int | None = None) -> list[Tensor]:
        h, bias, linear = self.h, self.mlp_bias, self.linear
        items = linear(f"{prefix}.gate_proj", width, h, layer, bias, expert) if self.arch.mlp == "gated" else []
        items += linear(f"{prefix}.up_proj", width, h, layer, bias, expert)
        return items + linear(f"{prefix}.down_proj", h, width, layer, bias, expert)

    def attention(self, p: str, i: int) -> list[Tensor]:
        arch, h, q, kv, linear = self.arch, self.h, self.q, self.kv, self.linear
        mla = arch.attention
        if mla is None:
            if arch.fused_qkv:
                items = linear(f"{p}.qkv_proj", q + 2 * kv, h, i, self.qkv_bias)
            else:
                items = [
                    t
                    for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv))
                    for t in linear(f"{p}.{proj}", rows, h, i, self.qkv_bias)
                ]
            return items + linear(f"{p}.o_proj", h, q, i, self.out_bias)
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            items = linear(f"{p}.q_a_proj", mla.q_lora_rank, h, i, self.qkv_bias)
            items += self.norm(f"{p}.q_a_layernorm", i, mla.q_lora_rank)
            items += linear(f"{p}.q_b_proj", arch.heads * qk_head, mla.q_lora_rank, i, False)
        else:
            items = linear(f"{p}.q_proj", arch.heads * qk_head, h, i, False)
        items += linear(f"{p}.kv_a_proj_with_mqa", mla.kv_lora_rank + mla.qk_rope_head_dim, h, i, self.qkv_bias)
        items += self.norm(f"{p}.kv_a_layernorm", i, mla.kv_lora_rank)
        items += linear(
            f"{p}.kv_b_proj", arch.heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, i, False
        )
        return items + linear(f"{p}.o_proj", h, arch.heads * mla.v_head_dim, i, self.out_bias)


def tensors(arch: Architecture) -> list[Tensor]:
    """Every parameter tensor, in module order (embedding, blocks, final norm, head).

    Names follow Llama's modules in Hugging Face transformers whatever the family (GPT-2's c_attn is qkv_proj here),
    so that layouts and optimizers see one naming: a routed expert's tensors sit under `mlp.experts.N.`, the router
    under `mlp.gate`, a shared expert under `mlp.shared_experts`.
    """
    h, m = arch.hidden, _Modules(arch)
    out: list[Tensor] = [Tensor("embed_tokens.weight", (arch.vocab, h), "embedding", None)]
    if arch.learned_positions:
        out.append(Tensor("embed_positions.weight", (arch.learned_positions, h), "embedding", None))
    dense = set(arch.dense_layers)
    for i in range(arch.layers):
        p = f"layers.{i}"
        out += m.norm(f"{p}.input_layernorm", i)
        out += m.attention(f"{p}.self_attn", i)
        if arch.layer_norms == 2:
            out += m.norm(f"{p}.post_attention_layernorm", i)
        if arch.experts == 1 or i in dense:
            out += m.mlp(f"{p}.mlp", arch.ffn, i)
            continue
        out.append(Tensor(f"{p}.mlp.gate.weight", (arch.experts, h), "router", i))
        if arch.router_bias:
            out.append(Tensor(f"{p}.mlp.gate.e_score_correction_bias", (arch.experts,), "router", i))
        for e in range(arch.experts):
            out += m.mlp(f"{p}.mlp.experts.{e}", arch.moe_ffn or arch.ffn, i, expert=e)
        if arch.shared_expert_ffn:  # shared experts are on every rank, like a dense MLP: no expert index
            out += m.mlp(f"{p}.mlp.shared_experts", arch.shared_expert_ffn, i)
        if arch.shared_expert_gate:
            out.append(Tensor(f"{p}.mlp.shared_expert_gate.weight", (1, h), "router", i))
    out += m.norm("norm", None)
    if not arch.tied_embeddings:
        out.append(Tensor("lm_head.weight", (arch.vocab, h), "head", None))
    return out


def parameter_count(arch: Architecture) -> int:
    return sum(t.numel for t in tensors(arch))
