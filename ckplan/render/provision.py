"""The provisioning sweep as a rich table and a PNG chart."""

from __future__ import annotations

from rich.table import Table

from ckplan.planning.provision import Provision, ProvisionSweep
from ckplan.render.console import console, shown
from ckplan.units import fmt_bytes, fmt_duration, fmt_percent, fmt_rate


def render_provision(sweep: ProvisionSweep) -> None:
    out = console()
    out.print(f"[bold]{shown(sweep.plan)}[/bold]")
    targets = ", ".join(
        f"{shown(k)} {fmt_duration(v) if k in ('max_loss_s', 'max_restore_s') else fmt_percent(v)}"
        for k, v in sweep.targets.items()
    )
    out.print(f"Storage needed for {shown(sweep.mode)} saves, targets: {targets}; keep {sweep.keep} checkpoints\n")
    table = Table(title="Provisioning by cluster size", title_justify="left")
    cols = [
        "GPUs",
        "job MTBF",
        "interval",
        "persist",
        "burst bw (agg)",
        "sustained bw",
        "per node",
        "files/s",
        "capacity",
        "staging/node",
        "ETTR",
        "restart",
    ]
    reads = "max_restore_s" in sweep.targets
    cols += (["read bw (agg)", "read/node"] if reads else []) + (["headroom"] if sweep.storage else [])
    for col in cols:
        table.add_column(col, justify="right")
    for r in sweep.rows:
        if not r.feasible:
            table.add_row(
                f"{r.gpus:,}",
                fmt_duration(r.mtbf_s),
                f"[red]not possible: {shown(r.dominant_term)}[/red]",
                *[""] * (len(cols) - 3),
            )
            continue
        table.add_row(*_feasible_row(sweep, r, reads))
    out.print(table)
    if sweep.storage:
        for r in sweep.rows:
            if r.feasible and r.headroom is not None and r.burst_bandwidth_bytes_per_s is not None:
                agg = r.storage_aggregate
                out.print(
                    f"{shown(sweep.storage)} gives {fmt_rate(r.headroom * r.burst_bandwidth_bytes_per_s)} to {r.nodes} nodes"
                    + (f" ({shown(agg.label)})" if agg is not None else "")
                    + f"; the {r.gpus:,}-GPU plan needs {fmt_rate(r.burst_bandwidth_bytes_per_s)}; "
                    f"headroom {_headroom(r)}"
                )
    out.print("[bold]Assumptions[/bold]")
    for a in sweep.assumptions:
        out.print(f" • {shown(a)}")


def _feasible_row(sweep: ProvisionSweep, r: Provision, reads: bool) -> list[str]:
    # a feasible row has every figure (Provision's fields are optional for the infeasible ones)
    assert (
        r.interval_s is not None
        and r.save_seconds is not None
        and r.burst_bandwidth_bytes_per_s is not None
        and r.sustained_bandwidth_bytes_per_s is not None
        and r.node_bandwidth_bytes_per_s is not None
        and r.files_per_s is not None
        and r.expected_ettr is not None
    )
    row = [
        f"{r.gpus:,}",
        fmt_duration(r.mtbf_s),
        fmt_duration(r.interval_s),
        fmt_duration(r.save_seconds),
        fmt_rate(r.burst_bandwidth_bytes_per_s),
        fmt_rate(r.sustained_bandwidth_bytes_per_s),
        fmt_rate(r.node_bandwidth_bytes_per_s),
        f"{r.files_per_s:,.0f}",
        fmt_bytes(r.capacity_bytes),
        fmt_bytes(r.staging_bytes_per_node) if r.staging_bytes_per_node else "–",
        fmt_percent(r.expected_ettr),
        fmt_duration(r.restart.seconds) if r.restart else "–",
    ]
    if reads:
        row += [
            fmt_rate(r.read_bandwidth_bytes_per_s) if r.read_bandwidth_bytes_per_s else "–",
            fmt_rate(r.node_read_bandwidth_bytes_per_s) if r.node_read_bandwidth_bytes_per_s else "–",
        ]
    if sweep.storage and r.headroom is not None:
        style = "green" if r.headroom >= 1 else "red"
        mark = " extrapolated" if r.storage_aggregate is not None and r.storage_aggregate.extrapolated else ""
        row.append(f"[{style}]{_headroom(r)}{mark}[/{style}]")
    return row


def _headroom(r: Provision) -> str:
    """The headroom, or its range where the profile's probe did not reach saturation (the label says why)."""
    assert r.headroom is not None
    return f"{r.headroom:.2f}×" + (f"…{r.headroom_unsaturated:.2f}×" if r.headroom_unsaturated is not None else "")
