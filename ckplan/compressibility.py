"""Measure lossless codecs on real tensor bytes (`ckplan compress-test`): ratio and per-core speed.

Data is either a file the user points at, or generated tensors that mimic a
mixed-precision Adam checkpoint: bf16 weights and fp32 master weights drawn
from N(0, 0.02), exp_avg from N(0, 1e-3), exp_avg_sq as its square plus
noise. Each codec is timed on one core. 'bytegroup' first splits every value
into its byte planes (sign/exponent bytes together), which helps zstd on floats.
"""

from __future__ import annotations

import time
from pathlib import Path

from ckplan.errors import InputError, missing_extra
from ckplan.schema import Model

SAMPLE_BYTES = 32 * 2**20
# Byte share of each state in a 14 B/param bf16-mixed Adam save (weights 2, master 4, moments 4 + 4).
MIX = {"bf16 weights": 2 / 14, "fp32 master weights": 4 / 14, "fp32 exp_avg": 4 / 14, "fp32 exp_avg_sq": 4 / 14}


class CodecResult(Model):
    codec: str
    data: str
    ratio: float
    bytes_per_s_per_core: float


class CompressReport(Model):
    kind: str = "ckplan.compress-test"
    source: str
    sample_bytes: int
    results: list[CodecResult]
    mix_ratio: dict[str, float]  # codec -> ratio on the 14 B/param mix
    mix_bytes_per_s_per_core: dict[str, float]
    recommended: str


def _generated(n_bytes: int) -> dict[str, tuple[bytes, int]]:
    try:
        import numpy as np
    except ImportError:
        raise missing_extra("compress-test's generated tensors", "numpy", "compress") from None

    rng = np.random.default_rng(0)
    n = n_bytes // 4
    master = rng.normal(0, 0.02, n).astype(np.float32)
    bf16 = (master.view(np.uint32) >> 16).astype(np.uint16)[: n_bytes // 2]
    exp_avg = rng.normal(0, 1e-3, n).astype(np.float32)
    exp_avg_sq = (exp_avg.astype(np.float64) ** 2 * rng.uniform(0.5, 1.5, n) + 1e-12).astype(np.float32)
    return {
        "bf16 weights": (bf16.tobytes(), 2),
        "fp32 master weights": (master.tobytes(), 4),
        "fp32 exp_avg": (exp_avg.tobytes(), 4),
        "fp32 exp_avg_sq": (exp_avg_sq.tobytes(), 4),
    }


def _bytegroup(data: bytes, width: int) -> bytes:
    usable = len(data) - len(data) % width
    return b"".join(data[i:usable:width] for i in range(width)) + data[usable:]


def _codecs() -> dict:
    try:
        import lz4.frame
        import zstandard
    except ImportError:
        raise missing_extra("compress-test", "zstandard and lz4", "compress") from None
    z1, z3 = zstandard.ZstdCompressor(level=1), zstandard.ZstdCompressor(level=3)
    return {
        "lz4": lambda d, w: lz4.frame.compress(d, compression_level=0),
        "zstd-1": lambda d, w: z1.compress(d),
        "zstd-3": lambda d, w: z3.compress(d),
        "zstd-1+bytegroup": lambda d, w: z1.compress(_bytegroup(d, w)),
    }


def measure_compressibility(path: Path | None = None, sample_bytes: int = SAMPLE_BYTES) -> CompressReport:
    if path is not None:
        from ckplan.readers import check_regular_file

        check_regular_file(path, "--file")  # only a sample is read, but a FIFO would block and a device never end
        try:
            with open(path, "rb") as f:
                data = {path.name: (f.read(sample_bytes), 2 if "bf16" in path.name else 4)}
        except OSError as exc:
            raise InputError(f"cannot read ‹file› {path}: {exc.strerror}") from None
        if not data[path.name][0]:
            raise InputError(f"‹file› {path} is empty")
        source = str(path)
    else:
        data = _generated(sample_bytes)
        source = "generated bf16-mixed Adam state (N(0, 0.02) weights)"
    results = []
    for codec, fn in _codecs().items():
        for name, (blob, width) in data.items():
            fn(blob[: 2**20], width)  # warm up
            start = time.process_time()
            out = fn(blob, width)
            cpu = max(time.process_time() - start, 1e-9)
            results.append(
                CodecResult(codec=codec, data=name, ratio=len(blob) / len(out), bytes_per_s_per_core=len(blob) / cpu)
            )
    mix_ratio, mix_speed = {}, {}
    weights = MIX if path is None else {path.name: 1.0}
    for codec in _codecs():
        rows = {r.data: r for r in results if r.codec == codec}
        out_share = sum(w / rows[d].ratio for d, w in weights.items())
        mix_ratio[codec] = 1 / out_share
        mix_speed[codec] = 1 / sum(w / rows[d].bytes_per_s_per_core for d, w in weights.items())
    fast_enough = [c for c in mix_ratio if mix_speed[c] >= 200e6] or list(mix_ratio)
    best = max(fast_enough, key=lambda c: mix_ratio[c])
    return CompressReport(
        source=source,
        sample_bytes=sum(len(b) for b, _ in data.values()),
        results=results,
        mix_ratio=mix_ratio,
        mix_bytes_per_s_per_core=mix_speed,
        recommended=best,
    )
