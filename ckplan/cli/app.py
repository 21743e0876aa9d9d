"""The `ckplan` command. Each command parses flags, calls one library function and renders.

Imports of the library and of heavy modules happen inside the commands, so
that `ckplan size` starts fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckplan.cli import options as o
from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed
from ckplan.render import emit

if TYPE_CHECKING:
    from ckplan.planning.policy import Policy

app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Plan checkpoint intervals and the storage they need.",
)

_debug = False  # set by --debug or CKPLAN_DEBUG=1: an internal error re-raises with its traceback


def _print_version(value: bool) -> None:
    if value:
        from ckplan import __version__

        print(f"ckplan {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error, show the traceback (also CKPLAN_DEBUG=1).")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print ckplan's version and exit.")
    ] = False,
) -> None:
    global _debug
    _debug = _debug or debug


@app.command()
@o.plan_options(plan_file=False)
def size(
    spec: o.PlanSpec,
    interval: Annotated[
        str | None, typer.Option(help="Save interval, e.g. 5m: adds the bandwidth and IOPS it needs.")
    ] = None,
    max_overhead: Annotated[
        str, typer.Option("--max-overhead", help="Share of the interval a save may block, e.g. 5%.")
    ] = "5%",
    full_manifest: Annotated[bool, typer.Option("--full-manifest", help="List every file.")] = False,
    json: o.Json = False,
) -> None:
    """What one checkpoint save writes: bytes, files, writers, and the bandwidth an interval needs."""
    from ckplan.sizing.plan import TYPICAL_INTERVALS_S, interval_demand
    from ckplan.units import parse_duration, parse_fraction

    interval_s = parse_duration(interval, "--interval") if interval is not None else None
    overhead = parse_fraction(max_overhead, "--max-overhead")
    plan = spec.plan()
    if interval_s is not None:
        plan = plan.model_copy(update={"interval": interval_demand(plan, interval_s, overhead)})
    else:
        plan = plan.model_copy(
            update={"typical_demand": [interval_demand(plan, t, overhead) for t in TYPICAL_INTERVALS_S]}
        )
    emit(plan, json, full_manifest=full_manifest)


@app.command()
def models(json: o.Json = False) -> None:
    """List the model catalog with derived and published parameter counts."""
    from ckplan.catalog import ModelCatalog
    from ckplan.catalog import models as load

    emit(ModelCatalog.from_catalog(load()), json)


EndpointUrl = Annotated[
    str | None, typer.Option("--endpoint-url", help="S3: endpoint of an S3-compatible store.", rich_help_panel="S3")
]
Region = Annotated[str | None, typer.Option(help="S3: region.", rich_help_panel="S3")]
AwsProfile = Annotated[
    str | None, typer.Option("--profile", help="S3: AWS profile from ~/.aws/config.", rich_help_panel="S3")
]
S3Timeout = Annotated[str, typer.Option(help="S3: connect and read timeout per request.", rich_help_panel="S3")]


@app.command()
def probe(
    path: Annotated[str, typer.Argument(help="A directory on the filesystem to measure, or s3://bucket/prefix.")],
    quick: Annotated[bool, typer.Option("--quick", help="About 15 s: one run per point.")] = False,
    thorough: Annotated[bool, typer.Option("--thorough", help="Longer runs, 5 repeats.")] = False,
    writers: Annotated[
        int | None,
        typer.Option(help="Most writers to test (default: the plan's writers per node, else the CPU count)."),
    ] = None,
    plan_file: o.PlanFile = None,
    scale: Annotated[
        float, typer.Option(help="Shrink every replayed file by this factor to fit a small machine.")
    ] = 1.0,
    max_bytes: Annotated[
        str | None, typer.Option("--max-bytes", help="Most bytes the probe may write at once, e.g. 10GB.")
    ] = None,
    save: Annotated[
        str | None, typer.Option(help="Save the profile under this name in the user config directory.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the profile to this file.")] = None,
    endpoint_url: EndpointUrl = None,
    region: Region = None,
    profile: AwsProfile = None,
    part_size: Annotated[
        str, typer.Option("--part-size", help="S3: multipart part size.", rich_help_panel="S3")
    ] = "8MiB",
    timeout: S3Timeout = "30s",
    hosts: Annotated[
        str | None,
        typer.Option(
            help="Probe from many hosts at once, each running `ckplan agent`: host[:port],…, "
            "Slurm host lists such as gpu[001-016]:8766, or slurm (the job's nodes).",
            rich_help_panel="Multi-host",
        ),
    ] = None,
    hosts_file: Annotated[
        Path | None,
        typer.Option("--hosts-file", help="One host[:port] or host list per line.", rich_help_panel="Multi-host"),
    ] = None,
    agent_wait: Annotated[
        str | None,
        typer.Option(
            "--agent-wait",
            help="Wait up to this long for every host's agent to answer (agents srun started a moment ago), e.g. 2m.",
            rich_help_panel="Multi-host",
        ),
    ] = None,
    no_calibrate: Annotated[
        bool, typer.Option("--no-calibrate", help="Skip measuring this machine's serialisers (`ckplan calibrate`).")
    ] = False,
    emit_jobs: Annotated[
        Path | None,
        typer.Option(
            "--emit-jobs",
            metavar="DIR",
            help="Write every fio run's job file, numbered in the order they ran, and run.sh to rerun them, "
            "into this new or empty directory.",
        ),
    ] = None,
    json: o.Json = False,
) -> None:
    """Measure what a target sustains: buffered and direct bandwidth against writers, small files, fsync latency,
    this machine's serialisers, and a replay of a plan."""
    import signal

    from ckplan import profile_store
    from ckplan.units import MAX_GPUS, check_range, parse_bytes

    # every flag that can be refused is checked before the probe writes a byte
    if not path.strip():  # Path("") is the current directory
        raise InputError("probe needs a directory or s3://bucket/prefix, got an empty path")
    if save is not None:
        profile_store.check_name(save)
    if hosts is not None and not hosts.strip(" ,"):
        raise InputError("--hosts names no hosts: give host[:port],…")
    if agent_wait is not None and not (hosts or hosts_file):
        raise InputError("--agent-wait applies to a multi-host probe (--hosts or --hosts-file)")
    if writers is not None:
        check_range(writers, "--writers", 1, MAX_GPUS, limit=f"{MAX_GPUS:,}")
    _output_file(out, "--out")
    if emit_jobs is not None and path.startswith("s3:"):
        raise InputError("--emit-jobs writes fio job files; the S3 probe runs ckplan's own client, not fio")
    if quick and thorough:
        raise InputError("give --quick or --thorough, not both")
    if not 0 < scale <= 1:
        raise InputError(f"--scale must be in (0, 1], got {scale}")
    from ckplan.probe.base import S3Options, TargetSpec
    from ckplan.probe.interface import open_target
    from ckplan.units import parse_duration

    target = open_target(
        TargetSpec(
            path,
            preset="quick" if quick else "thorough" if thorough else "default",
            writers=writers,
            plan=o.load_plan(plan_file) if plan_file else None,
            scale=scale,
            max_bytes=parse_bytes(max_bytes, "--max-bytes") if max_bytes else None,
            name=save,
            calibrate=not no_calibrate,
            emit_jobs=emit_jobs,
            hosts=hosts,
            hosts_file=hosts_file,
            agent_wait_s=parse_duration(agent_wait, "--agent-wait") if agent_wait is not None else None,
            notice=lambda line: print(f"ckplan: {line}", file=sys.stderr, flush=True),
            s3=S3Options(
                endpoint_url=endpoint_url,
                region=region,
                profile=profile,
                part_bytes=parse_bytes(part_size, "--part-size"),
                timeout_s=parse_duration(timeout, "--timeout"),
            ),
        )
    )
    estimate = target.estimated_seconds  # prepares: every check that can fail comes before a byte is written
    signal.signal(signal.SIGTERM, _interrupt)  # run the same cleanup as Ctrl-C
    from ckplan.render.profile import live_progress

    with live_progress(estimate) as live:
        result = target.run(live)
    from ckplan.probe.base import shared_target_warnings

    for warning in shared_target_warnings(result.notes):  # in the profile too, but shared figures must not pass unseen
        print(f"ckplan: warning: {warning}", file=sys.stderr)
    if save:
        where = profile_store.save(result, save)
        print(f"saved profile {save!r} to {where}", file=sys.stderr)
    if out:
        profile_store.write(result, out)
    emit(result, json)


