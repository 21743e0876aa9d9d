"""A plan as a caller asks for it: the model (a parameter count, a catalog model, a config.json or a checkpoint
directory), the optimizer, the precision, the framework and the world, each bounded where it enters.

`ckplan size`'s flags and `ckplan.api.size`'s arguments both become a PlanRequest (ckplan.inputs), and its `plan()`
is the one way either door reaches build_plan or scan_plan, so both take the same defaults, normalisation and
bounds, and refuse the same inputs in the same words. It sits beside scan.py rather than in the pure sizing/:
`plan()` reads the catalog, a config.json or a checkpoint directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field

from ckplan.errors import InputError
from ckplan.inputs import Flag, parsed, validate_inputs
from ckplan.schema import Int, Model
from ckplan.units import MAX_GPUS, MAX_PARAMETERS, check_range, parse_count

if TYPE_CHECKING:
    from ckplan.sizing.plan import CheckpointPlan

# the parameter count sized when the caller names no model: a 7B model's, whose shapes are the nearest catalog model's
DEFAULT_PARAMETERS = 7 * 10**9


def _count(value: Any, what: str) -> int:
    return int(parse_count(value, what))


def _whole(value: Any, what: str) -> Any:
    """A whole number as given (an int, or the digits of one); anything else is left to the field's type."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise InputError(f"not a valid {what}: {value!r}") from None
    return value


def _world(value: Any, what: str) -> Any:
    """A world size (GPUs, GPUs per node, tp, pp, ep): 1 to MAX_GPUS."""
    value = _whole(value, what)
    if isinstance(value, int):
        check_range(value, what, 1, MAX_GPUS, limit=f"{MAX_GPUS:,} GPUs")
    return value


def _zero(value: Any, what: str) -> Any:
    value = _whole(value, what)
    if isinstance(value, int) and value not in (0, 1, 2, 3):
        raise InputError(f"{what} must be 0, 1, 2 or 3, got {value}")
    return value


def _listed(module: str, name: str) -> str:
    """The names a flag takes, for its help: read when the command is built, since the registries are not imported
    with this module (the frameworks' is a twentieth of `ckplan size`'s start-up)."""
    import importlib

    return ", ".join(getattr(importlib.import_module(module), name)) + "."


def _lower(value: Any) -> Any:
    """Names are matched as lowercase, as the flags have always been: "Adam", "DeepSpeed"."""
    return value.lower() if isinstance(value, str) else value


Name = Annotated[str | None, BeforeValidator(_lower)]
World = Annotated[Int | None, Field(ge=1, le=MAX_GPUS), parsed(_world)]


