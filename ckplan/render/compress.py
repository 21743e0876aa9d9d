from rich.table import Table

from ckplan.compressibility import CompressReport
from ckplan.render.console import console, shown


def render_compress(report: CompressReport) -> None:
    table = Table(
        title=f"Lossless compression on {shown(report.source)} ({report.sample_bytes / 1e6:.0f} MB)",
        title_justify="left",
    )
    for col in ("codec", "data", "ratio", "MB/s per core"):
        table.add_column(col, justify="left" if col in ("codec", "data") else "right")
    for r in report.results:
        table.add_row(shown(r.codec), shown(r.data), f"{r.ratio:.3f}×", f"{r.bytes_per_s_per_core / 1e6:,.0f}")
    for codec, ratio in report.mix_ratio.items():
        table.add_row(
            f"[bold]{shown(codec)}[/bold]",
            "whole save (byte mix)",
            f"[bold]{ratio:.3f}×[/bold]",
            f"{report.mix_bytes_per_s_per_core[codec] / 1e6:,.0f}",
        )
    console().print(table)
    console().print(
        f"Best ratio at ≥ 200 MB/s per core: {shown(report.recommended)}. The compression what-if in `recommend` "
        "uses profiles/compression.toml, measured this way."
    )
