"""Measuring a target: `probe`, `calibrate`, `clean`, `profiles`, and `agent` for multi-host probes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckplan.children import interrupt_on_signals
from ckplan.cli import options as o
from ckplan.errors import InputError
from ckplan.inputs import validate_inputs
from ckplan.probe.backends.s3 import S3Options
from ckplan.render import emit
from ckplan.terminal import visible

commands = typer.Typer()


def _notice(line: str) -> None:
    print(f"ckplan: {visible(line)}", file=sys.stderr, flush=True)


@commands.command()
@o.probe_options()
def probe(
    path: Annotated[str, typer.Argument(help="A directory on the filesystem to measure, or s3://bucket/prefix.")],
    probe: dict,
    quick: Annotated[bool, typer.Option("--quick", help="About 15 s: one run per point.")] = False,
    thorough: Annotated[bool, typer.Option("--thorough", help="Longer runs, 5 repeats.")] = False,
    no_calibrate: Annotated[
        bool, typer.Option("--no-calibrate", help="Skip measuring this machine's serialisers (`ckplan calibrate`).")
    ] = False,
    json: o.Json = False,
) -> None:
    """Measure what a target sustains: buffered and direct bandwidth against writers, small files, fsync latency,
    this machine's serialisers, and a replay of a plan."""
    from ckplan import api
    from ckplan.probe.engine import incomplete, shared_target_warnings
    from ckplan.probe.request import ProbeRequest
    from ckplan.render.profile import live_progress

    own = {"path": path, "preset": o.preset(quick, thorough), "calibrate": not no_calibrate}
    request = ProbeRequest.from_inputs({**own, **probe})
    target = api.open_request(request, notice=_notice)
    estimate = target.estimated_seconds  # prepares: every check that can fail comes before a byte is written
    with interrupt_on_signals(), live_progress(estimate) as live:
        result = target.run(live)
    for warning in shared_target_warnings(result.notes):  # in the profile too, but shared figures must not pass unseen
        print(f"ckplan: warning: {visible(warning)}", file=sys.stderr)
    where = api.keep_profile(result, request.save, request.out)
    if where is not None:
        print(f"saved profile {request.save!r} to {where}", file=sys.stderr)
    emit(result, json)
    failed = incomplete(result, [f"written to {kept}" for kept in (where, request.out) if kept is not None])
    if failed is not None:  # a late phase failed: the profile is kept and shown, and the exit code says so (4)
        raise failed


@commands.command()
def calibrate(
    quick: Annotated[bool, typer.Option("--quick", help="A smaller sample, 3 repeats.")] = False,
    thorough: Annotated[bool, typer.Option("--thorough", help="A larger sample, 9 repeats.")] = False,
    ranks: Annotated[
        int, typer.Option(help="Processes in the DCP save whose fixed cost is measured (the writers per node).")
    ] = 2,
    out: Annotated[Path | None, typer.Option(help="Write the calibration to this file (JSON).")] = None,
    json: o.Json = False,
) -> None:
    """Measure this machine's serialisers and deserialisers (torch.save, safetensors, DCP) per rank, and DCP's fixed cost
    per save."""
    from ckplan.savers.calibrate import calibrate as run

    preset = o.preset(quick, thorough)
    o.output_file(out, "--out")
    from ckplan import profile_store
    from ckplan.render.profile import live_progress
    from ckplan.savers.calibrate import ESTIMATE_S

    with interrupt_on_signals(), live_progress(ESTIMATE_S[preset]) as live:
        result = run(preset, ranks, live)
    if out:
        profile_store.write(result, out)
    emit(result, json)


def _s3(given: dict) -> S3Options:
    return validate_inputs(S3Options, given)


@commands.command()
@o.field_options("s3", [S3Options], _s3, exclude=("part_bytes",))
def clean(
    path: Annotated[str, typer.Argument(help="The directory (or s3://bucket/prefix) a killed probe wrote under.")],
    s3: S3Options,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also remove what probes that may still run wrote: other hosts' scratch directories, live S3 probes' prefixes.",
        ),
    ] = False,
    json: o.Json = False,
) -> None:
    """Remove what a probe killed with -9 left behind: scratch directories, or objects and multipart uploads."""
    if not path.strip():  # Path("") is the current directory: an empty argument must not clean it
        raise InputError("clean needs a directory or s3://bucket/prefix, got an empty path")
    from ckplan.probe.backends import ProbeTarget
    from ckplan.probe.engine import TargetSpec

    emit(ProbeTarget(TargetSpec(path, options=s3)).clean(force), json)


@commands.command()
def profiles(json: o.Json = False) -> None:
    """List saved storage profiles and the built-in storage classes."""
    from ckplan.profile_store import ProfileList

    emit(ProfileList.collect(), json)


@commands.command()
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
    info_port: Annotated[
        str | None,
        typer.Option(
            "--info-port",
            help="Also answer GET / on this port with this node's name (`probe --agent-info-port`), 503 until fio "
            "listens: a pod's readiness probe. Default: $CKPLAN_AGENT_INFO_PORT, else none.",
            show_default=False,
        ),
    ] = None,
    linger: Annotated[
        str | None,
        typer.Option(
            help="Once a probe has connected, exit after this long with none connected, e.g. 5m (an agent pod's "
            "end). Default: $CKPLAN_AGENT_LINGER, else never.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a fio server on this host for `ckplan probe PATH --hosts …` (fio's protocol has no authentication).
    It stops on SIGTERM (a Slurm job's end), and every fio process with it; safe under `srun --ntasks-per-node=1`."""
    import shlex

    from ckplan.agent import agent_command, agent_settings, check_port_free, is_loopback, run_agent

    settings = agent_settings(bind, port, idle_timeout, info_port=info_port, linger=linger)
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
    raise typer.Exit(
        run_agent(settings, lambda line: print(f"ckplan agent: {visible(line)}", file=sys.stderr, flush=True))
    )
