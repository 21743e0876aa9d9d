"""Decoder-only transformer architectures and the tensors they hold.

The parameter count is derived from the config numbers, never typed in, so the
catalog can be checked against the published counts exactly. The tensor list
also drives optimizers whose state depends on tensor shapes (Adafactor, 8-bit
Adam, Muon) and the per-layer files of pipeline-parallel layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Role = Literal["embedding", "head", "matrix", "vector", "router"]


class Architecture(BaseModel):
    """The config numbers of one model, as in its published config.json."""

    name: str
    display: str
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    ffn: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    experts: int = Field(default=1, gt=0)
    mlp: Literal["gated", "plain"] = "gated"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    linear_bias: bool = False  # every linear layer has a bias (GPT-2/3 style)
    qkv_bias: bool = False  # only q, k, v have biases (Qwen2 style)
    learned_positions: int = 0  # rows of a learned position embedding; 0 for RoPE
    published_parameters: int = Field(gt=0)
    published_rounding: int = Field(default=1, gt=0)  # 1 = the source gives an exact count
    source: str


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


def tensors(arch: Architecture) -> list[Tensor]:
    """Every parameter tensor, in module order (embedding, blocks, final norm, head)."""
    h, head_dim = arch.hidden, arch.hidden // arch.heads
    kv = arch.kv_heads * head_dim
    out: list[Tensor] = [Tensor("embed_tokens.weight", (arch.vocab, h), "embedding", None)]
    if arch.learned_positions:
        out.append(Tensor("embed_positions.weight", (arch.learned_positions, h), "embedding", None))

    def norm(prefix: str, layer: int | None) -> list[Tensor]:
        items = [Tensor(f"{prefix}.weight", (h,), "vector", layer)]
        if arch.norm == "layernorm":
            items.append(Tensor(f"{prefix}.bias", (h,), "vector", layer))
        return items

    def linear(name: str, rows: int, cols: int, layer: int, bias: bool, expert: int | None = None) -> list[Tensor]:
        items = [Tensor(f"{name}.weight", (rows, cols), "matrix", layer, expert)]
        if bias:
            items.append(Tensor(f"{name}.bias", (rows,), "vector", layer, expert))
        return items

    for i in range(arch.layers):
        p = f"layers.{i}"
        out += norm(f"{p}.input_layernorm", i)
        for proj, rows in (("q_proj", h), ("k_proj", kv), ("v_proj", kv)):
            out += linear(f"{p}.self_attn.{proj}", rows, h, i, arch.linear_bias or arch.qkv_bias)
        out += linear(f"{p}.self_attn.o_proj", h, h, i, arch.linear_bias)
        out += norm(f"{p}.post_attention_layernorm", i)
        if arch.experts > 1:
            out.append(Tensor(f"{p}.mlp.gate.weight", (arch.experts, h), "router", i))
        for e in range(arch.experts):
            mp = f"{p}.mlp.experts.{e}" if arch.experts > 1 else f"{p}.mlp"
            expert = e if arch.experts > 1 else None
            if arch.mlp == "gated":
                out += linear(f"{mp}.gate_proj", arch.ffn, h, i, arch.linear_bias, expert)
            out += linear(f"{mp}.up_proj", arch.ffn, h, i, arch.linear_bias, expert)
            out += linear(f"{mp}.down_proj", h, arch.ffn, i, arch.linear_bias, expert)
    out += norm("norm", None)
    if not arch.tied_embeddings:
        out.append(Tensor("lm_head.weight", (arch.vocab, h), "head", None))
    return out


def parameter_count(arch: Architecture) -> int:
    return sum(t.numel for t in tensors(arch))