@app.command()
def calibrate(
    quick: Annotated[bool, typer.Option("--quick", help="A smaller sample, 3 repeats.")] = False,
    thorough: Annotated[bool, typer.Option("--thorough", help="A larger sample, 9 repeats.")] = False,
    ranks: Annotated[
        int, typer.Option(help="Processes in the DCP save whose fixed cost is measured (the writers per node).")
    ] = 2,
    out: Annotated[Path | None, typer.Option(help="Write the calibration to this file (JSON).")] = None,
    json: o.Json = False,
) -> None:
    """Measure this machine's serialisers (torch.save, safetensors, DCP) per writer, and DCP's fixed cost per save."""
    from ckplan.validate.calibrate import calibrate as run

    if quick and thorough:
        raise InputError("give --quick or --thorough, not both")
    _output_file(out, "--out")
    from ckplan.render.profile import live_progress
    from ckplan.validate.calibrate import ESTIMATE_S

    preset = "quick" if quick else "thorough" if thorough else "default"
    with live_progress(ESTIMATE_S[preset]) as live:
        result = run(preset, ranks, live)
    if out:
        try:
            out.write_text(result.model_dump_json(indent=2))
        except OSError as exc:
            raise InputError(f"cannot write {out}: {exc.strerror}") from None
    emit(result, json)


