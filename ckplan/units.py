"""Parse and format sizes, counts, rates, durations and percentages.

Inside ckplan everything is bytes, seconds and plain counts. These helpers are
the only place where text becomes a number or a number becomes text.
"""

from __future__ import annotations

import math
import re

from ckplan.errors import InputError

GB = 10**9
GiB = 2**30

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

_COUNT_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_BYTE_SUFFIX = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,  # fio's convention: bare letters are binary
}
_DURATION_SUFFIX = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "m": 60, "min": 60, "h": 3600, "d": 86400}


def _split(text: str, what: str) -> tuple[float, str]:
    match = re.fullmatch(_NUMBER + r"\s*([a-zA-Z/]*)", str(text).strip())
    if not match:
        raise InputError(f"not a valid {what}: {text!r}")
    return float(match.group(1)), match.group(2).lower()


def _positive(value: float, text: str, what: str, allow_zero: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{what} must be {'≥ 0' if allow_zero else '> 0'}: {text!r}")
    return value


def parse_count(text: str | float, what: str = "count") -> float:
    """'7e9', '7B', '70b', '1.5T', '500M' -> a plain number (B means billion here)."""
    if isinstance(text, (int, float)):
        return _positive(float(text), str(text), what, allow_zero=False)
    if str(text).strip().startswith("-"):
        raise InputError(f"{what} must be > 0: {text!r}")
    value, suffix = _split(text, what)
    if suffix not in _COUNT_SUFFIX:
        raise InputError(f"unknown suffix {suffix!r} in {what} {text!r} (use k, M, B or T)")
    return _positive(value * _COUNT_SUFFIX[suffix], text, what, allow_zero=False)


def parse_bytes(text: str | float, what: str = "size", allow_zero: bool = False) -> int:
    """'30GB' (10^9), '30GiB' (2^30), '512MiB', '4k' -> bytes."""
    if isinstance(text, (int, float)):
        return int(_positive(float(text), str(text), what, allow_zero))
    if str(text).strip().startswith("-"):
        raise InputError(f"{what} must be > 0: {text!r}")
    value, suffix = _split(text, what)
    if suffix not in _BYTE_SUFFIX:
        raise InputError(f"unknown unit {suffix!r} in {what} {text!r} (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)")
    return int(round(_positive(value * _BYTE_SUFFIX[suffix], text, what, allow_zero)))


def parse_rate(text: str | float, what: str = "bandwidth") -> float:
    """'2GB/s', '500MiB/s', '1e9' -> bytes per second."""
    cleaned = str(text).strip()
    if cleaned.lower().endswith("/s"):
        cleaned = cleaned[:-2]
    return float(parse_bytes(cleaned, what))


def parse_duration(text: str | float, what: str = "duration", allow_zero: bool = False) -> float:
    """'5m', '90s', '2h', '1.5d', '300' (seconds) -> seconds."""
    if isinstance(text, (int, float)):
        return _positive(float(text), str(text), what, allow_zero)
    if str(text).strip().startswith("-"):
        raise InputError(f"{what} must be > 0: {text!r}")
    value, suffix = _split(text, what)
    if suffix not in _DURATION_SUFFIX:
        raise InputError(f"unknown unit {suffix!r} in {what} {text!r} (use s, m, h or d)")
    return _positive(value * _DURATION_SUFFIX[suffix], text, what, allow_zero)


def parse_fraction(text: str | float, what: str = "fraction", allow_one: bool = False) -> float:
    """'5%' -> 0.05; '0.05' -> 0.05. Must lie in (0, 1), or (0, 1] with allow_one."""
    cleaned = str(text).strip()
    try:
        value = float(cleaned[:-1]) / 100 if cleaned.endswith("%") else float(cleaned)
    except ValueError:
        raise InputError(f"not a valid {what}: {text!r} (use 5% or 0.05)") from None
    if not (0 < value < 1 or (allow_one and value == 1)):
        raise InputError(f"{what} must lie between 0% and 100%{' (inclusive)' if allow_one else ''}: {text!r}")
    return value


def fmt_bytes(n: float) -> str:
    """Both decimal and binary units, labelled: '98.0 GB (91.3 GiB)'."""
    if n < 10**6:
        return f"{n / 10**3:,.1f} KB ({n / 2**10:,.1f} KiB)" if n >= 1000 else f"{n:,.0f} B"
    if n < 10**9:
        return f"{n / 10**6:,.1f} MB ({n / 2**20:,.1f} MiB)"
    if n < 10**12:
        return f"{n / GB:,.2f} GB ({n / GiB:,.2f} GiB)"
    return f"{n / 10**12:,.2f} TB ({n / 2**40:,.2f} TiB)"


def fmt_rate(bytes_per_s: float) -> str:
    """Bandwidth in decimal units, the way storage vendors quote it: '2.1 GB/s'."""
    if bytes_per_s >= 10**9:
        return f"{bytes_per_s / GB:,.2f} GB/s"
    if bytes_per_s >= 10**6:
        return f"{bytes_per_s / 10**6:,.1f} MB/s"
    return f"{bytes_per_s / 10**3:,.1f} KB/s"


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "∞"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 86400:.1f} d"


def fmt_count(n: float) -> str:
    for limit, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= limit:
            return f"{n / limit:.2f}{suffix}"
    return f"{n:,.0f}"


def fmt_percent(fraction: float) -> str:
    return f"{fraction * 100:.2f}%"
