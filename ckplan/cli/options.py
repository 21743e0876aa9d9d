"""Option groups: the flags that describe a plan and the flags of a policy, built from their models' fields.

A command decorated with `@plan_options(...)` receives `spec: PlanSpec`, and with `@policy_options(...)` receives
`policy: Policy`; typer sees one option per field that has a Flag (ckplan.inputs) in the command's signature as if
it were written there. A field's flag, help and panel are declared on the field, beside its type and bounds, and
nothing here names a field but the plan file's place first. The options default to "not given" (None): a plan's
defaults are `build_plan`'s own and a policy's are `Policy`'s, shown in `--help` from there.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from inspect import Parameter
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ckplan.errors import InputError
from ckplan.inputs import Flag, flagged_fields, validate_inputs
from ckplan.request import PlanRequest

if TYPE_CHECKING:
    from ckplan.sizing.plan import CheckpointPlan

KEYWORD_ONLY = Parameter.KEYWORD_ONLY

Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON (the same model the table shows).")]


def pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"{flag} takes NAME=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def load_plan(path: Path) -> CheckpointPlan:
    from ckplan.request import load_plan

    return load_plan(path)


def output_file(path: Path | None, flag: str) -> None:
    """Refuse an output file ckplan cannot write before the work whose result it would hold (ckplan.outputs)."""
    if path is not None:
        from ckplan.outputs import check_output_file

        check_output_file(path, flag)


def preset(quick: bool, thorough: bool) -> Literal["quick", "default", "thorough"]:
    """--quick / --thorough / neither, as the measurement preset they choose."""
    if quick and thorough:
        raise InputError("give --quick or --thorough, not both")
    return "quick" if quick else "thorough" if thorough else "default"


def _cli_type(flag: Flag, info: FieldInfo) -> Any:
    """What the flag reads: the flag's own type, else a dict field's NAME=VALUE items or a list field's items, an
    int or a path as such, and anything else as text, which the field's validator reads ("1h", "5%", "2GB/s")."""
    if flag.type is not None:
        return flag.type
    kind = _kind(info)
    if get_origin(kind) in (dict, list):
        return list[str]
    return kind if kind in (int, Path) else str


def _kind(info: FieldInfo) -> Any:
    kinds = [a for a in get_args(info.annotation) if a is not type(None)] if _optional(info) else [info.annotation]
    return get_args(kinds[0])[0] if get_origin(kinds[0]) is Annotated else kinds[0]


def _optional(info: FieldInfo) -> bool:
    return get_origin(info.annotation) in (Union, UnionType)


def _group(
    inject: str, fields: dict[str, tuple[Flag, FieldInfo]], shown: dict[str, Any], build: Callable[[dict], Any]
) -> Callable:
    """Replace the command's `inject` parameter by one option per field in what typer sees (the option's parameter
    is the field's name, so an InputError's ‹field› renders as its flag); call it with build(the fields given)."""

    def parameter(name: str, flag: Flag, info: FieldInfo) -> inspect.Parameter:
        default = shown.get(name, info.default)
        text = flag.shown(default) if callable(flag.shown) else flag.shown
        option = typer.Option(
            flag.flag,
            help=flag.help() if callable(flag.help) else flag.help,
            rich_help_panel=flag.panel,
            show_default=text if text is not None else False,
            metavar=flag.metavar,
        )
        cli_type = _cli_type(flag, info)
        return inspect.Parameter(name, KEYWORD_ONLY, default=None, annotation=Annotated[cli_type | None, option])

    def given(values: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in values.items():
            if value not in (None, []):
                flag, info = fields[name]
                out[name] = pairs(value, flag.flag) if get_origin(_kind(info)) is dict else value
        return out

    def decorate(func: Callable) -> Callable:
        hints = get_type_hints(func, include_extras=True)  # typer reads __signature__'s annotations as they are
        own = [
            p.replace(kind=KEYWORD_ONLY, annotation=hints[p.name])
            for p in inspect.signature(func).parameters.values()
            if p.name != inject
        ]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            kwargs[inject] = build(given({n: kwargs.pop(n) for n in fields}))
            return func(**kwargs)

        # the group's options before --json, which ends every command's list in --help
        last = [p for p in own if p.name == "json"]
        group = [parameter(n, f, i) for n, (f, i) in fields.items()]
        signature = inspect.Signature([p for p in own if p.name != "json"] + group + last)
        command.__signature__ = signature  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return command

    return decorate


class PlanSpec(PlanRequest):
    """A plan as the flags give it: a plan file (--plan), or the plan request the other flags make."""

    plan_file: Annotated[Path | None, Flag("--plan", "A plan from `ckplan size --json` instead of the flags.")] = None

    def plan(self, gpus: int | None = None) -> CheckpointPlan:
        """The plan: read from the file, or the request's (at `gpus`, for a sweep)."""
        if self.plan_file is None:
            return super().plan(gpus)
        if self.from_dir is not None:
            raise InputError("give --plan or --from, not both: each is a whole plan")
        if self.given():
            given = ", ".join(f"‹{n}›" for n in self.given())
            raise InputError(f"give --plan or the plan flags, not both (got --plan and {given})")
        return load_plan(self.plan_file)


def plan_options(*, plan_file: bool = True, exclude: tuple[str, ...] = (), **defaults: Any) -> Callable:
    """Give the command `spec: PlanSpec` from the plan flags (and --plan, with `plan_file`). `defaults` replace
    build_plan's for this command (provision plans a large cluster: Megatron, tp 8)."""
    from ckplan.sizing.plan import build_plan

    built = {name: p.default for name, p in inspect.signature(build_plan).parameters.items()}
    left_out = (*exclude, *(() if plan_file else ("plan_file",)))
    fields = {n: f for n, f in flagged_fields(PlanSpec).items() if n not in left_out}
    first = {n: fields.pop(n) for n in ("plan_file",) if n in fields}  # --plan heads the list: it is a whole plan

    def build(given: dict[str, Any]) -> PlanSpec:
        whole = given.get("plan_file") or given.get("from_dir")  # a plan file or a directory is the whole plan
        chosen = {k: v for k, v in defaults.items() if k not in given and not whole}
        return validate_inputs(PlanSpec, {**chosen, **given})

    return _group("spec", {**first, **fields}, {**built, **defaults}, build)


def field_options(
    inject: str,
    models: Sequence[type[BaseModel]],
    build: Callable[[dict[str, Any]], Any],
    exclude: tuple[str, ...] = (),
) -> Callable:
    """Give the command `inject` = build(the fields given, by name), with one option per field of `models` that has
    a Flag, but those in `exclude`; a flag not given is left out, and keeps its model's default."""
    fields = {n: f for model in models for n, f in flagged_fields(model).items() if n not in exclude}
    return _group(inject, fields, {}, build)


def policy_options(*, exclude: tuple[str, ...] = ()) -> Callable:
    """Give the command `policy: Policy` from the policy flags; a flag not given keeps Policy's default (policy.py)."""
    from ckplan.planning.policy import Policy

    return field_options("policy", [Policy], Policy.from_inputs, exclude)


def probe_options() -> Callable:
    """Give the command `probe: dict`, the probe flags given (ProbeRequest's fields and every backend's options),
    for ProbeRequest.from_inputs beside the command's own inputs."""
    from ckplan.probe.backends import backend_options
    from ckplan.probe.request import ProbeRequest

    return field_options("probe", [ProbeRequest, *backend_options().values()], dict)
