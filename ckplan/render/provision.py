"""The provisioning sweep as a rich table and a PNG chart."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ckplan.errors import InputError
from ckplan.planning.provision import ProvisionSweep
from ckplan.render.console import console
from ckplan.units import fmt_bytes, fmt_duration, fmt_percent, fmt_rate


def render_provision(sweep: ProvisionSweep) -> None:
    out = console()
    out.print(f"[bold]{sweep.plan}[/bold]")
    targets = ", ".join(f"{k} {fmt_percent(v) if k != 'max_loss_s' else fmt_duration(v)}" for k, v in sweep.targets.items())
    out.print(f"Storage needed for {sweep.mode} saves, targets: {targets}; keep {sweep.keep} checkpoints\n")
    table = Table(title="Provisioning by cluster size", title_justify="left")
    cols = ["GPUs", "job MTBF", "interval", "persist", "burst bw (agg)", "sustained bw", "per node", "files/s", "capacity",
            "staging/node", "ETTR"] + (["headroom"] if sweep.storage else [])
    for col in cols:
        table.add_column(col, justify="right")
    for r in sweep.rows:
        if not r.feasible:
            table.add_row(f"{r.gpus:,}", fmt_duration(r.mtbf_s), f"[red]not possible: {r.dominant_term}[/red]",
                          *[""] * (len(cols) - 3))
            continue
        row = [f"{r.gpus:,}", fmt_duration(r.mtbf_s), fmt_duration(r.interval_s), fmt_duration(r.save_seconds),
               fmt_rate(r.burst_bandwidth_bytes_per_s), fmt_rate(r.sustained_bandwidth_bytes_per_s),
               fmt_rate(r.node_bandwidth_bytes_per_s), f"{r.files_per_s:,.0f}", fmt_bytes(r.capacity_bytes),
               fmt_bytes(r.staging_bytes_per_node) if r.staging_bytes_per_node else "–", fmt_percent(r.expected_ettr)]
        if sweep.storage:
            style = "green" if r.headroom >= 1 else "red"
            row.append(f"[{style}]{r.headroom:.2f}×[/{style}]")
        table.add_row(*row)
    out.print(table)
    if sweep.storage:
        for r in sweep.rows:
            if r.feasible:
                out.print(f"{sweep.storage} gives {fmt_rate(r.headroom * r.burst_bandwidth_bytes_per_s)} to {r.nodes} nodes; "
                          f"the {r.gpus:,}-GPU plan needs {fmt_rate(r.burst_bandwidth_bytes_per_s)}; headroom {r.headroom:.2f}×")
    out.print("[bold]Assumptions[/bold]")
    for a in sweep.assumptions:
        out.print(f" • {a}")


def provision_chart(sweeps: list[ProvisionSweep], path: Path) -> None:
    from ckplan.render.charts import pyplot

    plt = pyplot("--chart")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for sweep in sweeps:
        rows = [r for r in sweep.rows if r.feasible]
        ax.plot([r.gpus for r in rows], [r.burst_bandwidth_bytes_per_s / 1e9 for r in rows], marker="o", label=f"{sweep.mode}: burst")
        ax.plot([r.gpus for r in rows], [r.sustained_bandwidth_bytes_per_s / 1e9 for r in rows], marker="x", ls="--",
                label=f"{sweep.mode}: sustained")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("aggregate write bandwidth needed (GB/s)")
    ax.set_title(sweeps[0].plan[:90], fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
    plt.close(fig)
