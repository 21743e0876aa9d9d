"""Live rows while watching, and the summary table after."""

from __future__ import annotations

from rich.table import Table

from ckplan.diagnose.device import AWAIT_SLOW_MS, UTIL_SATURATED, Sample, WatchResult
from ckplan.render.console import console, shown


def _util(v: float) -> str:
    return f"[red]{v:.0f}%[/red]" if v >= UTIL_SATURATED else f"{v:.0f}%"


def _await(v: float) -> str:
    return f"[red]{v:.1f} ms[/red]" if v >= AWAIT_SLOW_MS else f"{v:.1f} ms"


def print_sample(s: Sample) -> None:
    gpu = f"  GPU {s.gpu_util_percent:.0f}%" if s.gpu_util_percent is not None else ""
    console().print(
        f"{s.t:7.1f} s  write {s.write_bytes_per_s / 1e6:9.1f} MB/s  {s.write_iops:8.0f} IOPS  "
        f"util {_util(s.util_percent)}  w_await {_await(s.w_await_ms)}{gpu}"
    )


def render_watch(r: WatchResult) -> None:
    title = f"{shown(r.device)} behind {shown(r.target)}: {len(r.samples)} samples over {r.duration_s:.1f} s"
    # rich wraps a title to the table's width, and these four short columns are narrower than the title
    table = Table(title=title, title_justify="left", min_width=len(title))
    for col in ("metric", "peak", "p99", "median"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    table.add_row("write MB/s", *(f"{getattr(r.write_bytes_per_s, k) / 1e6:,.1f}" for k in ("peak", "p99", "median")))
    table.add_row("write IOPS", *(f"{getattr(r.write_iops, k):,.0f}" for k in ("peak", "p99", "median")))
    table.add_row("%util", *(_util(getattr(r.util_percent, k)) for k in ("peak", "p99", "median")))
    table.add_row("w_await", *(_await(getattr(r.w_await_ms, k)) for k in ("peak", "p99", "median")))
    if r.gpu_util_percent:
        table.add_row("GPU util", *(f"{getattr(r.gpu_util_percent, k):.0f}%" for k in ("peak", "p99", "median")))
    out = console()
    out.print(table)
    out.print(
        f"saturated (%util ≥ {UTIL_SATURATED:.0f}%) for {r.saturated_s:.1f} s; "
        f"w_await ≥ {AWAIT_SLOW_MS:.0f} ms for {r.slow_await_s:.1f} s"
    )
