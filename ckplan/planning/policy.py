"""Inputs to a recommendation besides the plan and the storage: policy, failures, async and staging assumptions.

Every default is named in planning/defaults.py (re-exported here), shown in the output, and overridable from the CLI.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ckplan.planning.defaults import (
    DEFAULT_CHANGED_FRACTION,
    DEFAULT_DCP_FIXED_S,
    DEFAULT_HOST_MEMORY_BYTES,
    DEFAULT_JOB_FAILURES_PER_DAY,
    DEFAULT_LOCAL_DISK_BYTES,
    DEFAULT_MAX_LOSS_S,
    DEFAULT_MAX_OVERHEAD,
    DEFAULT_MODE,
    DEFAULT_NODE_FAILURES_PER_1000_DAYS,
    DEFAULT_RESTART_S,
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
    "DEFAULT_RESTART_S",
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


class Policy(Model):
    """The bounds are the flags' (README, input limits), so a library caller is refused the same values."""

    mode: Literal["sync", "async"] = DEFAULT_MODE
    max_loss_s: PositiveSeconds = DEFAULT_MAX_LOSS_S
    max_overhead: Fraction = DEFAULT_MAX_OVERHEAD
    mtbf_s: MtbfSeconds | None = None  # job MTBF; derived from the rates when None
    node_failures_per_1000_days: NodeFailureRate = DEFAULT_NODE_FAILURES_PER_1000_DAYS
    job_failures_per_day: JobFailureRate = DEFAULT_JOB_FAILURES_PER_DAY
    restart_s: Seconds = DEFAULT_RESTART_S
    iteration_s: PositiveSeconds | None = None
    snapshot_bytes_per_s: Rate = DEFAULT_SNAPSHOT_BYTES_PER_S
    host_memory_bytes: ByteAmount = DEFAULT_HOST_MEMORY_BYTES
    local_disk_bytes: ByteAmount = DEFAULT_LOCAL_DISK_BYTES
    changed_fraction: Share = DEFAULT_CHANGED_FRACTION
    # serialiser rates given with --serialize-bandwidth; the others come from the profile's calibration or the defaults
    serialize_bytes_per_s: dict[str, Rate] = Field(default_factory=dict)
    # what the whole shared storage system sustains, as the user knows it (--aggregate-limit): replaces the profile's
    # limit and any fit beyond the measured host counts (planning/scaling.py); it is the --storage target's, not
    # another class's
    aggregate_limit_bytes_per_s: Rate | None = None
    save_time_s: PositiveSeconds | None = None  # measured save (persist) time, skipping the model
    stall_time_s: PositiveSeconds | None = None  # measured blocking time of an async save
