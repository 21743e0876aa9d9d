"""`ckplan report`: a capacity-review document (Markdown and HTML) with PNG charts beside it."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

from pydantic import BaseModel

from ckplan.errors import InputError
from ckplan.planning import interval
from ckplan.planning.recommend import Recommendation
from ckplan.planning.scenario import restart_with_persist
from ckplan.profile import StorageProfile
from ckplan.render.document import Bullets, Document, Heading, Image, Para, TableBlock, to_html, to_markdown
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import fmt_bytes, fmt_duration, fmt_percent, fmt_rate


class ReportFiles(BaseModel):
    markdown: str
    html: str
    charts: list[str]
    recommendation: Recommendation


_d = fmt_duration


def waste_curve(rec: Recommendation) -> tuple[list[float], list[float]]:
    """Expected waste against the interval, exactly from Daly's model, as the recommendation evaluates it."""
    restart = restart_with_persist(rec.restart_s, rec.save_seconds, rec.stall_seconds)
    lo = max(min(rec.shortest_safe_interval_s, rec.optimal_interval_s) / 10, 1.0)
    hi = max(rec.optimal_interval_s, rec.max_loss_s, rec.shortest_safe_interval_s) * 3
    xs = [lo * (hi / lo) ** (i / 199) for i in range(200)]
    return xs, [interval.waste_fraction(x, rec.stall_seconds, rec.mtbf_s, restart) for x in xs]


