"""Inputs to a recommendation besides the plan and the storage: policy, failures, async and staging assumptions.

Every default is named in planning/defaults.py (re-exported here), shown in the output, and overridable from the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, model_validator

from ckplan.errors import InputError
from ckplan.inputs import Flag, parsed, validate_inputs
from ckplan.planning.defaults import (
    COLLECTIVE_TIMEOUT_S,
    DEFAULT_CHANGED_FRACTION,
    DEFAULT_DCP_FIXED_S,
    DEFAULT_HOST_MEMORY_BYTES,
    DEFAULT_JOB_FAILURES_PER_DAY,
    DEFAULT_LOCAL_DISK_BYTES,
    DEFAULT_MAX_LOSS_S,
    DEFAULT_MAX_OVERHEAD,
    DEFAULT_MODE,
    DEFAULT_NODE_FAILURES_PER_1000_DAYS,
    DEFAULT_RESTART_FIXED_S,
    DEFAULT_SERIALIZE_BYTES_PER_S,
    DEFAULT_SNAPSHOT_BYTES_PER_S,
    TIGHT_FRACTION,
)
from ckplan.schema import (
    ByteAmount,
    Fraction,
    JobFailureRate,
    Model,
    MtbfSeconds,
    NodeFailureRate,
    PositiveSeconds,
    Rate,
    Seconds,
    Share,
)
from ckplan.units import (
    MAX_FAILURES_PER_1000_NODE_DAYS,
    MAX_FAILURES_PER_DAY,
    MIN_MTBF_S,
    check_range,
    fmt_bytes,
    fmt_duration,
    fmt_percent,
    fmt_rate,
    parse_bytes,
    parse_duration,
    parse_fraction,
    parse_number,
    parse_rate,
)

# the defaults, re-exported: callers name them policy.DEFAULT_*
__all__ = [
    "DEFAULT_CHANGED_FRACTION",
    "DEFAULT_DCP_FIXED_S",
    "DEFAULT_HOST_MEMORY_BYTES",
    "DEFAULT_JOB_FAILURES_PER_DAY",
    "DEFAULT_LOCAL_DISK_BYTES",
    "DEFAULT_MAX_LOSS_S",
    "DEFAULT_MAX_OVERHEAD",
    "DEFAULT_MODE",
    "DEFAULT_NODE_FAILURES_PER_1000_DAYS",
    "DEFAULT_RESTART_FIXED_S",
    "COLLECTIVE_TIMEOUT_S",
    "DEFAULT_SERIALIZE_BYTES_PER_S",
    "DEFAULT_SNAPSHOT_BYTES_PER_S",
    "TIGHT_FRACTION",
    "Policy",
    "provenance",
]


def provenance(value: float, default: float, flag: str | None) -> str:
    """Where an assumed figure comes from, for the output that uses it: 'default' (and the flag that overrides it,
    where the command has one) when it is the named default, else 'given (flag)'."""
    if value == default:
        return f"default; {flag}" if flag else "default"
    return f"given ({flag})" if flag else "given"


def _failure_rate(maximum: float, limit: str) -> Callable[[Any, str], float]:
    def read(value: Any, what: str) -> float:
        return check_range(parse_number(value, what), what, 0, maximum, text=value, limit=limit)

    return read


def _mode(value: Any, what: str) -> Any:
    if value not in ("sync", "async"):
        raise InputError(f"{what} must be sync or async, got {value!r}")
    return value


def _serializers(value: Any, info: ValidationInfo) -> Any:
    """Serialiser name → rate; each name one of DEFAULT_SERIALIZE_BYTES_PER_S's, each rate read as a bandwidth."""
    if not isinstance(value, Mapping):
        return value
    what = f"‹{info.field_name}›"
    for name in value:
        if name not in DEFAULT_SERIALIZE_BYTES_PER_S:
            takes = " or ".join(f"{k}=RATE" for k in DEFAULT_SERIALIZE_BYTES_PER_S)
            raise InputError(f"{what} takes {takes}, got {name!r}")
    return {name: parse_rate(rate, what) for name, rate in value.items()}


