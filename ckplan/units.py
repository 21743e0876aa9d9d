"""Parse and format sizes, counts, rates, durations and percentages.

Inside ckplan everything is bytes, seconds and plain counts. These helpers are
the only place where text becomes a number or a number becomes text.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping

from ckplan.errors import InputError

GB = 10**9
GiB = 2**30

# The largest values ckplan accepts. Past them a number is a typo or a unit slip, and the arithmetic
# downstream (exponentials of durations, products of counts) would overflow or run for hours.
MAX_PARAMETERS = 10**15  # 1,000× the largest dense models trained so far
MAX_GPUS = 2**20  # 1,048,576; also the bound on GPUs per node, writers and other world sizes
MAX_DURATION_S = 10 * 365 * 86400  # ten years
MAX_BYTES = 10**18  # 1 EB
MAX_RATE_BYTES_PER_S = 10**15  # 1 PB/s
MAX_HOSTS = 65_536  # hosts of one multi-host probe (--hosts, --hosts-file) and of a profile's curve over hosts
MAX_FAILURES_PER_DAY = 86_400  # one a second: the bound on the job-level failure rate
MAX_FAILURES_PER_1000_NODE_DAYS = MAX_FAILURES_PER_DAY * 1000  # the same bound for the per-node rate
# The smallest: below them a figure is a unit slip, and dividing by it (a save window of interval × overhead,
# a rate over a time) overflows. With both, the largest quotient ckplan forms (1 EB in 1 µs × 1e-6) is 1e30.
MIN_DURATION_S = 1e-6  # 1 µs, the finest unit durations take (us); zero stays allowed where it means none
MIN_FRACTION = 1e-6  # 0.0001%
MIN_MTBF_S = 1.0  # a job interrupted more than once a second never runs

_NUMBER = r"(-?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"  # a sign is read, so that check_range can refuse it

_COUNT_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_BYTE_SUFFIX = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "eb": 10**18,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
    "eib": 2**60,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,  # fio's convention: bare letters are binary
}
_DURATION_SUFFIX = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "m": 60, "min": 60, "h": 3600, "d": 86400}


def check_range(
    value: float,
    what: str,
    minimum: float,
    maximum: float,
    *,
    text: object = None,
    above_minimum: bool = False,
    limit: str | None = None,
) -> float:
    """value itself, if it is a number in [minimum, maximum] (or (minimum, maximum] with above_minimum).

    `text` is what the user typed (default: the value); `limit` says the maximum in words.
    """
    shown = repr(str(text if text is not None else value))
    if math.isnan(value):
        raise InputError(f"{what} is not a number: {shown}")
    if value != 0 and abs(value) < sys.float_info.min:
        raise InputError(f"{what} is subnormal, too close to zero to be a real figure: {shown}")
    if value > maximum:
        raise InputError(f"{what} is too large: {shown} (at most {limit or f'{maximum:,}'})")
    if value < minimum or (above_minimum and value == minimum):
        raise InputError(f"{what} must be {'>' if above_minimum else '≥'} {minimum:,}: {shown}")
    return value


def _value(number: str, text: object, what: str) -> float:
    """The float of a matched _NUMBER; one that underflows to 0 (1e-400) is not the zero it would pass for."""
    value = float(number)
    if value == 0 and re.search("[1-9]", re.split("[eE]", number)[0]):
        raise InputError(f"{what} is too close to zero to be a real figure: {str(text)!r}")
    return value


def _split(text: str, what: str) -> tuple[float, str]:
    match = re.fullmatch(_NUMBER + r"\s*([a-zA-Z/]*)", str(text).strip())
    if not match:
        raise InputError(f"not a valid {what}: {text!r}")
    return _value(match.group(1), text, what), match.group(2).lower()


def parse_number(text: str, what: str) -> float:
    """A plain number as typed: '2.46', '1e-3'; 'inf' and 'nan' are read, for check_range to refuse in its words."""
    match = re.fullmatch(_NUMBER, str(text).strip())
    if match:
        return _value(match.group(1), text, what)
    try:
        return float(text)
    except ValueError:
        raise InputError(f"not a valid {what}: {text!r}") from None


def _number(text: str | float, what: str, suffixes: Mapping[str, float], units: str) -> float:
    """A number with an optional unit suffix, scaled to the base unit."""
    if isinstance(text, (int, float)):
        return float(text)
    value, suffix = _split(text, what)
    if suffix not in suffixes:
        raise InputError(f"unknown unit {suffix!r} in {what} {text!r} (use {units})")
    return value * suffixes[suffix]


def parse_count(text: str | float, what: str = "count") -> float:
    """'7e9', '7B', '70b', '1.5T', '500M' -> a parameter count (B means billion here), 1 to MAX_PARAMETERS."""
    value = _number(text, what, _COUNT_SUFFIX, "k, M, B or T")
    return check_range(value, what, 1, MAX_PARAMETERS, text=text, limit="1e15")


def _whole_bytes(value: float, text: object, what: str, allow_zero: bool, maximum: int, limit: str) -> int:
    check_range(value, what, 0, maximum, text=text, above_minimum=not allow_zero, limit=limit)
    rounded = int(round(value))
    if rounded == 0 and not allow_zero:  # 0.4 B rounds to nothing
        raise InputError(f"{what} must be at least 1 byte: {str(text)!r}")
    return rounded


def parse_bytes(text: str | float, what: str = "size", allow_zero: bool = False) -> int:
    """'30GB' (10^9), '30GiB' (2^30), '512MiB', '4k' -> bytes, up to MAX_BYTES."""
    value = _number(text, what, _BYTE_SUFFIX, "B, KB, MB, GB, TB or KiB, MiB, GiB, TiB")
    return _whole_bytes(value, text, what, allow_zero, MAX_BYTES, "1 EB")


def parse_rate(text: str | float, what: str = "bandwidth") -> float:
    """'2GB/s', '500MiB/s', '1e9' -> bytes per second, up to MAX_RATE_BYTES_PER_S."""
    cleaned = str(text).strip()
    if cleaned.lower().endswith("/s"):
        cleaned = cleaned[:-2]
    value = _number(text if isinstance(text, (int, float)) else cleaned, what, _BYTE_SUFFIX, "GB/s, MB/s, GiB/s, MiB/s")
    return float(_whole_bytes(value, text, what, False, MAX_RATE_BYTES_PER_S, "1 PB/s"))


def parse_duration(
    text: str | float, what: str = "duration", allow_zero: bool = False, minimum: float = MIN_DURATION_S
) -> float:
    """'5m', '90s', '2h', '1.5d', '300' (seconds) -> seconds, `minimum` (1 µs) to MAX_DURATION_S, or 0 with
    allow_zero."""
    value = _number(text, what, _DURATION_SUFFIX, "s, m, h or d")
    check_range(value, what, 0, MAX_DURATION_S, text=text, above_minimum=not allow_zero, limit="10 years")
    if value and value < minimum:
        raise InputError(f"{what} must be at least {fmt_duration(minimum)}{' (or 0)' if allow_zero else ''}: {text!r}")
    return value


def parse_fraction(text: str | float, what: str = "fraction", allow_one: bool = False) -> float:
    """'5%' -> 0.05; '0.05' -> 0.05. Must lie in [MIN_FRACTION, 1), or [MIN_FRACTION, 1] with allow_one."""
    match = re.fullmatch(_NUMBER + r"\s*(%?)", str(text).strip())
    if not match:
        raise InputError(f"not a valid {what}: {text!r} (use 5% or 0.05)")
    value = _value(match.group(1), text, what) / (100 if match.group(2) else 1)
    if not (MIN_FRACTION <= value < 1 or (allow_one and value == 1)):
        raise InputError(
            f"{what} must lie between {MIN_FRACTION:.4%} and 100%{' (inclusive)' if allow_one else ''}: {text!r}"
        )
    return value


def check_scale(value: float, what: str) -> float:
    """A replay's or a validation's scale: the share of each file's bytes written, 0.0001% to 1 (full size)."""
    return check_range(value, what, MIN_FRACTION, 1, limit="1, full size")


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


def fmt_named(name: str, value: float) -> str:
    """A figure whose name says its unit (a Recommendation's `needed`): …bytes_per_s a rate, …seconds a
    duration, anything else a count."""
    if "bytes_per_s" in name:
        return fmt_rate(value)
    if "seconds" in name:
        return fmt_duration(value)
    return f"{value:,.0f}"