@app.command()
def clean(
    path: Annotated[str, typer.Argument(help="The directory (or s3://bucket/prefix) a killed probe wrote under.")],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also remove what probes that may still run wrote: other hosts' scratch directories, live S3 probes' prefixes.",
        ),
    ] = False,
    endpoint_url: EndpointUrl = None,
    region: Region = None,
    profile: AwsProfile = None,
    timeout: S3Timeout = "30s",
    json: o.Json = False,
) -> None:
    """Remove what a probe killed with -9 left behind: scratch directories, or objects and multipart uploads."""
    if not path.strip():  # Path("") is the current directory: an empty argument must not clean it
        raise InputError("clean needs a directory or s3://bucket/prefix, got an empty path")
    from ckplan.probe.base import S3Options, TargetSpec
    from ckplan.probe.interface import open_target
    from ckplan.units import parse_duration

    result = open_target(
        TargetSpec(
            path,
            s3=S3Options(
                endpoint_url=endpoint_url,
                region=region,
                profile=profile,
                timeout_s=parse_duration(timeout, "--timeout"),
            ),
        )
    ).clean(force)
    emit(result, json)


@app.command()
def profiles(json: o.Json = False) -> None:
    """List saved storage profiles and the built-in storage classes."""
    from ckplan.profile_store import ProfileList

    emit(ProfileList.collect(), json)


Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Saved profile name, profile file, or built-in class (local-nvme, nfs, lustre, gpfs, s3, tmpfs).",
    ),
]


