"""HF Trainer: a TrainerCallback that records each checkpoint save.

Trainer._maybe_log_save_evaluate calls `self._save_checkpoint(model, trial)` and then the callbacks' on_save; the
save is exactly that call (model, optimizer, scheduler, RNG and trainer state, and the rotation of old checkpoints),
so the recorder times the call itself, through an instance attribute that stands in for the method, and writes
the line in on_save, which fires next on every process.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ckplan.record import Timing, quietly, write


class TrainerRecorder(TrainerCallback):
    """`trainer.add_callback(TrainerRecorder(trainer, "saves.jsonl"))`: one line per save per process."""

    def __init__(self, trainer: Trainer, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.timing: Timing | None = None
        self.directory = ""
        save_checkpoint = trainer._save_checkpoint

        def timed(model: Any, trial: Any) -> None:
            timing = Timing()
            save_checkpoint(model, trial)
            timing.done()
            with quietly():
                self.directory = os.path.join(
                    trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"
                )
                self.timing = timing

        trainer._save_checkpoint = timed  # type: ignore[method-assign]

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.timing is None:  # a save that did not go through _save_checkpoint (none in this release)
            return
        write(
            self.path,
            self.timing,
            framework="hf",
            step=state.global_step,
            paths=[self.directory],
            counted="directory",
            rank=args.process_index,
            world_size=args.world_size,
        )
        self.timing = None
