"""`ckplan size` and `ckplan models`: what one save writes, and the model catalog."""

from __future__ import annotations

from typing import Annotated

import typer

from ckplan.cli import options as o
from ckplan.planning.defaults import DEFAULT_MAX_OVERHEAD  # plain values: costs nothing at start-up
from ckplan.render import emit
from ckplan.units import fmt_percent  # parse_fraction's module, loaded by every `size` run anyway

commands = typer.Typer()


@commands.command()
@o.plan_options(plan_file=False)
def size(
    spec: o.PlanSpec,
    interval: Annotated[
        str | None, typer.Option(help="Save interval, e.g. 5m: adds the bandwidth and IOPS it needs.")
    ] = None,
    max_overhead: Annotated[
        str, typer.Option("--max-overhead", help="Share of the interval a save may block, e.g. 5%.")
    ] = fmt_percent(DEFAULT_MAX_OVERHEAD),
    full_manifest: Annotated[bool, typer.Option("--full-manifest", help="List every file.")] = False,
    json: o.Json = False,
) -> None:
    """What one checkpoint save writes: bytes, files, writers, and the bandwidth an interval needs."""
    from ckplan.api import size_request

    emit(size_request(spec, interval=interval, max_overhead=max_overhead), json, full_manifest=full_manifest)


@commands.command()
def models(json: o.Json = False) -> None:
    """List the model catalog with derived and published parameter counts."""
    from ckplan.catalog import ModelCatalog
    from ckplan.catalog import models as load

    emit(ModelCatalog.from_catalog(load()), json)
