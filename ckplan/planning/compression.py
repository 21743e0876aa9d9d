"""Compression defaults for what-ifs: measured by `ckplan compress-test`, stored in profiles/compression.toml."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel


class CompressionDefault(BaseModel):
    codec: str
    ratio: float  # input bytes ÷ output bytes, on a mix of bf16 weights and fp32 optimizer state
    bytes_per_s_per_core: float  # compression throughput of one core
    measured: str  # where and when


@lru_cache(maxsize=1)
def compression_default() -> CompressionDefault:
    from ckplan import catalog
    data = catalog.load_toml(catalog.profiles_dir() / "compression.toml", "compression table")
    return CompressionDefault.model_validate(data["default"])
