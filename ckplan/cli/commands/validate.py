"""`ckplan validate`: real PyTorch saves against the prediction."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckplan.children import interrupt_on_signals
from ckplan.cli import options as o
from ckplan.errors import InputError
from ckplan.render import emit

commands = typer.Typer()


@commands.command()
def validate(
    plan: Annotated[Path, typer.Option("--plan", help="A plan from `ckplan size --json`.")],
    storage: Annotated[
        str, typer.Option("--storage", help="The target's profile (from `ckplan probe`), a saved name or a file.")
    ],
    path: Annotated[str | None, typer.Argument(help="A directory on the target to save into.")] = None,
    record: Annotated[
        list[Path] | None,
        typer.Option(help="Save records from the job (ckplan.record): compare them with the prediction instead."),
    ] = None,
    scale: Annotated[float, typer.Option(help="Shrink every file by this factor to fit the machine.")] = 1.0,
    repeats: Annotated[int, typer.Option(help="Saves to time; the median is reported.")] = 3,
    mode: Annotated[
        str, typer.Option(help="sync, or async (DCP async_save: blocking part and persist apart).")
    ] = "sync",
    max_bytes: Annotated[str | None, typer.Option("--max-bytes", help="Most bytes one save may write.")] = None,
    restore: Annotated[
        bool,
        typer.Option(
            "--restore",
            help="Then load the last save's files cold, one process per rank, as the busiest restore node's ranks "
            "read them on resume, --repeats times, against the load-time prediction.",
        ),
    ] = False,
    json: o.Json = False,
) -> None:
    """Save one node's share of a plan with real PyTorch calls and compare the time with the prediction; with
    --record, compare the prediction with a job's own recorded saves instead."""
    from ckplan import profile_store
    from ckplan.units import parse_bytes
    from ckplan.validate.run import validate as run

    if record:
        if path is not None or restore:
            raise InputError("give a directory to save into (and --restore), or --record, not both")
        from ckplan.diagnose.records import validate_records

        emit(validate_records(record, o.load_plan(plan), profile_store.resolve(storage)), json)
        return
    if path is None:
        raise InputError("give a directory on the target to save into (or --record RECORD.jsonl)")
    if mode not in ("sync", "async"):
        raise InputError(f"--mode must be sync or async, got {mode!r}")
    with interrupt_on_signals():
        result = run(
            Path(path),
            o.load_plan(plan),
            profile_store.resolve(storage),
            scale=scale,
            repeats=repeats,
            mode=mode,
            max_bytes=parse_bytes(max_bytes, "--max-bytes") if max_bytes else None,
            restore=restore,
        )
    emit(result, json)
