"""Compression figures for what-ifs: measured by `ckplan compress-test`, stored in profiles/compression.toml
(loaded at the edge by `catalog.compression_default`)."""

from __future__ import annotations

from ckplan.schema import Model


class CompressionDefault(Model):
    codec: str
    ratio: float  # input bytes ÷ output bytes, on a mix of bf16 weights and fp32 optimizer state
    bytes_per_s_per_core: float  # compression throughput of one core
    measured: str  # where and when
