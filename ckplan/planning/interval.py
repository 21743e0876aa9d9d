"""Checkpoint-interval mathematics. Every formula lives here, once.

Notation (shared reference intervals.md): δ = seconds a save blocks training,
τ = compute seconds between saves, M = job mean time between interruptions,
R = restart cost (detect, reschedule, load, warm up).
"""

from __future__ import annotations

import math

from ckplan.errors import InputError


def _check(delta: float, mtbf: float) -> None:
    if mtbf <= 0 or not math.isfinite(mtbf):
        raise InputError(f"the job MTBF must be > 0, got {mtbf}")
    if delta < 0:
        raise InputError(f"a save cannot block for a negative time ({delta})")


def young_interval(delta: float, mtbf: float) -> float:
    """Young (1974), first order: τ = √(2 δ M)."""
    _check(delta, mtbf)
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly (2006), FGCS 22(3): the higher-order optimum.

    τ = √(2δM)·[1 + ⅓·√(δ/2M) + (1/9)·(δ/2M)] − δ for δ < 2M, else τ = M.
    """
    _check(delta, mtbf)
    if delta >= 2 * mtbf:
        return mtbf
    x = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def expected_wall_time(tau: float, delta: float, mtbf: float, restart: float, work: float = 1.0) -> float:
    """Daly (2006), exponential failures: T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ."""
    _check(delta, mtbf)
    if tau <= 0:
        raise InputError(f"the interval must be > 0, got {tau}")
    try:
        return mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf) * work / tau
    except OverflowError:  # e^x past x ≈ 709: the job, failing this often, never finishes (waste 1, ETTR 0)
        return math.inf


def waste_fraction(tau: float, delta: float, mtbf: float, restart: float) -> float:
    """Share of wall time not spent on useful work (saves, rework, restarts): 1 − T_s/T_w."""
    return 1.0 - 1.0 / expected_wall_time(tau, delta, mtbf, restart)


def ettr(tau: float, delta: float, mtbf: float, restart: float) -> float:
    """Effective training time ratio: useful time over wall time, T_s/T_w."""
    return 1.0 - waste_fraction(tau, delta, mtbf, restart)


def ettr_ceiling(restart: float, mtbf: float) -> float:
    """The best ETTR any save allows: Daly's T_s/T_w as δ → 0 and τ → 0, where (e^{τ/M} − 1)/τ → 1/M, so
    T_s/T_w → e^{−R/M}. Only the restart cost is left."""
    _check(0.0, mtbf)
    return math.exp(-restart / mtbf)


def job_mtbf(nodes: int, failures_per_1000_node_days: float, job_failures_per_day: float) -> float:
    """M_job = 1 / (nodes × node rate + job rate), in seconds."""
    rate_per_day = nodes * failures_per_1000_node_days / 1000 + job_failures_per_day
    if rate_per_day <= 0:
        raise InputError("the failure rates add up to zero: give ‹mtbf_s› or positive rates")
    return 86400 / rate_per_day
