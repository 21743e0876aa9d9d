"""A caller's inputs to a request model (a plan request, a Policy), from the CLI's flags or a library call alike.

A field reads the unit strings the flags take ("7B", "5%", "1h", "2GB/s") and plain numbers with the parsers of
units.py, in the field's own validator, so both doors parse and bound a value in one place and are refused in the
same words. `validate_inputs` makes the model's refusal one InputError naming the parameter as ‹name›, which the
CLI renders as its flag (errors.InputError.render). A field's `Flag` is how the command line gives it: cli/options.py
builds the option from it, so a field's flag, help and shown default are declared beside its type and bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError, ValidationInfo
from pydantic.fields import FieldInfo

from ckplan.errors import InputError

M = TypeVar("M", bound=BaseModel)


def parsed(parse: Callable[[Any, str], Any]) -> BeforeValidator:
    """A field validator that reads a string or a number with `parse(value, "‹field›")`. Anything else (None, a
    bool, a list) is left to the field's type, which refuses what it does not take."""

    def read(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return value
        return parse(value, f"‹{info.field_name}›")

    return BeforeValidator(read)


@dataclass(frozen=True)
class Flag:
    """A field's command-line flag, put in its Annotated metadata: the flag, its help (or a function that writes it,
    where the text lists what this module must not import at import time), how `--help` shows the default (a
    formatter of the command's default, or the text itself; None: not shown), the help panel, and the type the
    flag reads where it is not the field's own (a count read from "7B"), and the value's name in `--help`. The
    field's validators read and bound the value, so the flag restates neither."""

    flag: str
    help: str | Callable[[], str]
    shown: Callable[[Any], str] | str | None = None
    panel: str | None = "Plan"  # None: the command's own panel (Options)
    type: Any = None
    metavar: str | None = None  # what `--help` names the value (DIR), where not its type


def flagged_fields(model_cls: type[BaseModel]) -> dict[str, tuple[Flag, FieldInfo]]:
    """The fields of `model_cls` that have a Flag, in field order: name → (its flag, the field)."""
    out = {}
    for name, info in model_cls.model_fields.items():
        for meta in info.metadata:
            if isinstance(meta, Flag):
                out[name] = (meta, info)
    return out


def validate_inputs(model_cls: type[M], data: Mapping[str, Any]) -> M:
    """`data` as model_cls, or one InputError: a parser's own (it names the parameter already), else the first bad
    field as ‹field›: what is wrong."""
    from ckplan.readers import validation_message

    try:
        return model_cls.model_validate(dict(data))
    except ValidationError as exc:
        cause = exc.errors()[0].get("ctx", {}).get("error")
        if isinstance(cause, InputError):
            raise InputError(*cause.args) from None
        raise InputError(validation_message(exc, parameters=True)) from None
