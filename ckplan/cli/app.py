"""The `ckplan` command. Each command parses flags, calls one library function and renders.

Imports of the library and of heavy modules happen inside the commands, so
that `ckplan size` starts fast.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from ckplan.cli import options as o
from ckplan.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan checkpoint intervals and the storage they need.")


@app.command()
def size(
    params: o.Params = None, model: o.Model = None, optimizer: o.Optimizer = "adam", precision: o.Precision = "bf16-mixed",
    framework: o.Framework = "deepspeed", gpus: o.Gpus = 8, gpus_per_node: o.GpusPerNode = 8, tp: o.Tp = 1, pp: o.Pp = 1,
    zero: o.Zero = 1, dtype: o.Dtype = None, option: o.Option = None,
    interval: Annotated[Optional[str], typer.Option(help="Save interval, e.g. 5m: adds the bandwidth and IOPS it needs.")] = None,
    max_overhead: Annotated[str, typer.Option("--max-overhead", help="Share of the interval a save may block, e.g. 5%.")] = "5%",
    full_manifest: Annotated[bool, typer.Option("--full-manifest", help="List every file.")] = False,
    json: o.Json = False,
) -> None:
    """What one checkpoint save writes: bytes, files, writers, and the bandwidth an interval needs."""
    from ckplan.sizing.plan import interval_demand
    from ckplan.units import parse_duration, parse_fraction

    interval_s = parse_duration(interval, "--interval") if interval is not None else None
    overhead = parse_fraction(max_overhead, "--max-overhead")
    plan = o.build_plan_from_flags(params, model, optimizer, precision, framework, gpus, gpus_per_node, tp, pp, zero, dtype, option)
    if interval_s is not None:
        plan = plan.model_copy(update={"interval": interval_demand(plan, interval_s, overhead)})
    if json:
        from ckplan.render.console import print_json
        print_json(plan)
    else:
        from ckplan.render.plan import render_plan
        render_plan(plan, full_manifest)


@app.command()
def models(json: o.Json = False) -> None:
    """List the model catalog with derived and published parameter counts."""
    from ckplan.catalog import models as load
    from ckplan.render.catalog import ModelCatalog, render_models

    catalog = ModelCatalog.from_catalog(load())
    if json:
        from ckplan.render.console import print_json
        print_json(catalog)
    else:
        render_models(catalog)


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2.

    Typer's parser errors are matched by shape (format_message, exit_code 2)
    because typer versions differ in where click's exception classes live.
    """
    try:
        result = app(standalone_mode=False)
    except InputError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        print("ckplan: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        name = type(exc).__name__
        if name == "NoArgsIsHelpError":
            sys.exit(0)
        if name == "Abort":
            print("ckplan: interrupted", file=sys.stderr)
            sys.exit(130)
        if name == "Exit":
            sys.exit(getattr(exc, "exit_code", 0))
        if hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2:
            _fail(exc.format_message())
        raise
    sys.exit(result if isinstance(result, int) else 0)


def _fail(message: str) -> None:
    print(f"ckplan: error: {message.splitlines()[0] if message else 'bad input'}", file=sys.stderr)
    sys.exit(2)
