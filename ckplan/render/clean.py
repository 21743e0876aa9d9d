from ckplan.probe.engine import CleanResult
from ckplan.render.console import console, shown


def render_clean(result: CleanResult) -> None:
    out = console()
    if not result.removed and not result.kept:
        out.print(f"nothing to clean under {shown(result.target)}")
    for path in result.removed:
        out.print(f"removed {shown(path)}")
    for path in result.kept:
        why = result.why.get(path, "written by another host's probe, which may still run")
        out.print(f"[yellow]kept[/yellow] {shown(path)}: {shown(why)} (--force removes it)")
