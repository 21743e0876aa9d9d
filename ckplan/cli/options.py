"""Option groups: the flags that describe a plan and the flags of a policy, each declared once, parsed once.

A command decorated with `@plan_options(...)` receives `spec: PlanSpec`, and with `@policy_options(...)` receives
`policy: Policy`; typer sees the group's flags in the command's signature as if they were written there. The
flags default to "not given" (None): a plan's defaults are `build_plan`'s own and a policy's are `Policy`'s,
from policy.py, shown in `--help` from there, so no default is restated in a signature.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import Field

from ckplan.errors import InputError
from ckplan.schema import Model

if TYPE_CHECKING:
    from ckplan.planning.policy import Policy
    from ckplan.sizing.plan import CheckpointPlan

DEFAULT_PARAMS = "7e9"

Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON (the same model the table shows).")]
PlanFile = Annotated[Path | None, typer.Option("--plan", help="A plan from `ckplan size --json`.")]


def pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"{flag} takes NAME=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def load_plan(path: Path) -> CheckpointPlan:
    from ckplan.readers import MAX_PLAN_BYTES, read_json_model
    from ckplan.sizing.plan import CheckpointPlan

    return read_json_model(
        path, CheckpointPlan, "plan", MAX_PLAN_BYTES, expected=" (a plan comes from `ckplan size --json`)"
    )


def output_file(path: Path | None, flag: str) -> None:
    """Refuse an output file ckplan cannot write before the work whose result it would hold (ckplan.outputs)."""
    if path is not None:
        from ckplan.outputs import check_output_file

        check_output_file(path, flag)


def preset(quick: bool, thorough: bool) -> str:
    """--quick / --thorough / neither, as the measurement preset they choose."""
    if quick and thorough:
        raise InputError("give --quick or --thorough, not both")
    return "quick" if quick else "thorough" if thorough else "default"


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: run the same cleanup as Ctrl-C."""
    raise KeyboardInterrupt


@dataclass(frozen=True)
class Flag:
    """One flag of a group: its parameter name, the flag, its type, help text and the default shown in --help."""

    name: str
    flag: str
    type: Any
    help: str
    shown_default: str | None = None
    panel: str = "Plan"

    def parameter(self) -> inspect.Parameter:
        option = typer.Option(
            self.flag,
            help=self.help,
            rich_help_panel=self.panel,
            show_default=self.shown_default if self.shown_default is not None else False,
        )
        return inspect.Parameter(
            self.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[self.type | None, option]
        )


def _with_group(inject: str, flags: Sequence[Flag], build: Callable[[dict[str, Any]], Any]) -> Callable:
    """Replace the command's `inject` parameter by `flags` in what typer sees; call it with build(the flags' values)."""

    def decorate(func: Callable) -> Callable:
        # the command's own parameters, their annotations evaluated where the command was written (typer reads
        # __signature__ as it is); the injected one is left out unevaluated: its type need not exist at run time
        namespace = inspect.unwrap(func).__globals__
        own = [
            p.replace(
                kind=inspect.Parameter.KEYWORD_ONLY,
                annotation=eval(p.annotation, namespace) if isinstance(p.annotation, str) else p.annotation,
            )
            for p in inspect.signature(func).parameters.values()
            if p.name != inject
        ]
        names = {f.name for f in flags}

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            kwargs[inject] = build({n: kwargs.pop(n) for n in names})
            return func(**kwargs)

        signature = inspect.Signature(own + [f.parameter() for f in flags])
        command.__signature__ = signature  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return command

    return decorate


# --- the plan group -------------------------------------------------------------------------------------------


def _build_defaults() -> dict[str, Any]:
    from ckplan.sizing.plan import build_plan

    return {name: p.default for name, p in inspect.signature(build_plan).parameters.items()}


