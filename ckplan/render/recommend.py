"""Rich rendering of a Recommendation and of the comparison across storage classes."""

from __future__ import annotations

import math

from rich.table import Table

from ckplan.planning.recommend import Comparison, Recommendation
from ckplan.render.console import console, shown
from ckplan.units import fmt_bytes, fmt_duration, fmt_named, fmt_percent, fmt_rate

VERDICT_STYLE = {"ok": "green", "tight": "yellow", "infeasible": "red"}


_d = fmt_duration


def render_recommendation(rec: Recommendation) -> None:
    out = console()
    out.print(f"[bold]{shown(rec.plan)}[/bold]")
    style = VERDICT_STYLE[rec.verdict]
    out.print(
        f"[bold {style}]{rec.verdict.upper()}[/bold {style}] on {shown(rec.storage)} ({shown(rec.storage_class)}, "
        f"{shown(rec.mode)}): [bold]{shown(rec.summary)}[/bold]"
    )
    out.print(f"  {shown(rec.verdict_reason)}\n")
    table = Table(title="Constraints and intervals", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("why", overflow="fold")
    table.add_row("save (persist) time", rec.save_span(), shown(_model_line(rec)))
    if rec.machine_defaults is not None:  # the figure moves the save by its share: labelled where it is used
        d = rec.machine_defaults
        table.add_row(
            "serialisers: [bold yellow]NOT MEASURED[/bold yellow]", f"{d.save_share:.0%} of save", shown(d.note)
        )
    table.add_row(
        "stall per save", _d(rec.stall_seconds), "the whole save" if rec.mode == "sync" else "device→host snapshot"
    )
    for c in rec.constraints:
        mark = " ◀ binds" if c.name == rec.binding_constraint else ""
        table.add_row(
            f"{'shortest' if c.bound == 'min' else 'longest'} τ: {shown(c.name)}{mark}",
            _d(c.seconds),
            shown(c.explanation),
        )
    table.add_row("job MTBF", _d(rec.mtbf_s), shown(rec.mtbf_source))
    table.add_row("restart cost R", _d(rec.restart_s), shown(_restart_line(rec)))
    table.add_row("Young optimum √(2δM)", _d(rec.young_interval_s), "first order")
    table.add_row("Daly optimum", _d(rec.optimal_interval_s), "higher order (Daly 2006)")
    table.add_row(
        "[bold]recommended[/bold]",
        f"[bold]{_d(rec.recommended_interval_s)}[/bold]",
        (f"{rec.recommended_steps:,} steps; " if rec.recommended_steps is not None else "")
        + "the Daly optimum, kept between the shortest safe τ and the loss window",
    )
    table.add_row(
        "overhead at recommended",
        fmt_percent(rec.overhead_at_recommended) if math.isfinite(rec.overhead_at_recommended) else "—",
        f"budget {fmt_percent(rec.max_overhead)}",
    )
    table.add_row(
        "expected waste / ETTR",
        f"{fmt_percent(rec.expected_waste_fraction)} / {fmt_percent(rec.ettr)}",
        f"saves, rework and restarts ({_d(rec.restart_s)} each)",
    )
    for key, value in rec.needed.items():
        table.add_row(
            f"needed: {shown(key)}",
            fmt_named(key, value),
            "to meet the loss window within the budget",
        )
    out.print(table)
    for warning in rec.warnings:
        out.print(f"[bold yellow]warning:[/bold yellow] {shown(warning)}")
    if rec.what_if:
        w = Table(title="What-ifs (each alone, then the best combination)", title_justify="left")
        for col in ("mitigation", "save", "stall", "shortest safe τ", "recommended τ", "verdict", "waste", "notes"):
            w.add_column(col, justify="left" if col in ("mitigation", "notes", "verdict") else "right", overflow="fold")
        for row in rec.what_if:
            w.add_row(
                shown(row.mitigation),
                _d(row.save_seconds),
                _d(row.stall_seconds),
                _d(row.shortest_safe_interval_s),
                _d(row.recommended_interval_s),
                f"[{VERDICT_STYLE.get(row.verdict, '')}]{shown(row.verdict)}[/]",
                fmt_percent(row.expected_waste_fraction),
                shown("; ".join(row.notes)),
            )
        out.print(w)
    out.print("[bold]Assumptions[/bold]")
    for a in rec.assumptions:
        out.print(f" • {shown(a)}")


def _restart_line(rec: Recommendation) -> str:
    r = rec.restart
    if r.fixed_seconds is None:
        return r.source
    if r.load is None:
        return f"fixed {_d(r.fixed_seconds)} ({r.fixed_source}); {r.source}"
    load = r.load
    return (
        f"fixed {_d(r.fixed_seconds)} ({r.fixed_source}) + load {_d(load.seconds)}: {fmt_bytes(load.node_bytes)} per "
        f"node, {fmt_bytes(load.storage_bytes)} in all, {load.limited_by} ({load.read_curve} curve)"
    )


def _model_line(rec: Recommendation) -> str:
    m = rec.save_model
    if m is None:
        return "given"
    a = m.aggregate
    agg = f"agg {fmt_rate(m.aggregate_bandwidth_bytes_per_s)}" + (f", {a.label}" if a.extrapolated else "")
    partial = m.replay_nodes is not None and m.replay_nodes < m.nodes
    if m.source == "replay":
        if not partial:
            return "replay of this plan on the target"
        return (
            f"replay of {m.replay_nodes} of the plan's {m.nodes} nodes (all {m.nodes} nodes' bytes at {agg}: shorter)"
        )
    replay = f"replay of {m.replay_nodes} of {m.nodes} nodes {_d(m.replay_seconds or 0)}, shorter; " if partial else ""
    return (
        f"{replay}{m.bandwidth_seconds:.3g} s bytes at {fmt_rate(m.node_bandwidth_bytes_per_s)}/node × {m.nodes} "
        f"({agg}; {m.limited_by}) + {m.metadata_seconds:.3g} s files + {m.fsync_tail_seconds:.3g} s fsync p99"
    )


def render_comparison(comp: Comparison) -> None:
    out = console()
    if comp.recommendations[0].save_model is None:  # --save-time: the model, and so the storage, is skipped
        out.print(
            f"[bold]{shown(comp.plan)}[/bold]\nSave time given (--save-time): one recommendation, whatever the storage.\n"
        )
    else:
        out.print(
            f"[bold]{shown(comp.plan)}[/bold]\nNo --storage given: the plan on every built-in storage class "
            "(typical figures, not measurements; probe yours with `ckplan probe`).\n"
        )
    table = Table(title="Recommendation by storage class", title_justify="left")
    for col in (
        "storage",
        "save",
        "stall",
        "shortest safe τ",
        "binds",
        "Daly τ",
        "recommended τ",
        "overhead",
        "waste",
        "restart",
        "verdict",
    ):
        table.add_column(col, justify="left" if col in ("storage", "binds", "verdict") else "right")
    for r in comp.recommendations:
        table.add_row(
            shown(r.storage),
            r.save_span(),
            _d(r.stall_seconds),
            _d(r.shortest_safe_interval_s),
            shown(r.binding_constraint),
            _d(r.optimal_interval_s),
            _d(r.recommended_interval_s),
            fmt_percent(r.overhead_at_recommended) if math.isfinite(r.overhead_at_recommended) else "—",
            fmt_percent(r.expected_waste_fraction),
            _d(r.restart_s),
            f"[{VERDICT_STYLE[r.verdict]}]{shown(r.verdict)}[/]",
        )
    out.print(table)
    for r in comp.recommendations:
        if r.save_model is not None and r.save_model.aggregate.extrapolated:
            a = r.save_model.aggregate
            out.print(f"{shown(r.storage)}: aggregate {fmt_rate(a.bytes_per_s)}, {shown(a.label)}")
    defaults = [r.machine_defaults for r in comp.recommendations if r.machine_defaults is not None]
    if defaults:
        names = ", ".join(dict.fromkeys(name for d in defaults for name in d.figures))
        out.print(
            f"[bold yellow]NOT MEASURED[/bold yellow] on this machine: {shown(names)} are the named defaults (no "
            f"built-in class carries a calibration); they give up to {max(d.save_share for d in defaults):.0%} "
            "of a class's predicted save (--storage NAME says how much, and how to measure them)."
        )
    first = comp.recommendations[0]
    out.print(
        f"Job MTBF {_d(first.mtbf_s)} ({shown(first.mtbf_source)}); loss window {_d(first.max_loss_s)}; "
        f"overhead budget {fmt_percent(first.max_overhead)}; mode {shown(first.mode)}; "
        f"restart: {shown(_restart_rule(first))}."
    )
    out.print("Run with --storage NAME for the constraints and what-ifs of one target.")


def _restart_rule(rec: Recommendation) -> str:
    r = rec.restart
    if r.fixed_seconds is None:
        return f"{_d(r.seconds)}, {r.source}"
    return f"fixed {_d(r.fixed_seconds)} ({r.fixed_source}) + each class's predicted load" + (
        "" if r.load else f" ({r.source})"
    )


def render_report_files(files) -> None:
    console().print(f"wrote {shown(files.markdown)}, {shown(files.html)} and {shown(', '.join(files.charts))}")
