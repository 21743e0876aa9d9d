"""ckplan as a Python library: the commands' work, with the same inputs, defaults, normalisation and bounds.

Each function takes what its command's flags take, under the names of the models they fill (a PlanRequest's fields,
a Policy's): a number in the field's unit (seconds, bytes, bytes per second, a fraction) or the string the flag takes
("7B", "1h", "5%", "2GB/s"). The CLI parses its flags into the same models (ckplan.cli.options) and calls these
functions, so a notebook and a shell get the same result and the same refusal: an InputError whose message names the
parameter (`str(exc)`), where the CLI names the flag.

    >>> from ckplan import api
    >>> plan = api.size(params="70B", framework="megatron", gpus=1024, tp=8)
    >>> rec = api.recommend(plan, "lustre", mtbf_s="8h")
    >>> rec.optimal_interval_s, rec.shortest_safe_interval_s  # seconds

Imports happen inside the functions: `import ckplan` and the CLI's start-up stay as cheap as before.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    ParamSpec,
    TypeVar,
    Union,
    Unpack,
    get_args,
    get_origin,
    get_type_hints,
)

# pydantic reads a **kwargs TypedDict's keys only from typing_extensions' on Python 3.11 (pydantic depends on it)
from typing_extensions import TypedDict

from ckplan.errors import InputError
from ckplan.planning.defaults import DEFAULT_MAX_OVERHEAD

if TYPE_CHECKING:
    from pydantic import ValidationError

    from ckplan.diagnose.records import RecordDiagnosis
    from ckplan.diagnose.trend import Diagnosis
    from ckplan.planning.policy import Policy
    from ckplan.planning.provision import ProvisionSweep
    from ckplan.planning.recommend import Comparison, Recommendation
    from ckplan.probe.backends import ProbeTarget
    from ckplan.probe.request import ProbeRequest
    from ckplan.profile import StorageProfile
    from ckplan.request import PlanRequest
    from ckplan.sizing.plan import CheckpointPlan

# a figure in the field's unit, or as a flag takes it ("1h", "5%", "2GB/s"); int apart from float, so that a check of
# the call's arguments keeps a count of bytes whole rather than turning it into a float
Number = int | float | str
PathLike = str | os.PathLike[str]

# what `provision` sizes when not told: the cluster sizes it sweeps, and a large model's layout
PROVISION_GPUS = (1024, 4096, 16384, 65536)
PROVISION_FRAMEWORK = "megatron"
PROVISION_TP = 8


Params = ParamSpec("Params")
Result = TypeVar("Result")


def _checked(function: Callable[Params, Result]) -> Callable[Params, Result]:
    """Check a call's arguments against `function`'s annotations before it runs, strictly (8.7 is no int, True no
    number, "8" no int; a dict where a model goes is validated as that model), so that a wrong type is one
    InputError naming the argument rather than a TypeError from deep inside or a silent truncation. Values are
    bounded where they are parsed, by the models they fill."""
    validated: Callable[..., Result] | None = None

    @functools.wraps(function)
    def call(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        from pydantic import ValidationError

        nonlocal validated
        if validated is None:  # built at the first call: the annotations name models this module imports lazily
            validated = _validated(function)
        try:
            return validated(*args, **kwargs)
        except ValidationError as exc:
            if exc.title != function.__name__:  # a model's own, raised inside: not about this call's arguments
                raise
            raise _refusal(function, exc) from None

    return call


# the models the public functions' annotations name, imported where a function is first called and only those its
# own annotations use: `ckplan size` stays clear of the planning, probe and diagnose code
_ANNOTATED_MODELS = {
    "CheckpointPlan": "ckplan.sizing.plan",
    "Comparison": "ckplan.planning.recommend",
    "Diagnosis": "ckplan.diagnose.trend",
    "PlanRequest": "ckplan.request",
    "Policy": "ckplan.planning.policy",
    "ProbeRequest": "ckplan.probe.request",
    "ProbeTarget": "ckplan.probe.backends",
    "ProvisionSweep": "ckplan.planning.provision",
    "Recommendation": "ckplan.planning.recommend",
    "RecordDiagnosis": "ckplan.diagnose.records",
    "StorageProfile": "ckplan.profile",
}


def _validated(function: Callable[..., Result]) -> Callable[..., Result]:
    """`function` behind pydantic's check of its arguments, the models its annotations name imported now."""
    import importlib
    import re

    from pydantic import ConfigDict, validate_call

    # the names the annotations use, and those of the TypedDict a **kwargs unpacks, which pydantic resolves in the
    # function's module
    text = " ".join(str(a) for a in function.__annotations__.values())
    for name in re.findall(r"Unpack\[(\w+)\]", text):
        text += " " + " ".join(str(a) for a in globals()[name].__annotations__.values())
    named = set(re.findall(r"\w+", text))
    globals().update(
        {
            name: getattr(importlib.import_module(module), name)
            for name, module in _ANNOTATED_MODELS.items()
            if name in named
        }
    )
    return validate_call(config=ConfigDict(strict=True, extra="forbid"))(function)


