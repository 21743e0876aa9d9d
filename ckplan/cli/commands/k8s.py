"""`ckplan k8s`: the Kubernetes manifests of one probe of a shared volume from N nodes (ckplan.k8s).

A command of its own rather than a flag of `probe`: it measures nothing and needs no fio here, its inputs are
Kubernetes' (a claim, a namespace, an image, placement), and the probe it writes runs later, in a pod, with the
flags given after `--`, which are parsed here by `probe`'s own parser so that a typo fails now and not in the pod.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ckplan.cli import options as o
from ckplan.inputs import validate_inputs
from ckplan.k8s.request import ManifestRequest
from ckplan.render import emit

commands = typer.Typer()


def _request(given: dict) -> ManifestRequest:
    return validate_inputs(ManifestRequest, given)


def _check_probe_flags(mount_path: str, args: list[str]) -> None:
    """Parse the controller's probe flags as `ckplan probe` would: an unknown flag, a missing value or a stray
    argument is refused here, as the parser's error (exit 2)."""
    from ckplan.cli.app import LazyCommands

    if any(a in ("--help", "-h") for a in args):
        raise typer.BadParameter("--help is not a probe flag for the controller", param_hint="PROBE_FLAGS")
    probe = LazyCommands().commands["probe"]
    probe.make_context("probe", [mount_path, *args])


@commands.command()
@o.field_options("request", [ManifestRequest], _request)
def k8s(
    request: ManifestRequest,
    probe_flags: Annotated[
        list[str] | None,
        typer.Argument(
            help="More `ckplan probe` flags for the controller, after --: e.g. -- --quick --writers 4.",
            show_default=False,
        ),
    ] = None,
    json: o.Json = False,
) -> None:
    """Write the Kubernetes manifests of a probe of a PersistentVolumeClaim from N nodes: a headless Service, an
    Indexed Job of agents and a controller Job (or one JobSet). Apply them with `| kubectl apply -f -`."""
    from ckplan.k8s.manifests import manifests

    _check_probe_flags(request.mount_path, probe_flags or [])
    result = manifests(request, probe_flags or [])
    if not json:
        steps = "\n".join(f"#   {step}" for step in result.steps)
        print(f"# then, with these manifests saved as ckplan-k8s.yaml:\n{steps}", file=sys.stderr)
    emit(result, json)
