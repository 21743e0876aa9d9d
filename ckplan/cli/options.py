"""Option groups: the flags that describe a plan and the flags of a policy, each declared once, parsed once.

A command decorated with `@plan_options(...)` receives `spec: PlanSpec`, and with `@policy_options(...)` receives
`policy: Policy`; typer sees the group's flags in the command's signature as if they were written there. The
flags default to "not given" (None): a plan's defaults are `build_plan`'s own and a policy's are `Policy`'s,
from policy.py, shown in `--help` from there, so no default is restated in a signature.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from ckplan.errors import InputError
from ckplan.inputs import validate_inputs
from ckplan.request import PlanRequest

if TYPE_CHECKING:
    from ckplan.planning.policy import Policy
    from ckplan.sizing.plan import CheckpointPlan

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


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside, SIGTERM (a job's end), SIGHUP (the terminal gone) and SIGQUIT (Ctrl-\\) run the same cleanup as
    Ctrl-C: KeyboardInterrupt, which the commands that leave scratch, save processes or fio behind undo, and exit
    130. Only the first signal raises: a second one while that cleanup runs would cut it short and leave the scratch
    behind (the cleanup's own waits are bounded)."""
    from ckplan.children import on_stopping_signals

    received: list[int] = []

    def interrupt(signum: int) -> None:
        if not received:
            received.append(signum)
            raise KeyboardInterrupt

    with on_stopping_signals(interrupt):
        yield


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


class PlanSpec(PlanRequest):
    """A plan as the flags give it: a plan file (--plan), or the plan request the other flags make."""

    plan_file: Path | None = None

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