class PlanSpec(Model):
    """A plan as the user gave it: a plan file, or the plan flags (None = not given: build_plan's default)."""

    plan_file: Path | None = None
    from_dir: Path | None = None
    params: str | None = None
    model: str | None = None
    config: Path | None = None
    optimizer: str | None = None
    precision: str | None = None
    framework: str | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    tp: int | None = None
    pp: int | None = None
    zero: int | None = None
    ep: int | None = None
    dtype: list[str] = Field(default_factory=list)
    option: list[str] = Field(default_factory=list)

    def given_flags(self) -> list[str]:
        return [PLAN_FLAG_NAMES[n] for n in PLAN_FLAG_NAMES if getattr(self, n) not in (None, [])]

    def plan(self, gpus: int | None = None) -> CheckpointPlan:
        """The plan: read from the file, or built from the flags (at `gpus`, for a sweep)."""
        if self.plan_file is not None:
            if self.from_dir is not None:
                raise InputError("give --plan or --from, not both: each is a whole plan")
            if self.given_flags():
                raise InputError(
                    f"give --plan or the plan flags, not both (got --plan and {', '.join(self.given_flags())})"
                )
            return load_plan(self.plan_file)
        if self.from_dir is not None:
            return self._measured(gpus)
        from ckplan import catalog
        from ckplan.sizing.plan import build_plan, nearest_shape
        from ckplan.units import parse_count

        models = [PLAN_FLAG_NAMES[n] for n in ("params", "model", "config") if getattr(self, n) is not None]
        if len(models) > 1:
            raise InputError(
                f"give one of --params, --model or --config, not {'both' if len(models) == 2 else 'all three'} "
                f"(got {' and '.join(models)})"
            )
        if self.config is not None:
            arch, parameters = catalog.config_model(self.config), None
        elif self.model is not None:
            arch, parameters = catalog.model(self.model), None
        else:  # an empty --params is refused by parse_count, not replaced by the default
            parameters = int(parse_count(DEFAULT_PARAMS if self.params is None else self.params, "--params"))
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
        chosen.update({k: v.lower() for k, v in chosen.items() if isinstance(v, str)})
        return build_plan(
            arch=arch,
            parameters=parameters,
            model_name=arch.name if self.model or self.config else None,
            dtype_overrides=pairs(self.dtype, "--dtype"),
            options=pairs(self.option, "--option"),
            **chosen,
        )

    def _measured(self, gpus: int | None) -> CheckpointPlan:
        """--from DIR: the plan measured from a checkpoint's files; only the flags that the names leave open."""
        from ckplan.scan import scan_plan
        from ckplan.units import parse_count

        others = [f for f in self.given_flags() if f not in ("--from", "--gpus-per-node", "--gpus", "--params", "--ep")]
        if others:
            raise InputError(
                f"--from measures the plan from the checkpoint's files: drop {', '.join(others)} "
                "(--gpus-per-node, --gpus, --params and --ep go with it)"
            )
        if gpus is not None:
            raise InputError("--from measures one checkpoint: it cannot be resized to other GPU counts")
        params = int(parse_count(self.params, "--params")) if self.params is not None else None
        assert self.from_dir is not None
        return scan_plan(self.from_dir, gpus_per_node=self.gpus_per_node, gpus=self.gpus, parameters=params, ep=self.ep)


PLAN_FLAG_NAMES = {
    "params": "--params",
    "model": "--model",
    "config": "--config",
    "optimizer": "--optimizer",
    "precision": "--precision",
    "framework": "--framework",
    "gpus": "--gpus",
    "gpus_per_node": "--gpus-per-node",
    "tp": "--tp",
    "pp": "--pp",
    "zero": "--zero",
    "ep": "--ep",
    "dtype": "--dtype",
    "option": "--option",
    "from_dir": "--from",
}


def _plan_flags(defaults: dict[str, Any], exclude: tuple[str, ...]) -> list[Flag]:
    from ckplan.sizing.layouts import LAYOUTS
    from ckplan.sizing.states import OPTIMIZERS, PRECISIONS

    d = {**_build_defaults(), **defaults}
    flags = [
        Flag(
            "from_dir",
            "--from",
            Path,
            "An existing checkpoint directory (DeepSpeed, DCP, Megatron, HF Trainer): "
            "its files, sizes and writer ranks measured from disk instead of the flags.",
        ),
        Flag("params", "--params", str, "Parameter count: 7e9, 7B, 70b, 1.5T.", DEFAULT_PARAMS),
        Flag("model", "--model", str, "A catalog model (see `ckplan models`)."),
        Flag("config", "--config", Path, "A Hugging Face config.json: the model's exact tensors, read locally."),
        Flag("optimizer", "--optimizer", str, ", ".join(OPTIMIZERS) + ".", d["optimizer"]),
        Flag("precision", "--precision", str, ", ".join(PRECISIONS) + ".", d["precision"]),
        Flag("framework", "--framework", str, ", ".join(LAYOUTS) + ".", d["framework"]),
        Flag("gpus", "--gpus", int, "World size.", str(d["gpus"])),
        Flag("gpus_per_node", "--gpus-per-node", int, "GPUs per node  [default: 8, or --gpus if fewer]"),
        Flag("tp", "--tp", int, "Tensor-parallel size.", str(d["tp"])),
        Flag("pp", "--pp", int, "Pipeline-parallel size.", str(d["pp"])),
        Flag(
            "zero",
            "--zero",
            int,
            "ZeRO stage 0-3 (3 = FSDP full sharding; hf: 0 = Trainer under DDP, 1-3 = Trainer + DeepSpeed).",
            "1; hf, lightning: 0" if d["zero"] is None else str(d["zero"]),
        ),
        Flag(
            "ep",
            "--ep",
            int,
            "Expert-parallel size (megatron, dcp, deepspeed; mixture-of-experts models).",
            str(d["ep"]),
        ),
        Flag("dtype", "--dtype", list[str], "Override a state's dtype: master=none, exp_avg_sq=bf16, optimizer=bf16."),
        Flag(
            "option",
            "--option",
            list[str],
            "Layout option, e.g. hf_shard_size=50GB, writer=fast (deepspeed), gather_16bit=true (hf under ZeRO-3).",
        ),
    ]
    return [f for f in flags if f.name not in exclude]


