"""Accelerate: Accelerator.save_state, recorded.

Accelerator.save_state (accelerator.py) makes its output directory (with ProjectConfiguration's automatic naming,
project_dir/checkpoints/checkpoint_N), writes the model weights, optimizers and schedulers from the main process and
random_states_{process_index}.pkl from every process, and returns the directory. It ends in no barrier: each
process's return ends its own part, and the process that returns last sees every part complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ckplan.record import Timing, quietly, write


def record_accelerate(accelerator: Any, to: str | os.PathLike[str], step: Callable[[], int] | None = None) -> Any:
    """`record_accelerate(accelerator, "saves.jsonl", step=lambda: global_step)`: the accelerator's save_state now
    records each save. Accelerate keeps no training step of its own: without `step`, a line's step is the save's
    number among this accelerator's saves (ProjectConfiguration.iteration, 0 first)."""
    save_state = accelerator.save_state

    def recorded(*args: Any, **kwargs: Any) -> Any:
        # save_state counts it up; read without raising, as everything the recorder does beside the save
        iteration = getattr(getattr(accelerator, "project_configuration", None), "iteration", 0)
        timing = Timing()
        location = save_state(*args, **kwargs)
        timing.done()
        with quietly():
            write(
                to,
                timing,
                framework="accelerate",
                step=step() if step is not None else iteration,
                paths=[os.fspath(location)],
                counted="directory",
                rank=accelerator.process_index,
                world_size=accelerator.num_processes,
            )
        return location

    accelerator.save_state = recorded
    return accelerator
