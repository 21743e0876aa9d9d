"""Rich rendering of a CheckpointPlan."""

from __future__ import annotations

from rich.table import Table

from ckplan.render.console import console, shown
from ckplan.sizing.plan import CheckpointPlan
from ckplan.units import fmt_bytes, fmt_duration, fmt_percent, fmt_rate

MANIFEST_ROWS = 20


def render_plan(plan: CheckpointPlan, full_manifest: bool = False) -> None:
    out = console()
    out.print(f"[bold]{shown(plan.describe())}[/bold]")
    out.print(
        f"One save writes [bold]{fmt_bytes(plan.total_bytes)}[/bold] in {plan.file_count:,} files "
        f"from {plan.writers:,} writer(s) on {plan.nodes_writing} node(s)"
        + (f"; {plan.bytes_per_parameter:.2f} bytes/param of state.\n" if plan.parameters else ".\n")
    )

    out.print(_states_table(plan))

    nodes = Table(title="Who writes it", title_justify="left")
    for col in ("node", "writers", "files", "bytes"):
        nodes.add_column(col, justify="right")
    listed = plan.nodes if len(plan.nodes) <= 8 else plan.nodes[:4] + plan.nodes[-2:]
    for n in listed:
        nodes.add_row(str(n.node), str(n.writers), f"{n.files:,}", fmt_bytes(n.bytes))
    if len(listed) < len(plan.nodes):
        nodes.add_row("…", f"({len(plan.nodes) - len(listed)} more)", "", "")
    out.print(nodes)
    out.print(
        f"Busiest rank writes {fmt_bytes(plan.bytes_per_rank_max)}; busiest node {fmt_bytes(plan.bytes_per_node_max)}.\n"
    )

    manifest = Table(title="File manifest", title_justify="left")
    for col in ("path", "rank", "node", "bytes"):
        manifest.add_column(col, justify="left" if col == "path" else "right")
    files = plan.manifest if full_manifest else plan.manifest[:MANIFEST_ROWS]
    for f in files:
        manifest.add_row(shown(f.path), str(f.rank), str(f.node), fmt_bytes(f.bytes))
    if len(files) < len(plan.manifest):
        manifest.add_row(f"… {len(plan.manifest) - len(files):,} more files (--full-manifest or --json)", "", "", "")
    out.print(manifest)

    ops = plan.operations
    out.print(
        f"Operations per save: {ops.creates:,} creates, {ops.writes:,} writes, {ops.fsyncs:,} fsyncs, "
        f"{ops.renames:,} renames = {ops.total:,}\n"
    )

    if plan.restore:
        _render_restore(plan)

    _render_demand(plan)

    out.print("[bold]Assumptions[/bold]")
    for a in plan.assumptions:
        out.print(f" • {shown(a)}")


def _states_table(plan: CheckpointPlan) -> Table:
    def per_param(nbytes: int, digits: int = 3) -> str:  # a plan measured from disk may not know its parameters
        return f"{nbytes / plan.parameters:.{digits}f}" if plan.parameters else "–"

    states = Table(title="What one save holds", title_justify="left")
    for col in ("state", "dtype", "bytes/param", "bytes"):
        states.add_column(col, justify="right" if col != "state" else "left")
    for s in plan.breakdown:
        states.add_row(shown(s.name), shown(s.dtype), per_param(s.bytes), fmt_bytes(s.bytes))
    for s in plan.not_saved:
        states.add_row(
            f"[dim]{shown(s.name)} (held, not saved)[/dim]",
            f"[dim]{shown(s.dtype)}[/dim]",
            "[dim]0[/dim]",
            "[dim]–[/dim]",
        )
    states.add_row(
        "small files + file overhead", "", per_param(plan.small_file_bytes, 4), fmt_bytes(plan.small_file_bytes)
    )
    states.add_row(
        "[bold]total[/bold]",
        "",
        f"[bold]{per_param(plan.total_bytes)}[/bold]",
        f"[bold]{fmt_bytes(plan.total_bytes)}[/bold]",
    )
    return states


def _render_demand(plan: CheckpointPlan) -> None:
    out = console()
    if plan.interval:
        d = plan.interval
        demand = Table(
            title=f"Demand for a save every {fmt_duration(d.interval_s)} "
            f"blocking at most {fmt_percent(d.max_overhead)} ({fmt_duration(d.stall_budget_s)})",
            title_justify="left",
        )
        demand.add_column("figure")
        demand.add_column("value", justify="right")
        demand.add_row("average write bandwidth (bytes per save ÷ interval)", fmt_rate(d.average_bandwidth_bytes_per_s))
        demand.add_row("burst bandwidth, total (save within the stall budget)", fmt_rate(d.burst_bandwidth_bytes_per_s))
        demand.add_row("burst bandwidth, busiest node", fmt_rate(d.burst_bandwidth_per_node_bytes_per_s))
        demand.add_row("naive N·C/T", fmt_rate(d.naive_bandwidth_bytes_per_s))
        demand.add_row("operations per save / IOPS in the budget", f"{d.ops_per_save:,} / {d.iops_needed:,.0f} IOPS")
        out.print(demand)
        out.print(f"[dim]{shown(d.naive_explanation)}[/dim]\n")

    if plan.typical_demand:
        first = plan.typical_demand[0]
        typical = Table(
            title=f"Demand at typical intervals, each save blocking at most {fmt_percent(first.max_overhead)} "
            "of it (--interval for one exact figure)",
            title_justify="left",
        )
        for col in ("save every", "average bandwidth", "burst, total", "burst, busiest node", "IOPS in the budget"):
            typical.add_column(col, justify="right")
        for d in plan.typical_demand:
            typical.add_row(
                fmt_duration(d.interval_s),
                fmt_rate(d.average_bandwidth_bytes_per_s),
                fmt_rate(d.burst_bandwidth_bytes_per_s),
                fmt_rate(d.burst_bandwidth_per_node_bytes_per_s),
                f"{d.iops_needed:,.0f}",
            )
        out.print(typical)
        out.print("")


def _render_restore(plan: CheckpointPlan) -> None:
    r = plan.restore
    assert r is not None
    out = console()
    table = Table(title="What a restart reads (cold)", title_justify="left")
    for col in ("", "requested", "from storage", "files"):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row("busiest rank", fmt_bytes(r.rank_bytes), "", "")
    table.add_row(
        f"busiest node ({r.readers_per_node} reader(s))",
        fmt_bytes(r.node_requested_bytes),
        fmt_bytes(r.node_bytes),
        f"{r.node_files:,}",
    )
    table.add_row(
        f"all {r.nodes} node(s)",
        fmt_bytes(r.requested_bytes),
        fmt_bytes(r.storage_bytes),
        f"{len(r.files) + r.own_files:,}",
    )
    out.print(table)
    formats = ", ".join(f"{shown(fmt)} {fmt_bytes(b)}" for fmt, b in sorted(r.rank_bytes_by_format.items()) if b)
    out.print(
        f"Read amplification {r.read_amplification:.2f}× the {fmt_bytes(plan.total_bytes)} checkpoint; "
        f"the busiest rank deserialises {formats}.\n[dim]Page cache: {shown(r.page_cache)}.[/dim]"
    )
    for note in r.notes:
        out.print(f"[dim] • {shown(note)}[/dim]")
    out.print("")
