#!/usr/bin/env python3
"""Benchmark `ckplan size`: CLI start-up and the cost of a full 1,024-GPU manifest.

Targets: `ckplan size --params 7e9 --optimizer adam` at most 1.6× the time of
`python -c "import typer, rich, pydantic"`, measured as a ratio in alternating runs on
this noisy VM (each round runs the three programs, the order reversed every other round), median and
min…max of the per-round ratios; and sizing a 1T-parameter model on 1,024 GPUs with its full manifest
under 1 s. Prints one line per figure; exits 1 if a target is missed.

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

    def ratios(num: str, den: str) -> list[float]:
        return [a / b for a, b in zip(times[num], times[den], strict=True)]

    def spread(values: list[float], unit: str, digits: int) -> str:
        return f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}…{max(values):.{digits}f})"

    median = statistics.median(ratios("ckplan", "baseline"))
    print(
        f"ckplan size --params 7e9 --optimizer adam: {spread(times['ckplan'], ' s', 3)}; "
        f"python -c 'import typer, rich, pydantic': {spread(times['baseline'], ' s', 3)}; "
        f"ratio {spread(ratios('ckplan', 'baseline'), '×', 2)} over {RUNS} alternating rounds; target ≤ 1.60×"
    )
    print(
        f"CLI floor, a typer app with {options} options printing one rich table: {spread(times['floor'], ' s', 3)}; "
        f"floor ÷ baseline {spread(ratios('floor', 'baseline'), '×', 2)}; "
        f"ckplan ÷ floor {spread(ratios('ckplan', 'floor'), '×', 2)}"
    )
    print(
        "model floor, one pydantic model validated and printed as one rich table, no command line: "
        f"{spread(times['model floor'], ' s', 3)}; ÷ baseline {spread(ratios('model floor', 'baseline'), '×', 2)}"
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
