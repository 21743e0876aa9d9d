"""The diagnosis: verdict, figures, and a terminal chart of save time against save number."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ckplan.diagnose.trend import Diagnosis
from ckplan.render.console import console, shown
from ckplan.units import fmt_bytes, fmt_duration, fmt_percent

if TYPE_CHECKING:
    from ckplan.diagnose.records import RecordDiagnosis

BAR = "█"
CHART_ROWS = 40


def render_diagnosis(d: Diagnosis) -> None:
    out = console()
    style = {"stable": "green", "growing": "red", "noisy": "yellow"}[d.verdict]
    out.print(f"[bold {style}]{shown(d.verdict_text)}[/bold {style}]")
    table = Table(
        title=f"{d.saves} saves in {len(d.logs)} log(s) ({d.bytes_read / 1e6:,.1f} MB read; "
        f"patterns: {shown(', '.join(d.patterns))})",
        title_justify="left",
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row(
        "median / p99 / max save", f"{fmt_duration(d.median_s)} / {fmt_duration(d.p99_s)} / {fmt_duration(d.max_s)}"
    )
    lo, hi = d.slope_ci95
    table.add_row(f"slope against {shown(d.by)} (95% CI)", f"{d.slope_s_per_save:+.3g} s/save ({lo:+.3g} … {hi:+.3g})")
    if d.interval_s:
        table.add_row("interval between saves", fmt_duration(d.interval_s))
    if d.fraction_saving is not None:
        table.add_row("share of wall time saving", fmt_percent(d.fraction_saving))
    if d.predicted_s is not None:
        table.add_row("ckplan's prediction", fmt_duration(d.predicted_s))
    out.print(table)
    if d.timeout_warning:
        out.print(f"[bold red]warning:[/bold red] {shown(d.timeout_warning)}")
    for note in d.notes:
        out.print(f"[yellow]note:[/yellow] {shown(note)}")
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


def render_record_diagnosis(d: RecordDiagnosis) -> None:
    """Each step's saves across ranks, then the trend as for logs."""
    out = console()
    table = Table(
        title=f"{len(d.steps)} step(s), {d.lines} save records ({shown(', '.join(d.frameworks))}) "
        f"in {len(d.records)} file(s)",
        title_justify="left",
    )
    for col in ("step", "ranks", "slowest rank", "save (slowest)", "fastest / median", "spread", "blocking", "bytes"):
        table.add_column(col, justify="right")
    predicted = d.predicted_s is not None
    if predicted:
        table.add_column("error", justify="right")
    several = len({s.run for s in d.steps}) > 1  # a job restarted saved some steps again: each run's apart
    for s in d.steps:
        row = [
            f"{s.step} ({shown(s.run)})" if several else str(s.step),
            f"{s.ranks}/{s.world_size}",
            shown(s.slowest_rank),
            fmt_duration(s.seconds),
            f"{fmt_duration(s.fastest_s)} / {fmt_duration(s.median_s)}",
            fmt_duration(s.spread_s),
            fmt_duration(s.blocking_s)
            + (f" (+{fmt_duration(s.persist_s)} persist)" if s.persist_s is not None else ""),
            f"{fmt_bytes(s.bytes)} in {s.files} files",
        ]
        if predicted:
            row.append(f"{s.error_percent:+.0f}%" if s.error_percent is not None else "")
        table.add_row(*row)
    out.print(table)
    out.print(f"slowest rank: {shown(d.slowest_rank)}, in {d.slowest_rank_steps} of {len(d.steps)} step(s)")
    if d.predicted_s is not None:
        stall = f", blocking {fmt_duration(d.predicted_stall_s)}" if d.predicted_stall_s is not None else ""
        out.print(
            f"ckplan predicts {fmt_duration(d.predicted_s)} per save{stall}; error is (predicted − recorded) ÷ recorded"
        )
    if d.timeout_warning:
        out.print(f"[bold red]warning:[/bold red] {shown(d.timeout_warning)}")
    for note in d.notes:
        out.print(f"[yellow]note:[/yellow] {shown(note)}")
    if d.trend is not None:
        render_diagnosis(d.trend)