class PlanRequest(Model):
    """The inputs of a plan; None is "not given": the default of build_plan (or of scan_plan, with from_dir)."""

    model_config = ConfigDict(extra="forbid")

    # an existing checkpoint directory, measured from disk: first, as `--from` heads the plan flags
    from_dir: Annotated[
        Path | None,
        Flag(
            "--from",
            "An existing checkpoint directory (DeepSpeed, DCP, Megatron, HF Trainer): "
            "its files, sizes and writer ranks measured from disk instead of the flags.",
        ),
    ] = None
    params: Annotated[
        Int | None,
        Field(ge=1, le=MAX_PARAMETERS),
        parsed(_count),
        Flag("--params", "Parameter count: 7e9, 7B, 70b, 1.5T.", f"{DEFAULT_PARAMETERS:,}", type=str),
    ] = None
    model: Annotated[str | None, Flag("--model", "A catalog model (see `ckplan models`).")] = None
    config: Annotated[
        Path | None, Flag("--config", "A Hugging Face config.json: the model's exact tensors, read locally.")
    ] = None
    optimizer: Annotated[Name, Flag("--optimizer", lambda: _listed("ckplan.model.states", "OPTIMIZERS"), str)] = None
    precision: Annotated[Name, Flag("--precision", lambda: _listed("ckplan.model.states", "PRECISIONS"), str)] = None
    framework: Annotated[Name, Flag("--framework", lambda: _listed("ckplan.frameworks", "FRAMEWORKS"), str)] = None
    gpus: Annotated[World, Flag("--gpus", "World size.", str)] = None
    gpus_per_node: Annotated[World, Flag("--gpus-per-node", "GPUs per node  [default: 8, or --gpus if fewer]")] = None
    tp: Annotated[World, Flag("--tp", "Tensor-parallel size.", str)] = None
    pp: Annotated[World, Flag("--pp", "Pipeline-parallel size.", str)] = None
    zero: Annotated[
        Int | None,
        Field(ge=0, le=3),
        parsed(_zero),
        Flag(
            "--zero",
            "ZeRO stage 0-3 (3 = FSDP full sharding; hf: 0 = Trainer under DDP, 1-3 = Trainer + DeepSpeed).",
            lambda stage: "1; hf, lightning: 0" if stage is None else str(stage),
        ),
    ] = None
    ep: Annotated[
        World, Flag("--ep", "Expert-parallel size (megatron, dcp, deepspeed; mixture-of-experts models).", str)
    ] = None
    # state or group → dtype: master=none
    dtype_overrides: Annotated[
        dict[str, str], Flag("--dtype", "Override a state's dtype: master=none, exp_avg_sq=bf16, optimizer=bf16.")
    ] = Field(default_factory=dict)
    options: Annotated[  # layout options: writer=fast
        dict[str, str],
        Flag(
            "--option",
            "Layout option, e.g. hf_shard_size=50GB, writer=fast (deepspeed), gather_16bit=true (hf under ZeRO-3).",
        ),
    ] = Field(default_factory=dict)

    @classmethod
    def from_inputs(cls, inputs: dict[str, Any]) -> PlanRequest:
        """A request from a caller's inputs (field name → value; None is not given), or one InputError."""
        return validate_inputs(cls, inputs)

    def given(self) -> list[str]:
        """The inputs given, in field order."""
        return [n for n in PlanRequest.model_fields if getattr(self, n) not in (None, [], {})]

    def plan(self, gpus: int | None = None) -> CheckpointPlan:
        """The plan: measured from `from_dir`, or built from the inputs (at `gpus`, for a sweep)."""
        if self.from_dir is not None:
            return self._measured(gpus)
        from ckplan import catalog
        from ckplan.sizing.plan import build_plan, nearest_shape

        models = [f"‹{n}›" for n in ("params", "model", "config") if getattr(self, n) is not None]
        if len(models) > 1:
            raise InputError(
                f"give one of ‹params›, ‹model› or ‹config›, not {'both' if len(models) == 2 else 'all three'} "
                f"(got {' and '.join(models)})"
            )
        if self.config is not None:
            arch, parameters = catalog.config_model(self.config), None
        elif self.model is not None:
            arch, parameters = catalog.model(self.model), None
        else:
            parameters = DEFAULT_PARAMETERS if self.params is None else self.params
            arch = nearest_shape(parameters, catalog.models())
        chosen: dict[str, Any] = {
            k: v
            for k, v in dict(
                optimizer=self.optimizer,
                precision=self.precision,
                framework=self.framework,
                gpus=gpus if gpus is not None else self.gpus,
                gpus_per_node=self.gpus_per_node,
                tp=self.tp,
                pp=self.pp,
                zero=self.zero,
                ep=self.ep,
            ).items()
            if v is not None
        }
        return build_plan(
            arch=arch,
            parameters=parameters,
            model_name=arch.name if self.model or self.config else None,
            dtype_overrides=self.dtype_overrides,
            options=self.options,
            **chosen,
        )

    def _measured(self, gpus: int | None) -> CheckpointPlan:
        """The plan measured from a checkpoint's files; only the inputs that the names leave open."""
        from ckplan.scan import scan_plan

        open_ = ("from_dir", "gpus_per_node", "gpus", "params", "ep")
        others = [f"‹{n}›" for n in self.given() if n not in open_]
        if others:
            raise InputError(
                f"‹from_dir› measures the plan from the checkpoint's files: drop {', '.join(others)} "
                "(‹gpus_per_node›, ‹gpus›, ‹params› and ‹ep› go with it)"
            )
        if gpus is not None:
            raise InputError("‹from_dir› measures one checkpoint: it cannot be resized to other GPU counts")
        assert self.from_dir is not None
        return scan_plan(
            self.from_dir, gpus_per_node=self.gpus_per_node, gpus=self.gpus, parameters=self.params, ep=self.ep
        )


def plan_input(plan: Any) -> Any:
    """A plan field's input: a plan file's path or a plan request as the plan it makes; a plan (or anything else)
    is left to the field's type."""
    return as_plan(plan) if isinstance(plan, str | os.PathLike | PlanRequest) else plan


def as_plan(plan: CheckpointPlan | PlanRequest | str | os.PathLike[str]) -> CheckpointPlan:
    """A plan given whole, made from a request, or read from a plan file."""
    from ckplan.sizing.plan import CheckpointPlan

    if isinstance(plan, CheckpointPlan):
        return plan
    if isinstance(plan, PlanRequest):
        return plan.plan()
    return load_plan(Path(plan))


def load_plan(path: Path) -> CheckpointPlan:
    """A plan file, as `ckplan size --json` writes it."""
    from ckplan.readers import MAX_PLAN_BYTES, read_json_model
    from ckplan.sizing.plan import CheckpointPlan

    return read_json_model(
        path, CheckpointPlan, "plan", MAX_PLAN_BYTES, expected=" (a plan comes from `ckplan size --json`)"
    )
