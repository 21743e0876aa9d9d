"""`ckplan compress-test`: zstd and lz4 on real tensor bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckplan.cli import options as o
from ckplan.render import emit

commands = typer.Typer()


@commands.command("compress-test")
def compress_test(
    file: Annotated[
        Path | None,
        typer.Option("--file", help="Tensor bytes to test (a shard); default: generated bf16/fp32 Adam state."),
    ] = None,
    json: o.Json = False,
) -> None:
    """Measure zstd and lz4 ratio and per-core speed on real tensor bytes."""
    from ckplan.compressibility import measure_compressibility

    emit(measure_compressibility(file), json)