def _refusal(function: Callable[..., Any], exc: ValidationError) -> InputError:
    """The first wrong argument of a ValidationError, in one line naming it as the library does (‹name›)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    head, *inside = first["loc"]
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden"):  # a named one, or a **kwargs key
        return InputError(f"{function.__name__} takes no ‹{head}›")
    if first["type"] == "unexpected_positional_argument":  # head: the first argument's position past the last
        return InputError(f"{function.__name__} takes {head} positional argument(s): give the others by name")
    name = list(inspect.signature(function).parameters)[head] if isinstance(head, int) else str(head)
    if first["type"] in ("missing_argument", "missing_keyword_only_argument", "missing_positional_only_argument"):
        return InputError(f"{function.__name__} needs ‹{name}›")
    about = [e for e in errors if e["loc"][:1] == (head,)]
    if len(about) > 1:  # one complaint per member of a union: say what it takes, and what it got whole
        whole = min(about, key=lambda e: len(e["loc"]))["input"]
        return InputError(f"‹{name}› takes {_annotation(function, name)}, got {_shown(whole)}")
    where = "".join(f"[{step!r}]" for step in inside)
    return InputError(f"‹{name}›{where}: {first['msg']}, got {_shown(first['input'])}")


def _shown(value: object) -> str:
    """A value in an error line: its repr, cut short (a plan's dict can be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _annotation(function: Callable[..., Any], name: str) -> str:
    """The type parameter `name` takes, or the key `name` of the TypedDict its **kwargs unpack, in words."""
    hints = get_type_hints(function)
    if name not in hints:
        keywords = next(p.name for p in inspect.signature(function).parameters.values() if p.kind is p.VAR_KEYWORD)
        (typed,) = get_args(hints[keywords])  # Unpack[a TypedDict]
        hints = get_type_hints(typed)
    return _type_name(hints[name])


def _type_name(annotation: Any) -> str:
    """`CheckpointPlan | str | os.PathLike[str]`: a type as a reader writes it, without its module."""
    if get_origin(annotation) in (Union, UnionType):
        return " | ".join(_type_name(member) for member in get_args(annotation))
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("collections.abc.", "").replace("typing.", "")


class ProvisionPolicyInputs(TypedDict, total=False):
    """The Policy fields provision takes (ckplan.planning.policy.Policy; its mode is provision's own)."""

    max_loss_s: Number
    max_overhead: Number
    mtbf_s: Number
    node_failures_per_1000_days: Number
    job_failures_per_day: Number
    restart_s: Number
    restart_fixed_s: Number
    collective_timeout_s: Number
    snapshot_bytes_per_s: Number
    host_memory_bytes: Number
    serialize_bytes_per_s: Mapping[str, Number]
    aggregate_limit_bytes_per_s: Number


class PolicyInputs(ProvisionPolicyInputs, total=False):
    """Every Policy field, as recommend and compare take them."""

    mode: Literal["sync", "async"]
    iteration_s: Number
    local_disk_bytes: Number
    changed_fraction: Number
    save_time_s: Number
    stall_time_s: Number


class ModelInputs(TypedDict, total=False):
    """The PlanRequest fields (ckplan.request) size and provision both take: the model, its states and its layout."""

    model: str | None
    config: PathLike | None
    optimizer: str | None
    precision: str | None
    framework: str | None
    gpus_per_node: int | None
    tp: int | None
    pp: int | None
    zero: int | None
    ep: int | None
    dtype_overrides: Mapping[str, str] | None
    options: Mapping[str, str] | None


class SizeInputs(ModelInputs, total=False):
    """The PlanRequest fields size takes by name (its first argument is the parameter count)."""

    from_dir: PathLike | None
    gpus: int | None


class ProvisionInputs(ModelInputs, ProvisionPolicyInputs, total=False):
    """What provision takes by name besides its own: the plan's fields at each swept size, and the policy's."""

    params: Number | None


@_checked
def size(
    params: Number | None = None,
    *,
    interval: Number | None = None,
    max_overhead: Number = DEFAULT_MAX_OVERHEAD,
    **inputs: Unpack[SizeInputs],
) -> CheckpointPlan:
    """What one save writes (`ckplan size`): give one of params (7e9, "7B"; 7B when none is given), model (a catalog
    name), config (a Hugging Face config.json) or from_dir (a checkpoint measured from disk); the other plan fields
    by name. None is the default of `ckplan size`. With `interval` (seconds or "5m") the plan carries that
    interval's bandwidth and IOPS, else those of the typical intervals."""
    return size_request(plan_request(params=params, **inputs), interval=interval, max_overhead=max_overhead)


@_checked
def plan_request(**inputs: Any) -> PlanRequest:
    """A PlanRequest from size's inputs (None: not given), or one InputError."""
    from ckplan.request import PlanRequest

    return PlanRequest.from_inputs({k: v for k, v in inputs.items() if v is not None})


@_checked
def size_request(
    request: PlanRequest, *, interval: Number | None = None, max_overhead: Number = DEFAULT_MAX_OVERHEAD
) -> CheckpointPlan:
    """`size` for a request already made (the CLI's flags make one)."""
    from ckplan.sizing.plan import TYPICAL_INTERVALS_S, interval_demand
    from ckplan.units import parse_duration, parse_fraction

    interval_s = parse_duration(interval, "‹interval›") if interval is not None else None
    overhead = parse_fraction(max_overhead, "‹max_overhead›")
    plan = request.plan()
    if interval_s is not None:
        return plan.model_copy(update={"interval": interval_demand(plan, interval_s, overhead)})
    return plan.model_copy(update={"typical_demand": [interval_demand(plan, t, overhead) for t in TYPICAL_INTERVALS_S]})


@_checked
def recommend(
    plan: CheckpointPlan | PlanRequest | PathLike,
    storage: StorageProfile | PathLike,
    *,
    policy: Policy | None = None,
    **inputs: Unpack[PolicyInputs],
) -> Recommendation:
    """The shortest safe and the best checkpoint interval for a plan on a storage target (`ckplan recommend
    --storage`), under a Policy given whole or by its fields (max_overhead=0.05 or "5%", mtbf_s=28800 or "8h", …)."""
    from ckplan import catalog
    from ckplan.planning.recommend import recommend as run

    chosen = _policy(policy, dict(inputs))
    the_plan = _plan(plan)
    return run(the_plan, _storage(storage), chosen, catalog.planning_data())


@_checked
def compare(
    plan: CheckpointPlan | PlanRequest | PathLike, *, policy: Policy | None = None, **inputs: Unpack[PolicyInputs]
) -> Comparison:
    """The plan on every built-in storage class, side by side (`ckplan recommend` without --storage)."""
    from ckplan import catalog
    from ckplan.planning.recommend import compare as run

    chosen = _policy(policy, dict(inputs))
    return run(_plan(plan), chosen, list(catalog.storage_classes().values()))


@_checked
def provision(
    gpus: Sequence[int] | str = PROVISION_GPUS,
    *,
    mode: Literal["sync", "async", "staged"] = "sync",
    target_goodput: Number | None = None,
    keep: int = 2,
    storage: StorageProfile | PathLike | None = None,
    max_restore: Number | None = None,
    policy: Policy | None = None,
    **inputs: Unpack[ProvisionInputs],
) -> ProvisionSweep:
    """The write and read bandwidth, file rate and capacity clusters of `gpus` GPUs need (`ckplan provision`): a
    sweep of sizes, or "1024,4096"; the plan at each size from the plan fields given by name (a Megatron layout,
    tp 8, unless given), under a Policy given whole or by its fields."""
    plan_fields = set(ProvisionInputs.__optional_keys__) - set(ProvisionPolicyInputs.__optional_keys__)
    given = {k: v for k, v in inputs.items() if k in plan_fields and v is not None}  # None: provision's default
    request = plan_request(**{"framework": PROVISION_FRAMEWORK, "tp": PROVISION_TP, **given})
    return provision_request(
        request,
        gpus,
        policy=_policy(policy, {k: v for k, v in inputs.items() if k not in plan_fields}),
        mode=mode,
        target_goodput=target_goodput,
        keep=keep,
        storage=storage,
        max_restore=max_restore,
    )


@_checked
def provision_request(
    request: PlanRequest,
    gpus: Sequence[int] | str,
    *,
    policy: Policy,
    mode: str = "sync",
    target_goodput: Number | None = None,
    keep: int = 2,
    storage: StorageProfile | PathLike | None = None,
    max_restore: Number | None = None,
) -> ProvisionSweep:
    """`provision` for a request and a Policy already made (the CLI's flags make them)."""
    from ckplan import catalog
    from ckplan.planning.provision import check_sweep_sizes, provision_sweep
    from ckplan.units import parse_duration, parse_fraction

    items: Sequence[int | str] = gpus.split(",") if isinstance(gpus, str) else gpus
    check_sweep_sizes(len(items))
    sizes = []
    for item in items:
        try:
            sizes.append(int(item))
        except ValueError:
            raise InputError(f"‹gpus› takes whole numbers separated by commas, got {item!r}") from None
    plans = [request.plan(gpus=g) for g in sizes]
    goodput = parse_fraction(target_goodput, "‹target_goodput›") if target_goodput is not None else None
    profile = _storage(storage) if storage is not None else None
    restore_s = parse_duration(max_restore, "‹max_restore›") if max_restore is not None else None
    return provision_sweep(plans, policy, mode, goodput, keep, catalog.planning_data(), profile, restore_s)


@_checked
def diagnose(
    logs: PathLike | Sequence[PathLike],
    *,
    pattern: str | None = None,
    by: str = "save",  # fit the trend against the "save" number or wall "time"
    interval: Number | None = None,
    plan: CheckpointPlan | PathLike | None = None,
    storage: StorageProfile | PathLike | None = None,
    collective_timeout_s: Number | None = None,
) -> Diagnosis | RecordDiagnosis:
    """Save times from training logs or from ckplan.record's save records (`ckplan diagnose`), their trend and a
    verdict; with a plan and its storage, beside the prediction."""
    from ckplan.diagnose import diagnose_logs
    from ckplan.diagnose.records import diagnose_records, is_record_file
    from ckplan.planning.defaults import COLLECTIVE_TIMEOUT_S
    from ckplan.units import parse_duration

    paths = [Path(logs)] if isinstance(logs, str | os.PathLike) else [Path(p) for p in logs]
    if by not in ("save", "time"):
        raise InputError(f"‹by› must be save or time, got {by!r}")
    if (plan is None) != (storage is None):
        raise InputError("‹plan› and ‹storage› go together")
    timeout = (
        parse_duration(collective_timeout_s, "‹collective_timeout_s›")
        if collective_timeout_s is not None
        else COLLECTIVE_TIMEOUT_S
    )
    records = [is_record_file(p) for p in paths]
    if any(records) and not all(records):
        raise InputError("give save records or logs, not both: " + ", ".join(str(p) for p in paths))
    if all(records) and pattern:
        raise InputError("‹pattern› reads logs; save records need none")
    the_plan = _plan(plan) if plan is not None else None
    profile = _storage(storage) if storage is not None else None
    how = "wall time" if by == "time" else "save number"
    every = parse_duration(interval, "‹interval›") if interval is not None else None
    if all(records):
        return diagnose_records(paths, how, every, the_plan, profile, timeout)
    return diagnose_logs(paths, pattern, how, every, the_plan, profile, timeout)


class ProbeInputs(TypedDict, total=False):
    """A ProbeRequest's fields and every backend's options (ckplan.probe.request, ckplan.probe.backends), as
    open_probe and probe take them."""

    preset: Literal["quick", "default", "thorough"]
    writers: int | None
    plan: CheckpointPlan | PlanRequest | PathLike | None
    scale: float
    max_bytes: Number | None
    save: str | None
    out: PathLike | None
    calibrate: bool
    emit_jobs: PathLike | None
    labels: Mapping[str, str]
    endpoint_url: str | None
    region: str | None
    profile: str | None
    part_bytes: Number
    timeout_s: Number
    hosts: str | None
    hosts_file: PathLike | None
    agent_wait_s: Number | None
    agent_info_port: int | None
    drop_caches: bool


@_checked
def open_probe(
    path: PathLike, *, notice: Callable[[str], None] | None = None, **inputs: Unpack[ProbeInputs]
) -> ProbeTarget:
    """A probe of `path` (a directory, s3://bucket/prefix, or a directory every host of `hosts` sees), every input
    checked and the target prepared, before a byte is written; `.run()` measures it. `notice` is told what a
    backend found (the hosts Slurm gave)."""
    from ckplan.probe.request import ProbeRequest

    return open_request(ProbeRequest.from_inputs({"path": os.fspath(path), **inputs}), notice=notice)


@_checked
def open_request(request: ProbeRequest, *, notice: Callable[[str], None] | None = None) -> ProbeTarget:
    """`open_probe` for a request already made (the CLI's flags make one)."""
    from ckplan.probe.backends import ProbeTarget

    target = ProbeTarget(request.spec(notice))
    target.prepare()  # every check that can fail comes before a byte is written
    return target


@_checked
def probe(
    path: PathLike, *, notice: Callable[[str], None] | None = None, **inputs: Unpack[ProbeInputs]
) -> StorageProfile:
    """Measure what a target sustains (`ckplan probe`): open_probe's inputs, then the run; with `save` the profile
    is saved under that name, with `out` written to that file."""
    result = open_probe(path, notice=notice, **inputs).run()
    keep_profile(result, inputs.get("save"), inputs.get("out"))
    return result


@_checked
def keep_profile(result: StorageProfile, save: str | None, out: PathLike | None) -> Path | None:
    """Save the profile under `save` and write it to `out`, where given; where it was saved."""
    from ckplan import profile_store

    where = profile_store.save(result, save) if save else None
    if out is not None:
        profile_store.write(result, Path(out))
    return where


def _policy(given: Policy | None, inputs: dict[str, Any]) -> Policy:
    """A Policy from its fields' inputs, or the one given; not both."""
    from ckplan.planning.policy import Policy

    if given is None:
        return Policy.from_inputs(inputs)
    if inputs:
        raise InputError(f"give a Policy or its fields, not both (got ‹policy› and {', '.join(inputs)})")
    return given


def _plan(plan: CheckpointPlan | PlanRequest | PathLike) -> CheckpointPlan:
    from ckplan.request import as_plan

    return as_plan(plan)


def _storage(storage: StorageProfile | PathLike) -> StorageProfile:
    from ckplan import profile_store
    from ckplan.profile import StorageProfile

    if isinstance(storage, StorageProfile):
        return storage
    return profile_store.resolve(os.fspath(storage))