class Policy(Model):
    """The policy of a recommendation. A field takes a number in its unit or the string a flag takes ("1h", "5%",
    "2GB/s"), read and bounded by the same parser (ckplan.inputs), so the CLI and a library caller are refused the
    same values in the same words; `Policy.from_inputs` makes the refusal one InputError."""

    model_config = ConfigDict(extra="forbid")

    max_loss_s: Annotated[
        PositiveSeconds,
        parsed(parse_duration),
        Flag("--max-loss", "Most work a crash may destroy, e.g. 1h.", fmt_duration, "Policy"),
    ] = DEFAULT_MAX_LOSS_S
    max_overhead: Annotated[
        Fraction,
        parsed(parse_fraction),
        Flag("--max-overhead", "Share of time saves may block, e.g. 5%.", fmt_percent, "Policy"),
    ] = DEFAULT_MAX_OVERHEAD
    mode: Annotated[
        Literal["sync", "async"],
        parsed(_mode),
        Flag("--mode", "sync or async (snapshot to host memory, persist in the background).", str, "Policy"),
    ] = DEFAULT_MODE
    iteration_s: Annotated[
        PositiveSeconds | None,
        parsed(parse_duration),
        Flag("--iteration-time", "Seconds per training step, to give the interval in steps.", panel="Policy"),
    ] = None
    # job MTBF; derived from the rates when None
    mtbf_s: Annotated[
        MtbfSeconds | None,
        parsed(lambda v, f: parse_duration(v, f, minimum=MIN_MTBF_S)),
        Flag(
            "--mtbf",
            "Job mean time between interruptions, e.g. 8h (overrides the rates); at least 1 s.",
            panel="Failures",
        ),
    ] = None
    node_failures_per_1000_days: Annotated[
        NodeFailureRate,
        parsed(
            _failure_rate(
                MAX_FAILURES_PER_1000_NODE_DAYS,
                f"{MAX_FAILURES_PER_1000_NODE_DAYS:,} per 1,000 node-days, one a second",
            )
        ),
        Flag("--node-failure-rate", "Interruptions per 1,000 node-days.", "{:g}".format, "Failures"),
    ] = DEFAULT_NODE_FAILURES_PER_1000_DAYS
    job_failures_per_day: Annotated[
        JobFailureRate,
        parsed(_failure_rate(MAX_FAILURES_PER_DAY, f"{MAX_FAILURES_PER_DAY:,} a day, one a second")),
        Flag("--job-failure-rate", "Job-level interruptions per day (software, network).", "{:g}".format, "Failures"),
    ] = DEFAULT_JOB_FAILURES_PER_DAY
    # the whole restart cost R, as measured by the user (--restart); None: the fixed part below plus the load
    # predicted from the plan's restore manifest (scenario.restart_cost), which recommend and provision put here
    restart_s: Annotated[
        Seconds | None,
        parsed(lambda v, f: parse_duration(v, f, allow_zero=True)),
        Flag(
            "--restart",
            "The whole restart cost, measured (detect, reschedule, load, warm up); replaces fixed part + predicted load.",
            panel="Failures",
        ),
    ] = None
    # detect, reschedule, initialise: all of a restart but the checkpoint's load
    restart_fixed_s: Annotated[
        Seconds,
        parsed(lambda v, f: parse_duration(v, f, allow_zero=True)),
        Flag(
            "--restart-fixed",
            "Restart cost besides the checkpoint's load (detect, reschedule, initialise); the load is predicted.",
            fmt_duration,
            "Failures",
        ),
    ] = DEFAULT_RESTART_FIXED_S
    # the process group's timeout: a blocking save or a load near it is warned about
    collective_timeout_s: Annotated[
        PositiveSeconds,
        parsed(parse_duration),
        Flag(
            "--collective-timeout",
            "The process group's collective timeout (init_process_group(timeout=)); saves near it are warned about.",
            fmt_duration,
            "Failures",
        ),
    ] = COLLECTIVE_TIMEOUT_S
    snapshot_bytes_per_s: Annotated[
        Rate,
        parsed(parse_rate),
        Flag("--snapshot-bandwidth", "Async: device→host copy per GPU.", fmt_rate, "Assumptions"),
    ] = DEFAULT_SNAPSHOT_BYTES_PER_S
    host_memory_bytes: Annotated[
        ByteAmount,
        parsed(parse_bytes),
        Flag("--host-memory", "Host memory per node (async snapshot, /dev/shm staging).", fmt_bytes, "Assumptions"),
    ] = DEFAULT_HOST_MEMORY_BYTES
    local_disk_bytes: Annotated[
        ByteAmount,
        parsed(parse_bytes),
        Flag("--local-disk", "Local NVMe capacity per node (staging).", fmt_bytes, "Assumptions"),
    ] = DEFAULT_LOCAL_DISK_BYTES
    changed_fraction: Annotated[
        Share,
        parsed(lambda v, f: parse_fraction(v, f, allow_one=True)),
        Flag(
            "--changed-fraction",
            "Incremental what-if: share of bytes that change per save.",
            fmt_percent,
            "Assumptions",
        ),
    ] = DEFAULT_CHANGED_FRACTION
    # serialiser rates given by the user; the others come from the profile's calibration or the defaults
    serialize_bytes_per_s: Annotated[
        dict[str, Rate],
        BeforeValidator(_serializers),
        Flag(
            "--serialize-bandwidth",
            "Serialiser speed per writer core, e.g. torch.save=2GB/s (default: this machine's calibration in the "
            "profile, else the named defaults).",
            panel="Assumptions",
        ),
    ] = Field(default_factory=dict)
    # what the whole shared storage system sustains, as the user knows it: replaces the profile's limit and any fit
    # beyond the measured host counts (planning/scaling.py); it is the --storage target's, not another class's
    aggregate_limit_bytes_per_s: Annotated[
        Rate | None,
        parsed(parse_rate),
        Flag(
            "--aggregate-limit",
            "What the whole shared storage system sustains, e.g. 40GB/s: replaces the profile's limit and any "
            "extrapolation beyond the measured host counts.",
            panel="Assumptions",
        ),
    ] = None
    # measured save (persist) time, skipping the model
    save_time_s: Annotated[
        PositiveSeconds | None,
        parsed(parse_duration),
        Flag("--save-time", "A measured save time: skips the save-time model.", panel="Measured"),
    ] = None
    stall_time_s: Annotated[
        PositiveSeconds | None,
        parsed(parse_duration),
        Flag("--stall-time", "A measured async blocking time.", panel="Measured"),
    ] = None

    @model_validator(mode="after")
    def _stall_is_async(self) -> Policy:
        if self.stall_time_s is not None and self.mode != "async":
            raise InputError("‹stall_time_s› applies to ‹mode› async only")
        return self

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> Policy:
        """A Policy from a caller's inputs (field name → number or flag string), or one InputError."""
        return validate_inputs(cls, inputs)
