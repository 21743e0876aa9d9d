"""Every chart ckplan draws (the report's two, `provision --chart`), in one place; matplotlib is imported on
demand through `pyplot`, the one guard for the optional extra."""

from __future__ import annotations

import io
import math
from pathlib import Path

from ckplan.errors import InputError, missing_extra
from ckplan.planning.provision import ProvisionSweep
from ckplan.planning.recommend import Recommendation
from ckplan.planning.scenario import waste_curve
from ckplan.profile import StorageProfile
from ckplan.units import fmt_duration as _d


def pyplot(what: str):
    """matplotlib.pyplot on the file-only Agg backend, or an EnvironmentProblem naming `what` needs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing_extra(what, "matplotlib", "report") from None
    return plt


def _png(fig, path: Path, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    try:
        path.write_bytes(buf.getvalue())
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
    return buf.getvalue()


def report_charts(rec: Recommendation, profile: StorageProfile, out: Path, plt) -> dict[Path, bytes]:
    """Draw both charts into `out`; their PNG bytes by path, for the HTML to embed."""
    charts: dict[Path, bytes] = {}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if math.isfinite(rec.stall_seconds):
        lo = max(min(rec.shortest_safe_interval_s, rec.optimal_interval_s) / 10, 1.0)
        hi = max(rec.optimal_interval_s, rec.max_loss_s, rec.shortest_safe_interval_s) * 3
        xs, ys = waste_curve(rec.stall_seconds, rec.save_seconds, rec.restart_s, rec.mtbf_s, lo, hi)
        ax.plot([x / 60 for x in xs], [y * 100 for y in ys], color="black", label="expected waste (Daly model)")
        ax.axvspan(
            xs[0] / 60, rec.shortest_safe_interval_s / 60, color="red", alpha=0.12, label="below shortest safe τ"
        )
        if rec.longest_interval_s < xs[-1]:
            ax.axvspan(
                max(rec.longest_interval_s, xs[0]) / 60,
                xs[-1] / 60,
                color="orange",
                alpha=0.15,
                label="beyond the loss window",
            )
        ax.axvline(
            rec.optimal_interval_s / 60, color="blue", ls="--", label=f"Daly optimum {_d(rec.optimal_interval_s)}"
        )
        ax.axvline(rec.young_interval_s / 60, color="gray", ls=":", label=f"Young {_d(rec.young_interval_s)}")
        if math.isfinite(rec.recommended_interval_s):
            ax.plot(
                [rec.recommended_interval_s / 60],
                [rec.expected_waste_fraction * 100],
                "go",
                ms=9,
                label=f"recommended {_d(rec.recommended_interval_s)}",
            )
        ax.set_xscale("log")
        ax.set_ylim(0, min(max(ys) * 100, 50))
    ax.set_xlabel("interval between saves τ (minutes, log scale)")
    ax.set_ylabel("expected waste (% of wall time)")
    ax.set_title(f"Waste against interval on {rec.storage} ({rec.mode})")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    charts[out / "waste.png"] = _png(fig, out / "waste.png", plt)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ws: list[int] = []
    for label, curve in (
        ("buffered (page cache, fsync at end)", profile.buffered_bandwidth),
        ("direct (O_DIRECT)", profile.direct_bandwidth),
    ):
        if not curve:
            continue
        ws = sorted({*ws, *(b.writers for b in curve)})
        med = [b.bytes_per_s / 1e9 for b in curve]
        below = [(b.bytes_per_s - (b.spread.min if b.spread else b.bytes_per_s)) / 1e9 for b in curve]
        above = [((b.spread.max if b.spread else b.bytes_per_s) - b.bytes_per_s) / 1e9 for b in curve]
        ax.errorbar(
            [b.writers for b in curve],
            med,
            yerr=[below, above],
            marker="o",
            capsize=4,
            label=f"{label}: median, min…max of repeats",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws, [str(w) for w in ws])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrent writers per host")
    ax.set_ylabel("flushed write bandwidth (GB/s, 10^9)")
    ax.set_title(f"Write bandwidth against writers: {profile.name} ({profile.fs_type})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    charts[out / "bandwidth.png"] = _png(fig, out / "bandwidth.png", plt)
    return charts


def provision_chart(sweeps: list[ProvisionSweep], path: Path) -> None:
    plt = pyplot("--chart")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for sweep in sweeps:
        rows = [
            r for r in sweep.rows if r.burst_bandwidth_bytes_per_s and r.sustained_bandwidth_bytes_per_s
        ]  # feasible
        ax.plot(
            [r.gpus for r in rows],
            [(r.burst_bandwidth_bytes_per_s or 0) / 1e9 for r in rows],
            marker="o",
            label=f"{sweep.mode}: burst",
        )
        ax.plot(
            [r.gpus for r in rows],
            [(r.sustained_bandwidth_bytes_per_s or 0) / 1e9 for r in rows],
            marker="x",
            ls="--",
            label=f"{sweep.mode}: sustained",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("aggregate write bandwidth needed (GB/s)")
    ax.set_title(sweeps[0].plan[:90], fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _png(fig, path, plt)
