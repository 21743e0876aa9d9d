"""A running job: `diagnose` its logs, `watch` its device."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckplan.cli import options as o
from ckplan.render import emit

commands = typer.Typer()


@commands.command()
def diagnose(
    logs: Annotated[
        list[Path],
        typer.Argument(help="Training logs, or save records from ckplan.record (told apart by content; streamed)."),
    ],
    pattern: Annotated[
        str | None,
        typer.Option(help="A regex with (?P<duration>…) seconds, or (?P<start>…) and (?P<end>…) timestamps."),
    ] = None,
    by: Annotated[str, typer.Option(help="Fit against 'save' number or wall 'time'.")] = "save",
    interval: Annotated[str | None, typer.Option(help="The save interval, if the log has no timestamps.")] = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="A plan, to compare with ckplan's prediction.")] = None,
    storage: Annotated[str | None, typer.Option("--storage", help="The target's profile, with --plan.")] = None,
    collective_timeout_s: Annotated[
        str | None,
        typer.Option(
            "--collective-timeout",
            help="The process group's timeout (default: torch.distributed's NCCL default, 10 minutes).",
        ),
    ] = None,
    json: o.Json = False,
) -> None:
    """Is storage the bottleneck? Save times from training logs or save records, their trend, and a verdict."""
    from ckplan import api

    result = api.diagnose(
        logs,
        pattern=pattern,
        by=by,
        interval=interval or None,
        plan=plan,
        storage=storage,
        collective_timeout_s=collective_timeout_s or None,
    )
    emit(result, json)


@commands.command()
def watch(
    target: Annotated[
        str, typer.Argument(help="A path (its block device is watched) or a device such as /dev/nvme0n1.")
    ] = ".",
    interval: Annotated[str, typer.Option(help="Sampling interval.")] = "1s",
    duration: Annotated[str | None, typer.Option(help="Stop after this long (default: until Ctrl-C).")] = None,
    record: Annotated[Path | None, typer.Option(help="Save the timeline as CSV (.csv) or JSON.")] = None,
    json: o.Json = False,
) -> None:
    """A live iostat-like view of the device behind a path: write MB/s, IOPS, %util, w_await, GPU utilisation."""
    from ckplan.diagnose import device
    from ckplan.units import parse_duration

    o.output_file(record, "--record")
    on_sample = None
    if not json:
        from ckplan.render.watch import print_sample

        on_sample = print_sample
    result = device.watch(
        target,
        parse_duration(interval, "--interval"),
        parse_duration(duration, "--duration") if duration else None,
        on_sample,
    )
    if record:
        device.record(result, record)
    emit(result, json)
