from ckplan.probe.engine import CleanResult
from ckplan.render.console import console


def render_clean(result: CleanResult) -> None:
    out = console()
    if not result.removed and not result.kept:
        out.print(f"nothing to clean under {result.target}")
    for path in result.removed:
        out.print(f"removed {path}")
    for path in result.kept:
        why = result.why.get(path, "written by another host's probe, which may still run")
        out.print(f"[yellow]kept[/yellow] {path}: {why} (--force removes it)")
