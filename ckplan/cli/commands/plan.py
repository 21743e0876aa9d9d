"""Planning on a target: `recommend`, `report` and `provision`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckplan.api import PROVISION_FRAMEWORK, PROVISION_GPUS, PROVISION_TP
from ckplan.cli import options as o
from ckplan.planning.policy import Policy  # the option group's type, resolved when the command is built
from ckplan.render import emit

commands = typer.Typer()


Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Saved profile name, profile file, or built-in class (local-nvme, nfs, lustre, gpfs, s3, tmpfs).",
    ),
]


@commands.command()
@o.plan_options()
@o.policy_options()
def recommend(spec: o.PlanSpec, policy: Policy, storage: Storage = None, json: o.Json = False) -> None:
    """The shortest safe and the best checkpoint interval for a plan on a storage target, with what-ifs."""
    from ckplan import api

    plan = spec.plan()
    if storage is None:
        emit(api.compare(plan, policy=policy), json)
        return
    emit(api.recommend(plan, storage, policy=policy), json)


@commands.command()
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
    from ckplan import api, profile_store
    from ckplan.outputs import check_output_dir
    from ckplan.report import write_report

    check_output_dir(out, "--out")
    plan = spec.plan()
    profile = profile_store.resolve(storage)
    emit(write_report(plan, profile, api.recommend(plan, profile, policy=policy), out), json)


@commands.command()
@o.plan_options(plan_file=False, exclude=("gpus", "from_dir"), framework=PROVISION_FRAMEWORK, tp=PROVISION_TP)
@o.policy_options(
    exclude=("mode", "iteration_s", "local_disk_bytes", "changed_fraction", "save_time_s", "stall_time_s")
)
def provision(
    spec: o.PlanSpec,
    policy: Policy,
    gpus: Annotated[str, typer.Option("--gpus", help="Cluster size, or a sweep: 1024,4096,16384,65536.")] = ",".join(
        map(str, PROVISION_GPUS)
    ),
    mode: Annotated[str, typer.Option(help="sync, async or staged (local NVMe, then drain).")] = "sync",
    target_goodput: Annotated[
        str | None, typer.Option("--target-goodput", help="Expected ETTR to reach, e.g. 90%.")
    ] = None,
    keep: Annotated[int, typer.Option(help="Checkpoints kept on the target.")] = 2,
    storage: Annotated[
        str | None, typer.Option("--storage", help="Check an existing profile against the need (headroom).")
    ] = None,
    max_restore: Annotated[
        str | None,
        typer.Option(
            "--max-restore",
            help="Restart target, e.g. 10m: the cold read bandwidth that loads the checkpoint within it (after "
            "--restart-fixed).",
        ),
    ] = None,
    chart: Annotated[Path | None, typer.Option("--chart", help="Write a PNG chart of bandwidth against GPUs.")] = None,
    json: o.Json = False,
) -> None:
    """The write and read bandwidth, file rate and capacity a cluster needs for a goodput, overhead or restart target."""
    from ckplan.api import provision_request

    o.output_file(chart, "--chart")
    sweep = provision_request(
        spec,
        gpus,
        policy=policy,
        mode=mode,
        target_goodput=target_goodput or None,
        keep=keep,
        storage=storage or None,
        max_restore=max_restore or None,
    )
    if chart:
        from ckplan.render.charts import provision_chart

        provision_chart([sweep], chart)
    emit(sweep, json)
