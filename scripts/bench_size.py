#!/usr/bin/env python3
"""Benchmark `ckplan size`: CLI start-up and the cost of a full 1,024-GPU manifest.

Targets: `ckplan size --params 7e9 --optimizer adam` at most 1.6× the time of
`python -c "import typer, rich, pydantic"` (issue 17), measured as a ratio in alternating runs on
this noisy VM (each round runs the three programs, the order reversed every other round), median and
min…max of the per-round ratios; and sizing a 1T-parameter model on 1,024 GPUs with its full manifest
under 1 s (issue 2). Prints one line per figure; exits 1 if a target is missed.

Beside them it times two floors, programs that do a sliver of `size`'s work with the same libraries:
- the CLI floor, a typer app with as many options as `ckplan size` that prints one rich table and does
  nothing else. typer 0.29 builds a pydantic TypeAdapter for each parameter of the command it runs, which
  imports pydantic's schema machinery that a bare `import pydantic` never loads;
- the model floor, no command line at all: one three-field pydantic model validated and printed as one rich
  table. Every ckplan result is a pydantic model (`--json` prints the model the table shows), and the first
  model validated in a process imports and runs that same machinery.
They show how much of ckplan's ratio any program built this way pays, and ckplan ÷ CLI floor what is ckplan's
own.

Python runs with its bytecode cache, as after `pip install` (which compiles every module): this shell sets
PYTHONDONTWRITEBYTECODE, under which every run would recompile ckplan's sources but not site-packages'.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time

RUNS = 15
MODEL_FLOOR = """
import typer, rich, pydantic
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
class Result(BaseModel):
    parameters: int
    optimizer: str
    bytes_per_state: list[float] = []
result = Result(parameters=7_000_000_000, optimizer="adam", bytes_per_state=[2.0, 4.0, 4.0, 4.0])
table = Table(title="floor")
for column in ("field", "value"):
    table.add_column(column)
for name, value in result:
    table.add_row(name, str(value))
Console().print(table)
"""
FLOOR_APP = """
import inspect
import sys
from typing import Annotated, Optional
import typer
OPTIONS = int(sys.argv.pop(1))  # python -c FLOOR_APP OPTIONS size --o0 …
app = typer.Typer()
@app.callback()
def main() -> None:
    pass
def command(**options: Optional[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title="floor")
    for column in ("option", "value"):
        table.add_column(column)
    for name, value in options.items():
        table.add_row(name, str(value))
    Console().print(table)
command.__signature__ = inspect.Signature([
    inspect.Parameter(f"o{i}", inspect.Parameter.KEYWORD_ONLY, default=None,
                      annotation=Annotated[Optional[str], typer.Option(f"--o{i}")])
    for i in range(OPTIONS)
])
app.command("size")(command)
app()
"""
LARGE = (
    "import time, resource; t = time.perf_counter(); "
    "from ckplan import catalog; from ckplan.sizing.plan import build_plan, nearest_shape; "
    "p = build_plan(arch=nearest_shape(1e12, catalog.models()), parameters=10**12, gpus=1024, tp=8, pp=8, zero=1); "
    "d = p.model_dump_json(); e = time.perf_counter() - t; "
    "print(e, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, p.file_count, len(d))"
)


def main() -> int:
    exe = shutil.which("ckplan", path=os.path.dirname(sys.executable)) or shutil.which("ckplan")
    cmd = [exe, "size", "--params", "7e9", "--optimizer", "adam"]
    base = [sys.executable, "-c", "import typer, rich, pydantic"]
    import typer.main

    from ckplan.cli.app import app as ckplan_app

    options = len(typer.main.get_command(ckplan_app).commands["size"].params)  # --help is not among them
    floor = [sys.executable, "-c", FLOOR_APP, str(options), "size", "--o0", "7e9", "--o1", "adam"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1"}
    programs = {"baseline": base, "ckplan": cmd, "floor": floor, "model floor": [sys.executable, "-c", MODEL_FLOOR]}

    def timed(argv: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        return time.perf_counter() - t

    for argv in programs.values():  # warm the page cache and write the .pyc files
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name in programs}
    for i in range(RUNS):
        for name in list(programs) if i % 2 == 0 else list(programs)[::-1]:
            times[name].append(timed(programs[name]))

    def ratio(num: str, den: str) -> tuple[float, float, float]:
        r = [a / b for a, b in zip(times[num], times[den], strict=True)]
        return statistics.median(r), min(r), max(r)

    def seconds(name: str) -> str:
        t = times[name]
        return f"{statistics.median(t):.3f} s ({min(t):.3f}…{max(t):.3f})"

    median, low, high = ratio("ckplan", "baseline")
    print(
        f"ckplan size --params 7e9 --optimizer adam: {seconds('ckplan')}; "
        f"python -c 'import typer, rich, pydantic': {seconds('baseline')}; "
        f"ratio {median:.2f}× median ({low:.2f}…{high:.2f}) over {RUNS} alternating rounds; target ≤ 1.60×"
    )
    f_median, f_low, f_high = ratio("floor", "baseline")
    o_median, o_low, o_high = ratio("ckplan", "floor")
    print(
        f"CLI floor, a typer app with {options} options printing one rich table: {seconds('floor')}; "
        f"floor ÷ baseline {f_median:.2f}× ({f_low:.2f}…{f_high:.2f}); "
        f"ckplan ÷ floor {o_median:.2f}× ({o_low:.2f}…{o_high:.2f})"
    )
    m_median, m_low, m_high = ratio("model floor", "baseline")
    print(
        f"model floor, one pydantic model validated and printed as one rich table, no command line: "
        f"{seconds('model floor')}; ÷ baseline {m_median:.2f}× ({m_low:.2f}…{m_high:.2f})"
    )
    elapsed, peak, files, size = subprocess.run(
        [sys.executable, "-c", LARGE], capture_output=True, text=True, check=True
    ).stdout.split()
    print(
        f"1T params, 1,024 GPUs (tp 8, pp 8, ZeRO-1), full manifest of {int(files):,} files: "
        f"{float(elapsed):.3f} s to plan and serialise ({int(size) / 1e6:.1f} MB JSON), "
        f"process peak RSS {int(peak) / 2**20:.0f} MiB; target < 1 s"
    )
    return 0 if median <= 1.6 and float(elapsed) < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