@app.command()
@o.plan_options()
@o.policy_options()
def recommend(spec: o.PlanSpec, policy: Policy, storage: Storage = None, json: o.Json = False) -> None:
    """The shortest safe and the best checkpoint interval for a plan on a storage target, with what-ifs."""
    from ckplan import catalog
    from ckplan.planning.recommend import compare
    from ckplan.planning.recommend import recommend as run

    plan = spec.plan()
    if storage is None:
        emit(compare(plan, policy, list(catalog.storage_classes().values())), json)
        return
    from ckplan import profile_store

    emit(run(plan, profile_store.resolve(storage), policy, catalog.planning_data()), json)


@app.command()
@o.plan_options()
@o.policy_options()
def report(
    spec: o.PlanSpec,
    policy: Policy,
    storage: Annotated[str, typer.Option("--storage", help="Saved profile name, profile file, or built-in class.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for report.md, report.html and the PNG charts.")] = Path(
        "ckplan-report"
    ),
    json: o.Json = False,
) -> None:
    """Write a capacity-review report (Markdown, HTML, PNG charts) for a plan on a storage target."""
    from ckplan import catalog, profile_store
    from ckplan.planning.recommend import recommend as run
    from ckplan.report import write_report

    plan = spec.plan()
    profile = profile_store.resolve(storage)
    emit(write_report(plan, profile, run(plan, profile, policy, catalog.planning_data()), out), json)


@app.command()
def validate(
    path: Annotated[str, typer.Argument(help="A directory on the target to save into.")],
    plan_file: Annotated[Path, typer.Option("--plan", help="A plan from `ckplan size --json`.")],
    storage: Annotated[
        str, typer.Option("--storage", help="The target's profile (from `ckplan probe`), a saved name or a file.")
    ],
    scale: Annotated[float, typer.Option(help="Shrink every file by this factor to fit the machine.")] = 1.0,
    repeats: Annotated[int, typer.Option(help="Saves to time; the median is reported.")] = 3,
    mode: Annotated[
        str, typer.Option(help="sync, or async (DCP async_save: blocking part and persist apart).")
    ] = "sync",
    max_bytes: Annotated[str | None, typer.Option("--max-bytes", help="Most bytes one save may write.")] = None,
    json: o.Json = False,
) -> None:
    """Save one node's share of a plan with real PyTorch calls and compare the time with the prediction."""
    from ckplan import profile_store
    from ckplan.units import parse_bytes
    from ckplan.validate.run import validate as run

    if mode not in ("sync", "async"):
        raise InputError(f"--mode must be sync or async, got {mode!r}")
    import signal

    signal.signal(signal.SIGTERM, _interrupt)  # the save processes and scratch directory go, as on Ctrl-C
    result = run(
        Path(path),
        o.load_plan(plan_file),
        profile_store.resolve(storage),
        scale=scale,
        repeats=repeats,
        mode=mode,
        max_bytes=parse_bytes(max_bytes, "--max-bytes") if max_bytes else None,
    )
    emit(result, json)


@app.command()
@o.plan_options(plan_file=False, exclude=("gpus", "from_dir"), framework="megatron", tp=8)
@o.policy_options(exclude=("mode", "iteration_time", "local_disk", "changed_fraction", "save_time", "stall_time"))
def provision(
    spec: o.PlanSpec,
    policy: Policy,
    gpus: Annotated[
        str, typer.Option("--gpus", help="Cluster size, or a sweep: 1024,4096,16384,65536.")
    ] = "1024,4096,16384,65536",
    mode: Annotated[str, typer.Option(help="sync, async or staged (local NVMe, then drain).")] = "sync",
    target_goodput: Annotated[
        str | None, typer.Option("--target-goodput", help="Expected ETTR to reach, e.g. 90%.")
    ] = None,
    keep: Annotated[int, typer.Option(help="Checkpoints kept on the target.")] = 2,
    storage: Annotated[
        str | None, typer.Option("--storage", help="Check an existing profile against the need (headroom).")
    ] = None,
    chart: Annotated[Path | None, typer.Option("--chart", help="Write a PNG chart of bandwidth against GPUs.")] = None,
    json: o.Json = False,
) -> None:
    """The write bandwidth, file rate and capacity a cluster needs for a goodput or overhead target."""
    from ckplan import catalog, profile_store
    from ckplan.planning.provision import provision_sweep
    from ckplan.units import parse_fraction

    _output_file(chart, "--chart")
    sizes = []
    for item in gpus.split(","):
        try:
            sizes.append(int(item))
        except ValueError:
            raise InputError(f"--gpus takes whole numbers separated by commas, got {item!r}") from None
    policy = policy.model_copy(update={"mode": "async" if mode == "async" else "sync"})
    plans = [spec.plan(gpus=g) for g in sizes]
    goodput = parse_fraction(target_goodput, "--target-goodput") if target_goodput else None
    profile = profile_store.resolve(storage) if storage else None
    sweep = provision_sweep(plans, policy, mode, goodput, keep, catalog.planning_data(), profile)
    if chart:
        from ckplan.render.charts import provision_chart

        provision_chart([sweep], chart)
    emit(sweep, json)


