"""The base of every ckplan pydantic model, and the bounded field types that files are read into.

A model's schema is built on first use, not at import: building a validator costs a few ms per model; ckplan
defines some forty, and most commands use a handful, so deferring the build keeps `ckplan size` near the
start-up of typer, rich and pydantic themselves (scripts/bench_size.py).

The bounds are the README's input limits, so that a hand-edited plan or profile is refused where it is read,
naming the field, instead of dividing by zero or overflowing later. Every float is finite and, unless zero, a
normal number: a subnormal such as 1e-320 is a typo or a unit slip, and dividing by one overflows to infinity.
"""

from __future__ import annotations

import sys
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

from ckplan.units import (
    MAX_BYTES,
    MAX_DURATION_S,
    MAX_FAILURES_PER_1000_NODE_DAYS,
    MAX_FAILURES_PER_DAY,
    MAX_GPUS,
    MAX_HOSTS,
    MAX_RATE_BYTES_PER_S,
    MIN_DURATION_S,
    MIN_FRACTION,
    MIN_MTBF_S,
)


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


def _normal(value: float) -> float:
    if value != 0 and abs(value) < sys.float_info.min:
        raise ValueError(f"{value!r} is a subnormal number: too close to zero to be a real figure")
    return value


# A figure in a file is a JSON number: in lax mode pydantic reads "1e9" or true as one, and a boolean that became
# a writer count, or a quoted figure, is a hand edit gone wrong rather than a value. Strict mode (checked in
# pydantic's core, so a million manifest rows cost nothing more) takes an int for a float, and nothing else.
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False), AfterValidator(_normal)]
Int = Annotated[int, Strict()]
# bytes per second: at least one (a figure below that is a unit slip) and at most 1 PB/s
Rate = Annotated[Finite, Field(ge=1, le=MAX_RATE_BYTES_PER_S)]
# events per second (files, operations, requests): at least one in ten years, since the model divides by them
PerSecond = Annotated[Finite, Field(ge=1 / MAX_DURATION_S, le=1e12)]
Seconds = Annotated[Finite, Field(ge=0, le=MAX_DURATION_S)]
# a time the model divides by (a replay's wall time, an interval, a step): 1 µs to ten years
PositiveSeconds = Annotated[Finite, Field(ge=MIN_DURATION_S, le=MAX_DURATION_S)]
MtbfSeconds = Annotated[Finite, Field(ge=MIN_MTBF_S, le=MAX_DURATION_S)]
Bytes = Annotated[Int, Field(ge=0, le=MAX_BYTES)]
ByteAmount = Annotated[Finite, Field(ge=1, le=MAX_BYTES)]  # a capacity given as a float (host memory, a disk)
Fraction = Annotated[Finite, Field(ge=MIN_FRACTION, lt=1)]  # a share of time: 0.0001% up to, not including, all
Share = Annotated[Finite, Field(ge=MIN_FRACTION, le=1)]  # a share of bytes, all of them included
NodeFailureRate = Annotated[Finite, Field(ge=0, le=MAX_FAILURES_PER_1000_NODE_DAYS)]  # per 1,000 node-days
JobFailureRate = Annotated[Finite, Field(ge=0, le=MAX_FAILURES_PER_DAY)]  # per day
Writers = Annotated[Int, Field(ge=1, le=MAX_GPUS)]
Hosts = Annotated[Int, Field(ge=1, le=MAX_HOSTS)]
