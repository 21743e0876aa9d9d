"""A caller's inputs to a request model (a plan request, a Policy), from the CLI's flags or a library call alike.

A field reads the unit strings the flags take ("7B", "5%", "1h", "2GB/s") and plain numbers with the parsers of
units.py, in the field's own validator, so both doors parse and bound a value in one place and are refused in the
same words. `validate_inputs` makes the model's refusal one InputError naming the parameter as ‹name›, which the
CLI renders as its flag (errors.InputError.render).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError, ValidationInfo

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