def plan_options(*, plan_file: bool = True, exclude: tuple[str, ...] = (), **defaults: Any) -> Callable:
    """Give the command `spec: PlanSpec` from the plan flags (and --plan, with `plan_file`). `defaults` replace
    build_plan's for this command (provision plans a large cluster: Megatron, tp 8)."""
    flags = _plan_flags(defaults, exclude)
    if plan_file:
        flags.insert(0, Flag("plan_file", "--plan", Path, "A plan from `ckplan size --json` instead of the flags."))

    def build(values: dict[str, Any]) -> PlanSpec:
        given = {k: v for k, v in values.items() if v is not None}
        whole = given.get("plan_file") or given.get("from_dir")  # a plan file or a directory is the whole plan
        chosen = {k: v for k, v in defaults.items() if k not in given and not whole}
        return PlanSpec(**chosen, **given)

    return _with_group("spec", flags, build)


# --- the policy group -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyFlag(Flag):
    field: str = ""  # the Policy field it sets
    parse: Callable[[Any, str], Any] = lambda value, flag: value


def _policy_flags() -> list[PolicyFlag]:
    from ckplan.planning import policy as p
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

    def rate_check(maximum: float, limit: str) -> Callable[[Any, str], float]:
        def check(text: str, flag: str) -> float:
            return check_range(parse_number(text, flag), flag, 0, maximum, text=text, limit=limit)

        return check

    def serializers(items: list[str], flag: str) -> dict[str, float]:
        out = {}
        for fmt, rate in pairs(items, flag).items():
            if fmt not in p.DEFAULT_SERIALIZE_BYTES_PER_S:
                raise InputError(
                    f"{flag} takes {' or '.join(f'{k}=RATE' for k in p.DEFAULT_SERIALIZE_BYTES_PER_S)}, got {fmt!r}"
                )
            out[fmt] = parse_rate(rate, flag)
        return out

    def mode(value: str, flag: str) -> str:
        if value not in ("sync", "async"):
            raise InputError(f"{flag} must be sync or async, got {value!r}")
        return value

    def flag(
        name: str,
        text: str,
        type_: Any,
        help_: str,
        shown: str | None,
        panel: str,
        field: str,
        parse: Callable[[Any, str], Any],
    ) -> PolicyFlag:
        return PolicyFlag(name, text, type_, help_, shown, panel, field=field, parse=parse)

    return [
        flag(
            "max_loss",
            "--max-loss",
            str,
            "Most work a crash may destroy, e.g. 1h.",
            fmt_duration(p.DEFAULT_MAX_LOSS_S),
            "Policy",
            "max_loss_s",
            parse_duration,
        ),
        flag(
            "max_overhead",
            "--max-overhead",
            str,
            "Share of time saves may block, e.g. 5%.",
            fmt_percent(p.DEFAULT_MAX_OVERHEAD),
            "Policy",
            "max_overhead",
            parse_fraction,
        ),
        flag(
            "mode",
            "--mode",
            str,
            "sync or async (snapshot to host memory, persist in the background).",
            p.DEFAULT_MODE,
            "Policy",
            "mode",
            mode,
        ),
        flag(
            "iteration_time",
            "--iteration-time",
            str,
            "Seconds per training step, to give the interval in steps.",
            None,
            "Policy",
            "iteration_s",
            parse_duration,
        ),
        flag(
            "mtbf",
            "--mtbf",
            str,
            "Job mean time between interruptions, e.g. 8h (overrides the rates); at least 1 s.",
            None,
            "Failures",
            "mtbf_s",
            lambda v, f: parse_duration(v, f, minimum=MIN_MTBF_S),
        ),
        flag(
            "node_failure_rate",
            "--node-failure-rate",
            str,
            "Interruptions per 1,000 node-days.",
            f"{p.DEFAULT_NODE_FAILURES_PER_1000_DAYS:g}",
            "Failures",
            "node_failures_per_1000_days",
            rate_check(
                MAX_FAILURES_PER_1000_NODE_DAYS,
                f"{MAX_FAILURES_PER_1000_NODE_DAYS:,} per 1,000 node-days, one a second",
            ),
        ),
        flag(
            "job_failure_rate",
            "--job-failure-rate",
            str,
            "Job-level interruptions per day (software, network).",
            f"{p.DEFAULT_JOB_FAILURES_PER_DAY:g}",
            "Failures",
            "job_failures_per_day",
            rate_check(MAX_FAILURES_PER_DAY, f"{MAX_FAILURES_PER_DAY:,} a day, one a second"),
        ),
        flag(
            "restart",
            "--restart",
            str,
            "Restart cost: detect, reschedule, load, warm up.",
            fmt_duration(p.DEFAULT_RESTART_S),
            "Failures",
            "restart_s",
            lambda v, f: parse_duration(v, f, allow_zero=True),
        ),
        flag(
            "snapshot_bandwidth",
            "--snapshot-bandwidth",
            str,
            "Async: device→host copy per GPU.",
            fmt_rate(p.DEFAULT_SNAPSHOT_BYTES_PER_S),
            "Assumptions",
            "snapshot_bytes_per_s",
            parse_rate,
        ),
        flag(
            "host_memory",
            "--host-memory",
            str,
            "Host memory per node (async snapshot, /dev/shm staging).",
            fmt_bytes(p.DEFAULT_HOST_MEMORY_BYTES),
            "Assumptions",
            "host_memory_bytes",
            parse_bytes,
        ),
        flag(
            "local_disk",
            "--local-disk",
            str,
            "Local NVMe capacity per node (staging).",
            fmt_bytes(p.DEFAULT_LOCAL_DISK_BYTES),
            "Assumptions",
            "local_disk_bytes",
            parse_bytes,
        ),
        flag(
            "changed_fraction",
            "--changed-fraction",
            str,
            "Incremental what-if: share of bytes that change per save.",
            fmt_percent(p.DEFAULT_CHANGED_FRACTION),
            "Assumptions",
            "changed_fraction",
            lambda v, f: parse_fraction(v, f, allow_one=True),
        ),
        flag(
            "serialize_bandwidth",
            "--serialize-bandwidth",
            list[str],
            "Serialiser speed per writer core, e.g. torch.save=2GB/s (default: this machine's calibration in the "
            "profile, else the named defaults).",
            None,
            "Assumptions",
            "serialize_bytes_per_s",
            serializers,
        ),
        flag(
            "aggregate_limit",
            "--aggregate-limit",
            str,
            "What the whole shared storage system sustains, e.g. 40GB/s: replaces the profile's limit and any "
            "extrapolation beyond the measured host counts.",
            None,
            "Assumptions",
            "aggregate_limit_bytes_per_s",
            parse_rate,
        ),
        flag(
            "save_time",
            "--save-time",
            str,
            "A measured save time: skips the save-time model.",
            None,
            "Measured",
            "save_time_s",
            parse_duration,
        ),
        flag(
            "stall_time",
            "--stall-time",
            str,
            "A measured async blocking time.",
            None,
            "Measured",
            "stall_time_s",
            parse_duration,
        ),
    ]


