"""What state a training run persists: weights, master copy, optimizer states.

One function, `state_breakdown`, owns the bytes-per-parameter arithmetic for
every optimizer × precision. Facts (see shared reference checkpoints.md):
- Mixed precision keeps half-precision weights plus an fp32 master copy; the
  optimizer states are fp32. Pure bf16 keeps bf16 weights and bf16 states.
- fp32 training keeps no master in torch's own optimizers (the module's fp32
  parameters are what they step), but DeepSpeed's ZeRO optimizers copy the
  weights into flat fp32 partitions even then (single_partition_of_fp32_groups
  at ZeRO-1/2, fp32_partitioned_groups_flat at ZeRO-3), so a framework that
  does says so (`fp32_master`) and gets an fp32 master beside its fp32 weights.
- Adam/AdamW: exp_avg and exp_avg_sq. SGD with momentum and Lion: one buffer.
- Adafactor (beta1=None): a row and a column factor for each 2-D tensor, a full
  second moment for 1-D tensors (Shazeer & Stern 2018; torch/transformers code).
- 8-bit Adam (bitsandbytes): 2 states of 1 byte plus an fp32 absmax per
  2048-value block; tensors under 4096 values keep fp32 states.
- Muon: one momentum buffer on 2-D hidden matrices, AdamW on embeddings, the
  output head and 1-D tensors (Keller Jordan's Muon; Moonlight).
Gradients are never saved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from ckplan.errors import InputError
from ckplan.model.architecture import Tensor
from ckplan.schema import Int, Model

Optimizer = Literal["adam", "adamw", "sgd", "sgd-momentum", "lion", "adafactor", "adam-8bit", "muon", "none"]
Precision = Literal["bf16-mixed", "fp16-mixed", "fp32", "bf16"]
OPTIMIZERS: tuple[str, ...] = Optimizer.__args__  # type: ignore[attr-defined]
PRECISIONS: tuple[str, ...] = Precision.__args__  # type: ignore[attr-defined]

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

BNB_BLOCK = 2048  # bitsandbytes blockwise quantisation block size
BNB_MIN_8BIT_NUMEL = 4096  # bitsandbytes keeps smaller tensors' states in fp32


class StateBytes(Model):
    """One persisted state: e.g. 'exp_avg' at fp32 holding 28.0 GB."""

    name: str
    kind: Literal["weights", "master", "optimizer"]
    dtype: str
    bytes: Int = Field(ge=0)  # bounded so that a hand-edited plan file is refused where it is read


def default_dtypes(precision: str, fp32_master: bool = False) -> dict[str, str | None]:
    """The dtype of the weights, the master copy (None: no master) and optimizer states. `fp32_master`: the
    framework's optimizer keeps an fp32 copy of its own when the weights are fp32 already (DeepSpeed ZeRO)."""
    return {
        "bf16-mixed": {"weights": "bf16", "master": "fp32", "optimizer": "fp32"},
        "fp16-mixed": {"weights": "fp16", "master": "fp32", "optimizer": "fp32"},
        "fp32": {"weights": "fp32", "master": "fp32" if fp32_master else None, "optimizer": "fp32"},
        "bf16": {"weights": "bf16", "master": None, "optimizer": "bf16"},
    }[precision]  # type: ignore[return-value]  # mypy joins the four literals' value types to object


def _numel(ts: Iterable[Tensor]) -> int:
    return sum(t.numel for t in ts)


def _optimizer_states(optimizer: str, ts: list[Tensor], size: int) -> list[tuple[str, int]]:
    """(state name, element count) pairs; `size` is the bytes of one element of a full state."""
    n = _numel(ts)
    if optimizer in ("adam", "adamw"):
        return [("exp_avg", n * size), ("exp_avg_sq", n * size)]
    if optimizer == "sgd-momentum":
        return [("momentum_buffer", n * size)]
    if optimizer == "lion":
        return [("exp_avg", n * size)]
    if optimizer in ("sgd", "none"):
        return []
    if optimizer == "adafactor":
        factored = sum((t.shape[0] + t.shape[1]) for t in ts if len(t.shape) == 2)
        full = _numel(t for t in ts if len(t.shape) != 2)
        return [("exp_avg_sq_factors", (factored + full) * size)]
    if optimizer == "adam-8bit":
        big = [t for t in ts if t.numel >= BNB_MIN_8BIT_NUMEL]
        small = _numel(t for t in ts if t.numel < BNB_MIN_8BIT_NUMEL)
        quantised = sum(t.numel + math.ceil(t.numel / BNB_BLOCK) * 4 for t in big)
        return [("state1", quantised + small * 4), ("state2", quantised + small * 4)]
    if optimizer == "muon":
        hidden = _numel(t for t in ts if t.role == "matrix")
        rest = n - hidden
        return [("muon_momentum", hidden * size), ("adamw_exp_avg", rest * size), ("adamw_exp_avg_sq", rest * size)]
    raise InputError(f"unknown optimizer {optimizer!r}")


def state_breakdown(
    tensors: list[Tensor],
    optimizer: str,
    precision: str,
    overrides: dict[str, str] | None = None,
    fp32_master: bool = False,
) -> list[StateBytes]:
    """Bytes of every state training holds for these tensors.

    `overrides` maps a state kind ('weights', 'master', 'optimizer') or a state
    name ('exp_avg_sq') to a dtype; 'master=none' drops the master copy.
    `fp32_master`: the framework keeps an fp32 master even in fp32 training (default_dtypes).
    """
    overrides = overrides or {}
    for key, value in overrides.items():
        if value != "none" and value not in DTYPE_BYTES:
            raise InputError(f"unknown dtype {value!r} for {key} (use {', '.join(DTYPE_BYTES)} or none)")
    dtypes = {
        **default_dtypes(precision, fp32_master),
        **{k: v for k, v in overrides.items() if k in ("weights", "master", "optimizer")},
    }
    n = _numel(tensors)
    weights, opt_dtype = dtypes["weights"], dtypes["optimizer"]
    assert weights is not None and opt_dtype is not None  # only the master copy may be absent
    out = [StateBytes(name="weights", kind="weights", dtype=weights, bytes=n * DTYPE_BYTES[weights])]
    master = dtypes["master"]
    if master is not None and master != "none":
        out.append(StateBytes(name="master_weights", kind="master", dtype=master, bytes=n * DTYPE_BYTES[master]))
    for name, nbytes in _optimizer_states(optimizer, tensors, DTYPE_BYTES[opt_dtype]):
        dtype = "int8+fp32 absmax" if optimizer == "adam-8bit" else opt_dtype
        if name in overrides and optimizer != "adam-8bit":
            nbytes = nbytes // DTYPE_BYTES[opt_dtype] * DTYPE_BYTES[overrides[name]]
            dtype = overrides[name]
        out.append(StateBytes(name=name, kind="optimizer", dtype=dtype, bytes=nbytes))
    known = {"weights", "master", "optimizer"} | {s.name for s in out}
    unknown = set(overrides) - known
    if unknown:
        raise InputError(
            f"‹dtype_overrides› names unknown state(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    return out
