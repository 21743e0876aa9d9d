from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ckplan.render.console import console, shown
from ckplan.units import fmt_bytes, fmt_duration, fmt_rate
from ckplan.validate.model import LOAD_TARGET_PERCENT, NOISY_SPREAD, RestoreValidation, Validation

if TYPE_CHECKING:
    from ckplan.diagnose.records import RecordValidation


def render_validation(v: Validation) -> None:
    out = console()
    out.print(
        f"[bold]{shown(v.framework)}[/bold] save of node {v.node}'s share ({v.files} files, {fmt_bytes(v.bytes)}, "
        f"{v.writers} writer processes, scale {v.scale:g}) with {shown(v.saver)} on {shown(v.target)}, {shown(v.mode)}, "
        f"{v.repeats} repeats "
        "after one unrecorded warm-up save"
    )
    table = Table(title="Predicted against measured", title_justify="left")
    for col in ("", "seconds", "notes"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    p = v.prediction
    how = (
        f"the profile's replay of this plan ({shown(p.write_path)} writes)"
        if p.source == "replay"
        else f"{fmt_duration(p.coordination_seconds)} coordination + {fmt_duration(p.bandwidth_seconds)} serialise+write "
        f"({shown(p.limited_by)}; {fmt_duration(p.serialize_seconds)} serialising, {shown(p.write_path)} curve) + "
        f"{fmt_duration(p.metadata_seconds)} files + {fmt_duration(p.fsync_tail_seconds)} fsync p99"
    )
    table.add_row("predicted save", fmt_duration(v.predicted_seconds), f"{how} ({shown(v.storage)})")
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
    out.print(f"diagnosis: {shown(v.diagnosis)}")
    if p.machine is not None:
        out.print(shown(p.machine.describe()))
    for note in [*p.notes, *v.notes]:
        out.print(f"[yellow]note:[/yellow] {shown(note)}")
    if v.restore is not None:
        render_restore(v.restore)


def render_restore(r: RestoreValidation) -> None:
    out = console()
    out.print(
        f"\n[bold]Restore[/bold]: node {r.node}'s {r.readers} ranks load the last save's files with {shown(r.loader)}, "
        f"{r.files} files, {fmt_bytes(r.bytes)} distinct ({fmt_bytes(r.requested_bytes)} requested), "
        f"{'cold (pages dropped before each load)' if r.cold else 'from memory (tmpfs: no pages to drop)'}, "
        f"{r.repeats} repeats after one unrecorded warm-up load"
    )
    table = Table(title="Predicted against measured load", title_justify="left")
    for col in ("", "seconds", "notes"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    p = r.prediction
    how = (
        "the profile's read replay of this plan"
        if p.source == "replay"
        else f"{fmt_duration(p.deserialize_seconds)} deserialise + {fmt_duration(p.read_seconds)} read "
        f"({shown(p.limited_by)}; {shown(p.read_curve)} curve, {fmt_rate(p.node_read_bandwidth_bytes_per_s)} at "
        f"{p.streams_per_node:.3g} streams)"
    )
    table.add_row("predicted load", fmt_duration(r.predicted_seconds), how)
    m = r.measured
    table.add_row(
        "measured load (median)",
        fmt_duration(r.measured_seconds),
        f"min {fmt_duration(m.min)} … max {fmt_duration(m.max)} (spread {r.measured_range_percent:.0f}% of the median); "
        f"{fmt_rate(r.effective_bytes_per_s)} effective",
    )
    style = "green" if r.holds else "red"
    judged = (
        f"judged on the error: within ±{LOAD_TARGET_PERCENT:.0f}% or inside min…max"
        if r.judged_on == "error"
        else f"judged on the range alone: the loads spread ≥{NOISY_SPREAD:.0%} of their median"
    )
    table.add_row(
        "error", f"[{style}]{r.error_percent:+.1f}%[/{style}]", f"(predicted − measured) ÷ measured; {judged}"
    )
    out.print(table)
    out.print(f"diagnosis: {shown(r.diagnosis)}")
    for note in [*p.notes, *r.notes]:
        out.print(f"[yellow]note:[/yellow] {shown(note)}")


def render_record_validation(v: RecordValidation) -> None:
    out = console()
    out.print(
        f"[bold]{shown(v.framework)}[/bold] job's own saves ({v.steps} step(s), {v.world_size} ranks, {shown(v.mode)}; "
        f"plan for {v.plan_gpus} GPUs) against the prediction on {shown(v.storage)}"
    )
    table = Table(title="Predicted against recorded", title_justify="left")
    for col in ("", "value", "notes"):
        table.add_column(col, justify="right" if col == "value" else "left")
    p = v.prediction
    table.add_row(
        "predicted save",
        fmt_duration(v.predicted_seconds),
        f"{fmt_duration(p.coordination_seconds)} coordination + {fmt_duration(p.bandwidth_seconds)} serialise+write "
        f"({shown(p.limited_by)}) + {fmt_duration(p.metadata_seconds)} files + {fmt_duration(p.fsync_tail_seconds)} fsync p99"
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
    out.print(f"diagnosis: {shown(v.diagnosis)}")
    for note in [*p.notes, *v.notes]:
        out.print(f"[yellow]note:[/yellow] {shown(note)}")