def policy_options(*, exclude: tuple[str, ...] = ()) -> Callable:
    """Give the command `policy: Policy` from the policy flags; a flag not given keeps Policy's default (policy.py)."""
    flags = [f for f in _policy_flags() if f.name not in exclude]

    def build(values: dict[str, Any]) -> Policy:
        from ckplan.planning.policy import Policy
        from ckplan.readers import validate_model

        chosen = {f.field: f.parse(values[f.name], f.flag) for f in flags if values[f.name] not in (None, [])}
        if "stall_time_s" in chosen and chosen.get("mode") != "async":
            raise InputError("--stall-time applies to --mode async only")
        return validate_model(chosen, Policy, "")

    return _with_group("policy", flags, build)


def flag_names() -> dict[str, str]:
    """Library parameter → CLI flag, for the ‹name›s in an InputError's message (errors.InputError.render)."""
    names = {f.name: f.flag for f in _plan_flags({}, ())}
    names.update({f.field: f.flag for f in _policy_flags()})
    names.update(
        dtype_overrides="--dtype",
        options="--option",
        plan_file="--plan",
        save_name="--save",
        keep="--keep",
        goodput="--target-goodput",
        ranks="--ranks",
        repeats="--repeats",
        scale="--scale",
        file="--file",
        by="--by",
        interval="--interval",
        pattern="--pattern",
        hosts="--hosts",
        hosts_file="--hosts-file",
        bind="--bind",
        port="--port",
        idle_timeout="--idle-timeout",
        agent_wait="--agent-wait",
        emit_jobs="--emit-jobs",
        region="--region",
        part_bytes="--part-size",
        max_bytes="--max-bytes",
        storage="--storage",
    )
    return names
