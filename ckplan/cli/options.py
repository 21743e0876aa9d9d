"""Options shared by every command that takes a training plan, and how they become a plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ckplan.errors import InputError

DEFAULT_PARAMS = "7e9"

Params = Annotated[Optional[str], typer.Option("--params", help="Parameter count: 7e9, 7B, 70b, 1.5T.", rich_help_panel="Plan")]
Model = Annotated[Optional[str], typer.Option("--model", help="A catalog model (see `ckplan models`).", rich_help_panel="Plan")]
Optimizer = Annotated[str, typer.Option(help="adam, adamw, sgd, sgd-momentum, lion, adafactor, adam-8bit, muon, none.", rich_help_panel="Plan")]
Precision = Annotated[str, typer.Option(help="bf16-mixed, fp16-mixed, fp32, bf16.", rich_help_panel="Plan")]
Framework = Annotated[str, typer.Option(help="deepspeed, dcp, megatron, hf, lightning.", rich_help_panel="Plan")]
Gpus = Annotated[int, typer.Option(help="World size.", rich_help_panel="Plan")]
GpusPerNode = Annotated[Optional[int], typer.Option("--gpus-per-node", help="GPUs per node  [default: 8, or --gpus if fewer]", show_default=False, rich_help_panel="Plan")]
Tp = Annotated[int, typer.Option("--tp", help="Tensor-parallel size.", rich_help_panel="Plan")]
Pp = Annotated[int, typer.Option("--pp", help="Pipeline-parallel size.", rich_help_panel="Plan")]
Zero = Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3 (3 = FSDP full sharding).", rich_help_panel="Plan")]
Dtype = Annotated[Optional[list[str]], typer.Option("--dtype", help="Override a state's dtype: master=none, exp_avg_sq=bf16, optimizer=bf16.", rich_help_panel="Plan")]
Option = Annotated[Optional[list[str]], typer.Option("--option", help="Layout option, e.g. hf_shard_size=50GB.", rich_help_panel="Plan")]
PlanFile = Annotated[Optional[Path], typer.Option("--plan", help="A plan from `ckplan size --json` instead of the flags.", rich_help_panel="Plan")]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON (the same model the table shows).")]


def pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"{flag} takes NAME=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


# The flags that describe a plan, by parameter name; a command given --plan takes none of them.
PLAN_FLAGS = {"params": "--params", "model": "--model", "optimizer": "--optimizer", "precision": "--precision",
              "framework": "--framework", "gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "tp": "--tp", "pp": "--pp",
              "zero": "--zero", "dtype": "--dtype", "option": "--option"}


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set this parameter of the running command, rather than leaving its default.

    The source is compared by name: typer 0.29 vendors click, so its ParameterSource is not click's.
    """
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def build_plan_from_flags(params, model, optimizer, precision, framework, gpus, gpus_per_node, tp, pp, zero, dtype, option):
    from ckplan import catalog
    from ckplan.sizing.plan import build_plan, nearest_shape
    from ckplan.units import parse_count

    if params is not None and model is not None:
        raise InputError("give --params or --model, not both")
    if model is not None:
        arch, parameters = catalog.model(model), None
    else:  # an empty --params is refused by parse_count, not replaced by the default
        parameters = int(parse_count(DEFAULT_PARAMS if params is None else params, "--params"))
        arch = nearest_shape(parameters, catalog.models())
    return build_plan(arch=arch, parameters=parameters, model_name=arch.name if model else None,
                      optimizer=optimizer.lower(), precision=precision.lower(), framework=framework.lower(),
                      gpus=gpus, gpus_per_node=gpus_per_node, tp=tp, pp=pp, zero=zero,
                      dtype_overrides=pairs(dtype, "--dtype"), options=pairs(option, "--option"))


def load_plan(path: Path):
    from ckplan.readers import MAX_PLAN_BYTES, read_json_model
    from ckplan.sizing.plan import CheckpointPlan

    return read_json_model(path, CheckpointPlan, "plan", MAX_PLAN_BYTES, expected=" (a plan comes from `ckplan size --json`)")


def resolve_plan(ctx: typer.Context, plan_file, params, model, optimizer, precision, framework, gpus, gpus_per_node, tp, pp,
                 zero, dtype, option):
    if plan_file is not None:
        both = [flag for name, flag in PLAN_FLAGS.items() if given(ctx, name)]
        if both:
            raise InputError(f"give --plan or the plan flags, not both (got --plan and {', '.join(both)})")
        return load_plan(plan_file)
    return build_plan_from_flags(params, model, optimizer, precision, framework, gpus, gpus_per_node, tp, pp, zero, dtype, option)
