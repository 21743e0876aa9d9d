"""Planning on a target: `recommend`, `report` and `provision`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckplan.cli import options as o
from ckplan.errors import InputError
from ckplan.render import emit

if TYPE_CHECKING:
    from ckplan.planning.policy import Policy

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
    from ckplan import catalog
    from ckplan.planning.recommend import compare
    from ckplan.planning.recommend import recommend as run

    plan = spec.plan()
    if storage is None:
        emit(compare(plan, policy, list(catalog.storage_classes().values())), json)
        return
    from ckplan import profile_store

    emit(run(plan, profile_store.resolve(storage), policy, catalog.planning_data()), json)


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
    from ckplan import catalog, profile_store
    from ckplan.outputs import check_output_dir
    from ckplan.planning.recommend import recommend as run
    from ckplan.report import write_report

    check_output_dir(out, "--out")
    plan = spec.plan()
    profile = profile_store.resolve(storage)
    emit(write_report(plan, profile, run(plan, profile, policy, catalog.planning_data()), out), json)


@commands.command()
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
    from ckplan.planning.provision import check_sweep_sizes, provision_sweep
    from ckplan.units import parse_fraction

    o.output_file(chart, "--chart")
    check_sweep_sizes(len(gpus.split(",")))
    sizes = []
    for item in gpus.split(","):
        try:
            sizes.append(int(item))
        except ValueError:
            raise InputError(f"--gpus takes whole numbers separated by commas, got {item!r}") from None
    plans = [spec.plan(gpus=g) for g in sizes]
    goodput = parse_fraction(target_goodput, "--target-goodput") if target_goodput else None
    profile = profile_store.resolve(storage) if storage else None
    sweep = provision_sweep(plans, policy, mode, goodput, keep, catalog.planning_data(), profile)
    if chart:
        from ckplan.render.charts import provision_chart

        provision_chart([sweep], chart)
    emit(sweep, json)
