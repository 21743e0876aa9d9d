"""DeepSpeed: engine.save_checkpoint, recorded.

DeepSpeedEngine.save_checkpoint (runtime/engine.py) makes save_dir, writes save_dir/TAG/ (model and ZeRO states),
copies zero_to_fp32.py and zero_to_torch.py into save_dir (rank 0, with ZeRO), writes save_dir/latest (rank 0)
and ends in dist.barrier(): its return is the save's end on every rank, each having seen every rank's files.
"""

from __future__ import annotations

import os
from typing import Any

from ckplan.record import Timing, quietly, write


def record_deepspeed(engine: Any, to: str | os.PathLike[str]) -> Any:
    """`engine = record_deepspeed(engine, "saves.jsonl")`: the engine's save_checkpoint now records each save
    (the TAG directory and the files directly in save_dir: latest and the recovery scripts)."""
    save_checkpoint = engine.save_checkpoint

    def recorded(save_dir: str, tag: Any = None, *args: Any, **kwargs: Any) -> Any:
        timing = Timing()
        result = save_checkpoint(save_dir, tag, *args, **kwargs)
        timing.done()
        with quietly():
            step = engine.global_steps  # the save does not advance it
            directory = os.path.join(save_dir, str(tag) if tag is not None else f"global_step{step}")
            beside = [e.path for e in os.scandir(save_dir) if e.is_file(follow_symlinks=False)]
            paths = [directory, *sorted(beside)]
            write(to, timing, framework="deepspeed", step=step, paths=paths, counted="directory")
        return result

    engine.save_checkpoint = recorded
    return engine
