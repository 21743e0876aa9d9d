from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ckplan.render.console import console
from ckplan.units import fmt_bytes, fmt_duration, fmt_rate
from ckplan.validate.model import Validation

if TYPE_CHECKING:
    from ckplan.diagnose.records import RecordValidation


def render_validation(v: Validation) -> None:
    out = console()
    out.print(
        f"[bold]{v.framework}[/bold] save of node {v.node}'s share ({v.files} files, {fmt_bytes(v.bytes)}, "
        f"{v.writers} writer processes, scale {v.scale:g}) with {v.saver} on {v.target}, {v.mode}, {v.repeats} repeats "
        "after one unrecorded warm-up save"
    )
    table = Table(title="Predicted against measured", title_justify="left")
    for col in ("", "seconds", "notes"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    p = v.prediction
    how = (
        f"the profile's replay of this plan ({p.write_path} writes)"
        if p.source == "replay"
        else f"{fmt_duration(p.coordination_seconds)} coordination + {fmt_duration(p.bandwidth_seconds)} serialise+write "
        f"({p.limited_by}; {fmt_duration(p.serialize_seconds)} serialising, {p.write_path} curve) + "
        f"{fmt_duration(p.metadata_seconds)} files + {fmt_duration(p.fsync_tail_seconds)} fsync p99"
    )
    table.add_row("predicted save", fmt_duration(v.predicted_seconds), f"{how} ({v.storage})")
    m = v.measured
    table.add_row(
        "measured save (median)",
        fmt_duration(v.measured_seconds),
        f"min {fmt_duration(m.min)} … max {fmt_duration(m.max)} (spread {v.measured_range_percent:.0f}% of the median); "
        f"{fmt_rate(v.effective_bytes_per_s)} effective",
    )
    if v.measured_stall_seconds is not None:
        table.add_row(
            "measured blocking (async)", fmt_duration(v.measured_stall_seconds), "async_save returned; persist ran on"
        )
        table.add_row(
            "predicted stall (async)",
            fmt_duration(v.predicted_stall_seconds),
            f"device→host snapshot model, {v.stall_error_percent:+.0f}% against the blocking part"
            if v.stall_error_percent is not None
            else "device→host snapshot model",
        )
    style = "green" if abs(v.error_percent) <= 15 else "red"
    table.add_row("error", f"[{style}]{v.error_percent:+.1f}%[/{style}]", "(predicted − measured) ÷ measured")
    out.print(table)
    out.print(f"diagnosis: {v.diagnosis}")
    if p.machine is not None:
        out.print(p.machine.describe())
    for note in [*p.notes, *v.notes]:
        out.print(f"[yellow]note:[/yellow] {note}")


def render_record_validation(v: RecordValidation) -> None:
    out = console()
    out.print(
        f"[bold]{v.framework}[/bold] job's own saves ({v.steps} step(s), {v.world_size} ranks, {v.mode}; plan for "
        f"{v.plan_gpus} GPUs) against the prediction on {v.storage}"
    )
    table = Table(title="Predicted against recorded", title_justify="left")
    for col in ("", "value", "notes"):
        table.add_column(col, justify="right" if col == "value" else "left")
    p = v.prediction
    table.add_row(
        "predicted save",
        fmt_duration(v.predicted_seconds),
        f"{fmt_duration(p.coordination_seconds)} coordination + {fmt_duration(p.bandwidth_seconds)} serialise+write "
        f"({p.limited_by}) + {fmt_duration(p.metadata_seconds)} files + {fmt_duration(p.fsync_tail_seconds)} fsync p99"
        if p.source == "model"
        else "the profile's replay of this plan",
    )
    m = v.measured
    table.add_row(
        "recorded save (median step)",
        fmt_duration(m.median),
        f"min {fmt_duration(m.min)} … max {fmt_duration(m.max)} (spread {v.measured_range_percent:.0f}% of the median)",
    )
    if v.measured_blocking is not None and v.predicted_stall_seconds is not None:
        table.add_row(
            "recorded blocking (median)",
            fmt_duration(v.measured_blocking.median),
            f"predicted stall {fmt_duration(v.predicted_stall_seconds)}"
            + (f" ({v.stall_error_percent:+.0f}%)" if v.stall_error_percent is not None else ""),
        )
    table.add_row(
        "bytes a save",
        fmt_bytes(v.recorded_bytes),
        f"the plan's {fmt_bytes(v.plan_bytes)} ({v.bytes_error_percent:+.1f}%)",
    )
    e = v.errors_percent
    style = "green" if v.off == "none" else "red"
    table.add_row(
        "error (median)",
        f"[{style}]{v.error_percent:+.1f}%[/{style}]",
        f"each step's: {e.min:+.1f}% … {e.max:+.1f}%; (predicted − recorded) ÷ recorded",
    )
    out.print(table)
    out.print(f"diagnosis: {v.diagnosis}")
    for note in [*p.notes, *v.notes]:
        out.print(f"[yellow]note:[/yellow] {note}")
