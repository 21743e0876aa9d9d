"""Lightning: a CheckpointIO that times the real write of every checkpoint file.

Trainer.save_checkpoint dumps the state (trainer/connectors/checkpoint_connector.py dump_checkpoint) and calls
strategy.save_checkpoint, which calls `checkpoint_io.save_checkpoint(checkpoint, filepath)` on global rank 0
only; that call is the write, timed here around the inner CheckpointIO (TorchCheckpointIO by default).
"""

from __future__ import annotations

import os
from typing import Any

from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO

from ckplan.record import Timing, write


class RecordingCheckpointIO(CheckpointIO):
    """`L.Trainer(..., plugins=[RecordingCheckpointIO("saves.jsonl")])`: one line per checkpoint file written."""

    def __init__(self, path: str | os.PathLike[str], inner: CheckpointIO | None = None) -> None:
        self.path = path
        self.inner = inner if inner is not None else TorchCheckpointIO()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        timing = Timing()
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        timing.done()
        write(
            self.path,
            timing,
            framework="lightning",
            step=int(checkpoint.get("global_step", 0)),
            paths=[os.fspath(path)],
            counted="own files",
        )

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> Any:  # the inner one's defaults stand
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()