@app.command()
def diagnose(
    logs: Annotated[list[Path], typer.Argument(help="Training logs to read (any size; streamed).")],
    pattern: Annotated[
        str | None,
        typer.Option(help="A regex with (?P<duration>…) seconds, or (?P<start>…) and (?P<end>…) timestamps."),
    ] = None,
    by: Annotated[str, typer.Option(help="Fit against 'save' number or wall 'time'.")] = "save",
    interval: Annotated[str | None, typer.Option(help="The save interval, if the log has no timestamps.")] = None,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="A plan, to compare with ckplan's prediction.")
    ] = None,
    storage: Annotated[str | None, typer.Option("--storage", help="The target's profile, with --plan.")] = None,
    json: o.Json = False,
) -> None:
    """Is storage the bottleneck? Save times from training logs, their trend, and a verdict."""
    from ckplan import profile_store
    from ckplan.diagnose import diagnose_logs
    from ckplan.units import parse_duration

    if by not in ("save", "time"):
        raise InputError(f"--by must be save or time, got {by!r}")
    if (plan_file is None) != (storage is None):
        raise InputError("--plan and --storage go together")
    plan = o.load_plan(plan_file) if plan_file is not None else None
    profile = profile_store.resolve(storage) if storage is not None else None
    emit(
        diagnose_logs(
            logs,
            pattern,
            "wall time" if by == "time" else "save number",
            parse_duration(interval, "--interval") if interval else None,
            plan,
            profile,
        ),
        json,
    )


@app.command()
def watch(
    target: Annotated[
        str, typer.Argument(help="A path (its block device is watched) or a device such as /dev/nvme0n1.")
    ] = ".",
    interval: Annotated[str, typer.Option(help="Sampling interval.")] = "1s",
    duration: Annotated[str | None, typer.Option(help="Stop after this long (default: until Ctrl-C).")] = None,
    record: Annotated[Path | None, typer.Option(help="Save the timeline as CSV (.csv) or JSON.")] = None,
    json: o.Json = False,
) -> None:
    """A live iostat-like view of the device behind a path: write MB/s, IOPS, %util, w_await, GPU utilisation."""
    from ckplan.diagnose import device
    from ckplan.units import parse_duration

    _output_file(record, "--record")
    on_sample = None
    if not json:
        from ckplan.render.watch import print_sample

        on_sample = print_sample
    result = device.watch(
        target,
        parse_duration(interval, "--interval"),
        parse_duration(duration, "--duration") if duration else None,
        on_sample,
    )
    if record:
        device.record(result, record)
    emit(result, json)


