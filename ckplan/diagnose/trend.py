"""Is the save time growing? Least squares on save time against save number (or wall time)."""

from __future__ import annotations

import math
import statistics
from typing import Literal

from ckplan.frameworks.logs import Save
from ckplan.schema import Model
from ckplan.version import __version__

# Two-sided 95% Student t quantiles for small samples; 1.96 beyond the table.
T95 = {
    1: 12.71,
    2: 4.30,
    3: 3.18,
    4: 2.78,
    5: 2.57,
    6: 2.45,
    7: 2.36,
    8: 2.31,
    9: 2.26,
    10: 2.23,
    12: 2.18,
    15: 2.13,
    20: 2.09,
    25: 2.06,
    30: 2.04,
}
GROWTH_SHARE = 0.10  # growing: the fitted rise over the run exceeds 10% of the mean save
TAIL_RATIO = 2.0  # noisy: p99 above twice the median


class SavePoint(Model):
    label: str
    seconds: float
    at: float | None


class Diagnosis(Model):
    kind: Literal["ckplan.diagnosis"] = "ckplan.diagnosis"
    ckplan_version: str = __version__
    logs: list[str]
    bytes_read: int
    patterns: list[str]
    saves: int
    median_s: float
    p99_s: float
    max_s: float
    by: Literal["save number", "wall time"]
    slope_s_per_save: float  # fitted growth per save (per second of wall time × mean gap when by wall time)
    slope_ci95: tuple[float, float]
    interval_s: float | None  # the interval between saves, from timestamps or --interval
    fraction_saving: float | None  # share of wall time spent saving, from timestamps
    saves_until_interval: float | None
    predicted_s: float | None = None
    timeout_warning: str | None = None  # a save near the process group's timeout (diagnose/records.py)
    notes: list[str] = []  # what reading left out (lines too long to be log lines)
    verdict: Literal["stable", "growing", "noisy"]
    verdict_text: str
    series: list[SavePoint]


def _t95(df: int) -> float:
    if df <= 0:
        return math.inf
    return next((v for k, v in sorted(T95.items()) if df <= k), 1.96)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(slope, intercept, standard error of the slope) by ordinary least squares."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my, math.inf
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False)) / sxx
    intercept = my - slope * mx
    if n < 3:
        return slope, intercept, math.inf
    resid = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=False))
    return slope, intercept, math.sqrt(resid / (n - 2) / sxx)


def _axis(saves: list[Save], by: str) -> tuple[list[float], list[float], float | None]:
    """The saves' x values (save numbers, or wall time in median gaps), their timestamps where every save has one
    (else none), and the median gap between them."""
    from ckplan.errors import InputError

    ats = [s.at for s in saves if s.at is not None]
    if len(ats) < len(saves):
        if by == "wall time":
            raise InputError("‹by› time needs timestamps on every save line")
        ats = []
    gaps = [b - a for a, b in zip(ats, ats[1:], strict=False)]
    gap = statistics.median(gaps) if gaps else None
    if by == "wall time" and gap:
        return [(at - ats[0]) / gap for at in ats], ats, gap
    return [float(i) for i in range(len(saves))], ats, gap


def diagnose(
    saves: list[Save],
    logs: list[str],
    bytes_read: int,
    by: str = "save number",
    interval_s: float | None = None,
    predicted_s: float | None = None,
) -> Diagnosis:
    from ckplan.errors import InputError

    if len(saves) < 2:
        raise InputError(
            f"found {len(saves)} checkpoint save(s) in the logs; a trend needs at least 2 "
            "(give ‹pattern› for another log format)"
        )
    ys = [s.seconds for s in saves]
    xs, ats, gap = _axis(saves, by)
    stamped = bool(ats)
    slope, intercept, se = fit(xs, ys)
    t = _t95(len(saves) - 2)
    ci = (slope - t * se, slope + t * se) if math.isfinite(se) else (-math.inf, math.inf)
    ordered = sorted(ys)
    median = statistics.median(ys)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    mean = sum(ys) / len(ys)
    interval = interval_s if interval_s is not None else gap
    fraction = (sum(ys) / (ats[-1] - ats[0] + ys[0])) if stamped and ats[-1] > ats[0] else None
    until = None
    growing = ci[0] > 0 and slope * (len(saves) - 1) > GROWTH_SHARE * mean
    if growing:
        current = intercept + slope * xs[-1]
        until = max((interval - current) / slope, 0.0) if interval else None
        text = (
            "growing: storage is falling behind"
            + (
                f", and at this slope a save reaches the interval after {until:.0f} more saves"
                if until is not None
                else ""
            )
            + f" (+{slope:.3g} s per save)"
        )
        verdict = "growing"
    elif p99 > TAIL_RATIO * median:
        verdict, text = (
            "noisy",
            f"noisy: the tail latency dominates (p99 {p99:.3g} s against a median of {median:.3g} s)",
        )
    else:
        why = (
            "within noise"
            if ci[0] <= 0
            else f"a rise of {slope * (len(saves) - 1):.3g} s over the run, under {GROWTH_SHARE:.0%} of the mean"
        )
        verdict, text = "stable", f"stable (median {median:.3g} s; slope {slope:+.3g} s per save, {why})"
    if predicted_s is not None:
        text += f"; ckplan predicts {predicted_s:.3g} s per save, the log's median is {median / predicted_s:.2f}× that"
    return Diagnosis(
        logs=logs,
        bytes_read=bytes_read,
        patterns=sorted({s.source for s in saves}),
        saves=len(saves),
        median_s=median,
        p99_s=p99,
        max_s=ordered[-1],
        by=by,
        slope_s_per_save=slope,
        slope_ci95=ci,
        interval_s=interval,
        fraction_saving=fraction,
        saves_until_interval=until,
        predicted_s=predicted_s,
        verdict=verdict,
        verdict_text=text,
        series=[SavePoint(label=s.label, seconds=s.seconds, at=s.at) for s in saves],
    )
