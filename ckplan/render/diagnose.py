"""The diagnosis: verdict, figures, and a terminal chart of save time against save number."""

from __future__ import annotations

from rich.table import Table

from ckplan.diagnose.trend import Diagnosis
from ckplan.render.console import console
from ckplan.units import fmt_duration, fmt_percent

BAR = "█"
CHART_ROWS = 40


def render_diagnosis(d: Diagnosis) -> None:
    out = console()
    style = {"stable": "green", "growing": "red", "noisy": "yellow"}[d.verdict]
    out.print(f"[bold {style}]{d.verdict_text}[/bold {style}]")
    table = Table(
        title=f"{d.saves} saves in {len(d.logs)} log(s) ({d.bytes_read / 1e6:,.1f} MB read; "
        f"patterns: {', '.join(d.patterns)})",
        title_justify="left",
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row(
        "median / p99 / max save", f"{fmt_duration(d.median_s)} / {fmt_duration(d.p99_s)} / {fmt_duration(d.max_s)}"
    )
    lo, hi = d.slope_ci95
    table.add_row(f"slope against {d.by} (95% CI)", f"{d.slope_s_per_save:+.3g} s/save ({lo:+.3g} … {hi:+.3g})")
    if d.interval_s:
        table.add_row("interval between saves", fmt_duration(d.interval_s))
    if d.fraction_saving is not None:
        table.add_row("share of wall time saving", fmt_percent(d.fraction_saving))
    if d.predicted_s is not None:
        table.add_row("ckplan's prediction", fmt_duration(d.predicted_s))
    out.print(table)
    render_chart(d)


def render_chart(d: Diagnosis) -> None:
    """One bar per save (averaged into at most CHART_ROWS rows), scaled to the longest."""
    points = d.series
    step = max(1, -(-len(points) // CHART_ROWS))
    rows = [points[i : i + step] for i in range(0, len(points), step)]
    top = max(p.seconds for p in points) or 1.0
    width = 50
    out = console()
    out.print(f"Save time against save number ({step} save(s) per row)")
    for i, group in enumerate(rows):
        mean = sum(p.seconds for p in group) / len(group)
        out.print(f"{i * step + 1:>6} {BAR * max(1, round(mean / top * width)):<{width}} {fmt_duration(mean)}")