@app.command()
def agent(
    bind: Annotated[
        str | None,
        typer.Option(
            help="Address or host name the fio server listens on; slurm: this node's "
            "Slurm name (SLURMD_NODENAME). Bind to a trusted network only. "
            "Default: $CKPLAN_AGENT_BIND, else 127.0.0.1.",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        str | None, typer.Option(help="Port. Default: $CKPLAN_AGENT_PORT, else 8765 (fio's).", show_default=False)
    ] = None,
    idle_timeout: Annotated[
        str | None,
        typer.Option(
            "--idle-timeout",
            help="Exit after this long with no probe "
            "connected, e.g. 10m. Default: $CKPLAN_AGENT_IDLE_TIMEOUT, else never.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a fio server on this host for `ckplan probe PATH --hosts …` (fio's protocol has no authentication).
    It stops on SIGTERM (a Slurm job's end), and every fio process with it; safe under `srun --ntasks-per-node=1`."""
    import shlex

    from ckplan.probe.agent import agent_settings, check_port_free, run_agent
    from ckplan.probe.cluster import agent_command, is_loopback

    settings = agent_settings(bind, port, idle_timeout)
    check_port_free(settings.address, settings.port)
    cmd = agent_command(settings.address, settings.port)
    where = f"{settings.address}:{settings.port}" + (f" ({settings.bind})" if settings.bind else "")
    if not is_loopback(settings.address):
        print(
            f"ckplan: warning: fio's server protocol has no authentication; anyone who reaches {where} "
            "can run jobs as this user. Bind to a trusted network only.",
            file=sys.stderr,
        )
    print(f"running: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    raise typer.Exit(run_agent(settings, lambda line: print(f"ckplan agent: {line}", file=sys.stderr, flush=True)))


@app.command("compress-test")
def compress_test(
    file: Annotated[
        Path | None,
        typer.Option("--file", help="Tensor bytes to test (a shard); default: generated bf16/fp32 Adam state."),
    ] = None,
    json: o.Json = False,
) -> None:
    """Measure zstd and lz4 ratio and per-core speed on real tensor bytes."""
    from ckplan.compressibility import measure_compressibility

    emit(measure_compressibility(file), json)


def _output_file(path: Path | None, flag: str) -> None:
    """Refuse an output file that is a directory before the work whose result it would hold."""
    if path is not None and path.is_dir():
        raise InputError(f"{flag} {path} is a directory; give a file name")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """Entry point: every error becomes one line on stderr and an exit code.

    2 bad input, 3 a missing or broken environment, 4 a measurement that failed,
    130 interrupted, 1 anything else (a bug; --debug shows its traceback).
    The parser's errors are typer's public exception classes (typer.Exit, typer.Abort and
    typer.TyperException, the base of the click exceptions typer vendors).
    """
    global _debug
    _debug = os.environ.get("CKPLAN_DEBUG", "") not in ("", "0")
    try:
        result = app(standalone_mode=False)
    except InputError as exc:
        _fail(exc.render(o.flag_names()) or type(exc).__name__, exc.exit_code)
    except (EnvironmentProblem, MeasurementFailed) as exc:
        _fail(str(exc) or type(exc).__name__, exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        print("ckplan: interrupted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as exc:
        _exit(exc.exit_code)
    except typer.TyperException as exc:  # the parser's errors (click's, as typer vendors them)
        if len(sys.argv) <= 1:  # `ckplan` alone: the help was shown (no_args_is_help), not an error
            sys.exit(0)
        _fail(exc.format_message(), exc.exit_code or 2)
    except Exception as exc:
        name = type(exc).__name__
        if _debug:
            raise
        detail = str(exc).strip().splitlines()
        print(
            f"ckplan: internal error: {name}{': ' + detail[0] if detail else ''} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)
    _exit(result if isinstance(result, int) else 0)


def _exit(code: int) -> None:
    if code == 130:  # typer turns KeyboardInterrupt (Ctrl-C, or SIGTERM in a probe) into exit code 130
        print("ckplan: interrupted", file=sys.stderr)
    sys.exit(code)


def _fail(message: str, code: int) -> None:
    print(f"ckplan: error: {message.strip().splitlines()[0]}", file=sys.stderr)
    sys.exit(code)