def _plan_flags(defaults: dict[str, Any], exclude: tuple[str, ...]) -> list[Flag]:
    from ckplan.frameworks import FRAMEWORKS
    from ckplan.model.states import OPTIMIZERS, PRECISIONS
    from ckplan.request import DEFAULT_PARAMETERS

    d = {**_build_defaults(), **defaults}
    flags = [
        Flag(
            "from_dir",
            "--from",
            Path,
            "An existing checkpoint directory (DeepSpeed, DCP, Megatron, HF Trainer): "
            "its files, sizes and writer ranks measured from disk instead of the flags.",
        ),
        Flag("params", "--params", str, "Parameter count: 7e9, 7B, 70b, 1.5T.", f"{DEFAULT_PARAMETERS:,}"),
        Flag("model", "--model", str, "A catalog model (see `ckplan models`)."),
        Flag("config", "--config", Path, "A Hugging Face config.json: the model's exact tensors, read locally."),
        Flag("optimizer", "--optimizer", str, ", ".join(OPTIMIZERS) + ".", d["optimizer"]),
        Flag("precision", "--precision", str, ", ".join(PRECISIONS) + ".", d["precision"]),
        Flag("framework", "--framework", str, ", ".join(FRAMEWORKS) + ".", d["framework"]),
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
        Flag(
            "dtype_overrides",
            "--dtype",
            list[str],
            "Override a state's dtype: master=none, exp_avg_sq=bf16, optimizer=bf16.",
        ),
        Flag(
            "options",
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
        given = {k: v for k, v in values.items() if v not in (None, [])}
        for name, flag in (("dtype_overrides", "--dtype"), ("options", "--option")):
            if name in given:
                given[name] = pairs(given[name], flag)
        whole = given.get("plan_file") or given.get("from_dir")  # a plan file or a directory is the whole plan
        chosen = {k: v for k, v in defaults.items() if k not in given and not whole}
        return validate_inputs(PlanSpec, {**chosen, **given})

    return _with_group("spec", flags, build)


# --- the policy group -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyFlag(Flag):
    field: str = ""  # the Policy field it sets


def _policy_flags() -> list[PolicyFlag]:
    from ckplan.planning import policy as p
    from ckplan.units import fmt_bytes, fmt_duration, fmt_percent, fmt_rate

    def flag(
        name: str,
        text: str,
        type_: Any,
        help_: str,
        shown: str | None,
        panel: str,
        field: str,
    ) -> PolicyFlag:
        return PolicyFlag(name, text, type_, help_, shown, panel, field=field)

    return [
        flag(
            "max_loss",
            "--max-loss",
            str,
            "Most work a crash may destroy, e.g. 1h.",
            fmt_duration(p.DEFAULT_MAX_LOSS_S),
            "Policy",
            "max_loss_s",
        ),
        flag(
            "max_overhead",
            "--max-overhead",
            str,
            "Share of time saves may block, e.g. 5%.",
            fmt_percent(p.DEFAULT_MAX_OVERHEAD),
            "Policy",
            "max_overhead",
        ),
        flag(
            "mode",
            "--mode",
            str,
            "sync or async (snapshot to host memory, persist in the background).",
            p.DEFAULT_MODE,
            "Policy",
            "mode",
        ),
        flag(
            "iteration_time",
            "--iteration-time",
            str,
            "Seconds per training step, to give the interval in steps.",
            None,
            "Policy",
            "iteration_s",
        ),
        flag(
            "mtbf",
            "--mtbf",
            str,
            "Job mean time between interruptions, e.g. 8h (overrides the rates); at least 1 s.",
            None,
            "Failures",
            "mtbf_s",
        ),
        flag(
            "node_failure_rate",
            "--node-failure-rate",
            str,
            "Interruptions per 1,000 node-days.",
            f"{p.DEFAULT_NODE_FAILURES_PER_1000_DAYS:g}",
            "Failures",
            "node_failures_per_1000_days",
        ),
        flag(
            "job_failure_rate",
            "--job-failure-rate",
            str,
            "Job-level interruptions per day (software, network).",
            f"{p.DEFAULT_JOB_FAILURES_PER_DAY:g}",
            "Failures",
            "job_failures_per_day",
        ),
        flag(
            "restart",
            "--restart",
            str,
            "The whole restart cost, measured (detect, reschedule, load, warm up); replaces fixed part + predicted load.",
            None,
            "Failures",
            "restart_s",
        ),
        flag(
            "restart_fixed",
            "--restart-fixed",
            str,
            "Restart cost besides the checkpoint's load (detect, reschedule, initialise); the load is predicted.",
            fmt_duration(p.DEFAULT_RESTART_FIXED_S),
            "Failures",
            "restart_fixed_s",
        ),
        flag(
            "collective_timeout",
            "--collective-timeout",
            str,
            "The process group's collective timeout (init_process_group(timeout=)); saves near it are warned about.",
            fmt_duration(p.COLLECTIVE_TIMEOUT_S),
            "Failures",
            "collective_timeout_s",
        ),
        flag(
            "snapshot_bandwidth",
            "--snapshot-bandwidth",
            str,
            "Async: device→host copy per GPU.",
            fmt_rate(p.DEFAULT_SNAPSHOT_BYTES_PER_S),
            "Assumptions",
            "snapshot_bytes_per_s",
        ),
        flag(
            "host_memory",
            "--host-memory",
            str,
            "Host memory per node (async snapshot, /dev/shm staging).",
            fmt_bytes(p.DEFAULT_HOST_MEMORY_BYTES),
            "Assumptions",
            "host_memory_bytes",
        ),
        flag(
            "local_disk",
            "--local-disk",
            str,
            "Local NVMe capacity per node (staging).",
            fmt_bytes(p.DEFAULT_LOCAL_DISK_BYTES),
            "Assumptions",
            "local_disk_bytes",
        ),
        flag(
            "changed_fraction",
            "--changed-fraction",
            str,
            "Incremental what-if: share of bytes that change per save.",
            fmt_percent(p.DEFAULT_CHANGED_FRACTION),
            "Assumptions",
            "changed_fraction",
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
        ),
        flag(
            "save_time",
            "--save-time",
            str,
            "A measured save time: skips the save-time model.",
            None,
            "Measured",
            "save_time_s",
        ),
        flag(
            "stall_time",
            "--stall-time",
            str,
            "A measured async blocking time.",
            None,
            "Measured",
            "stall_time_s",
        ),
    ]


def policy_options(*, exclude: tuple[str, ...] = ()) -> Callable:
    """Give the command `policy: Policy` from the policy flags; a flag not given keeps Policy's default (policy.py)."""
    flags = [f for f in _policy_flags() if f.name not in exclude]

    def build(values: dict[str, Any]) -> Policy:
        from ckplan.planning.policy import Policy

        chosen = {f.field: values[f.name] for f in flags if values[f.name] not in (None, [])}
        if "serialize_bytes_per_s" in chosen:
            chosen["serialize_bytes_per_s"] = pairs(chosen["serialize_bytes_per_s"], "--serialize-bandwidth")
        return Policy.from_inputs(chosen)

    return _with_group("policy", flags, build)


def flag_names() -> dict[str, str]:
    """Library parameter → CLI flag, for the ‹name›s in an InputError's message (errors.InputError.render)."""
    names = {f.name: f.flag for f in _plan_flags({}, ())}
    names.update({f.field: f.flag for f in _policy_flags()})
    names.update(
        plan_file="--plan",
        plan="--plan",
        save_name="--save",
        save="--save",
        keep="--keep",
        goodput="--target-goodput",
        target_goodput="--target-goodput",
        max_restore="--max-restore",
        writers="--writers",
        out="--out",
        part_size="--part-size",
        timeout="--timeout",
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