def _charts(rec: Recommendation, profile: StorageProfile, out: Path, plt) -> list[Path]:
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if math.isfinite(rec.stall_seconds):
        xs, ys = waste_curve(rec)
        ax.plot([x / 60 for x in xs], [y * 100 for y in ys], color="black", label="expected waste (Daly model)")
        ax.axvspan(xs[0] / 60, rec.shortest_safe_interval_s / 60, color="red", alpha=0.12, label="below shortest safe τ")
        longest = rec.max_loss_s - rec.save_seconds
        if longest < xs[-1]:
            ax.axvspan(max(longest, xs[0]) / 60, xs[-1] / 60, color="orange", alpha=0.15, label="beyond the loss window")
        ax.axvline(rec.optimal_interval_s / 60, color="blue", ls="--", label=f"Daly optimum {_d(rec.optimal_interval_s)}")
        ax.axvline(rec.young_interval_s / 60, color="gray", ls=":", label=f"Young {_d(rec.young_interval_s)}")
        if math.isfinite(rec.recommended_interval_s):
            ax.plot([rec.recommended_interval_s / 60], [rec.expected_waste_fraction * 100], "go", ms=9,
                    label=f"recommended {_d(rec.recommended_interval_s)}")
        ax.set_xscale("log")
        ax.set_ylim(0, min(max(ys) * 100, 50))
    ax.set_xlabel("interval between saves τ (minutes, log scale)")
    ax.set_ylabel("expected waste (% of wall time)")
    ax.set_title(f"Waste against interval on {rec.storage} ({rec.mode})")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    paths.append(out / "waste.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ws: list[int] = []
    for label, curve in (("buffered (page cache, fsync at end)", profile.buffered_bandwidth),
                         ("direct (O_DIRECT)", profile.direct_bandwidth)):
        if not curve:
            continue
        ws = sorted({*ws, *(b.writers for b in curve)})
        med = [b.bytes_per_s / 1e9 for b in curve]
        lo = [(b.bytes_per_s - (b.spread.min if b.spread else b.bytes_per_s)) / 1e9 for b in curve]
        hi = [((b.spread.max if b.spread else b.bytes_per_s) - b.bytes_per_s) / 1e9 for b in curve]
        ax.errorbar([b.writers for b in curve], med, yerr=[lo, hi], marker="o", capsize=4,
                    label=f"{label}: median, min…max of repeats")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws, [str(w) for w in ws])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrent writers per host")
    ax.set_ylabel("flushed write bandwidth (GB/s, 10^9)")
    ax.set_title(f"Write bandwidth against writers: {profile.name} ({profile.fs_type})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "bandwidth.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def build_document(plan: CheckpointPlan, profile: StorageProfile, rec: Recommendation) -> Document:
    doc = Document(f"Checkpoint plan: {rec.plan}")
    doc.add(Para(f"Generated {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by ckplan {rec.ckplan_version}."))
    doc.add(Heading("Decision"), Para(f"**{rec.verdict.upper()}** — {rec.summary}."), Para(rec.verdict_reason + "."))
    doc.add(Heading("What one save writes"),
            Para(f"{fmt_bytes(plan.total_bytes)} in {plan.file_count:,} files from {plan.writers:,} writers on "
                 f"{plan.nodes_writing} node(s); {f'{plan.bytes_per_parameter:.2f}' if plan.bytes_per_parameter is not None else 'unknown'} bytes/parameter; busiest node "
                 f"{fmt_bytes(plan.bytes_per_node_max)}, busiest rank {fmt_bytes(plan.bytes_per_rank_max)}."),
            TableBlock(["state", "dtype", "bytes/param", "bytes"],
                       [[s.name, s.dtype, f"{s.bytes / plan.parameters:.3f}" if plan.parameters else "–", fmt_bytes(s.bytes)] for s in plan.breakdown]
                       + [["small files + overhead", "", "", fmt_bytes(plan.small_file_bytes)]]))
    m = profile.measurement
    doc.add(Heading("Storage"),
            Para(f"{profile.name}: {profile.target}, {profile.fs_type} ({profile.storage_class}), "
                 f"{'measured with ' + m.tool + ' on ' + m.host + ' at ' + m.date + ', preset ' + m.preset if profile.source == 'measured' else 'built-in typical figures, not a measurement'}."),
            TableBlock(["write path", "writers", "bandwidth (median)", "min … max"],
                       [[path, str(b.writers), fmt_rate(b.bytes_per_s),
                         f"{fmt_rate(b.spread.min)} … {fmt_rate(b.spread.max)}" if b.spread and b.spread.repeats > 1 else ""]
                        for path, curve in (("buffered", profile.buffered_bandwidth), ("direct", profile.direct_bandwidth))
                        for b in curve]),
            Para(f"Small files: {profile.small_files.files_per_s:,.0f} files/s; fsync p50 {_d(profile.fsync_latency.p50_s)}, "
                 f"p99 {_d(profile.fsync_latency.p99_s)}."),
            Image("bandwidth.png", "bandwidth against writers"))
    rows = [["save (persist) time", _d(rec.save_seconds)], ["stall per save", _d(rec.stall_seconds)]]
    rows += [[f"{'shortest' if c.bound == 'min' else 'longest'} τ: {c.name}" + (" (binds)" if c.name == rec.binding_constraint else ""),
              _d(c.seconds)] for c in rec.constraints]
    rows += [["job MTBF", f"{_d(rec.mtbf_s)} ({rec.mtbf_source})"], ["Young optimum", _d(rec.young_interval_s)],
             ["Daly optimum", _d(rec.optimal_interval_s)], ["recommended", _d(rec.recommended_interval_s)],
             ["expected waste / ETTR", f"{fmt_percent(rec.expected_waste_fraction)} / {fmt_percent(rec.ettr)}"]]
    rows += [[f"needed: {k}", fmt_rate(v) if "bytes_per_s" in k else f"{v:,.3g}"] for k, v in rec.needed.items()]
    doc.add(Heading("Constraints and intervals"), TableBlock(["figure", "value"], rows), Image("waste.png", "waste against interval"))
    if rec.what_if:
        doc.add(Heading("What-ifs"), TableBlock(
            ["mitigation", "save", "stall", "shortest safe τ", "recommended τ", "verdict", "waste"],
            [[w.mitigation, _d(w.save_seconds), _d(w.stall_seconds), _d(w.shortest_safe_interval_s),
              _d(w.recommended_interval_s), w.verdict, fmt_percent(w.expected_waste_fraction)] for w in rec.what_if]))
    doc.add(Heading("Assumptions"), Bullets(plan.assumptions + rec.assumptions))
    return doc


def write_report(plan: CheckpointPlan, profile: StorageProfile, rec: Recommendation, out: Path) -> ReportFiles:
    from ckplan.render.charts import pyplot

    plt = pyplot("report's charts")  # before the directory is made: a missing extra leaves nothing behind
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}") from None
    charts = _charts(rec, profile, out, plt)
    doc = build_document(plan, profile, rec)
    md, page = out / "report.md", out / "report.html"
    md.write_text(to_markdown(doc))
    page.write_text(to_html(doc))
    return ReportFiles(markdown=str(md), html=str(page), charts=[str(c) for c in charts], recommendation=rec)
