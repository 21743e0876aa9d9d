"""Lightning: a CheckpointIO that times the real write of every checkpoint file, and Lightning's AsyncCheckpointIO
with the blocking part and the background persist apart.

Trainer.save_checkpoint dumps the state (trainer/connectors/checkpoint_connector.py dump_checkpoint) and calls
strategy.save_checkpoint, which calls `checkpoint_io.save_checkpoint(checkpoint, filepath)` on global rank 0
only; that call is the write, timed here around the inner CheckpointIO (TorchCheckpointIO by default).
AsyncCheckpointIO's save_checkpoint clones the tensors and submits the inner write to its one worker thread: the
call is the blocking part, and the inner write's end in that thread is the persist's end.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from ckplan.record import Timing, quietly, write


class RecordingCheckpointIO(CheckpointIO):
    """`L.Trainer(..., plugins=[RecordingCheckpointIO("saves.jsonl")])`: one line per checkpoint file written;
    `asynchronous=True` saves through Lightning's AsyncCheckpointIO around `inner` and records both parts."""

    def __init__(
        self, path: str | os.PathLike[str], inner: CheckpointIO | None = None, *, asynchronous: bool = False
    ) -> None:
        self.path = path
        base = inner if inner is not None else TorchCheckpointIO()
        # saves submitted and not yet written, in submission order (AsyncCheckpointIO's executor has one worker)
        self.pending: queue.SimpleQueue[tuple[Timing, threading.Event, int]] = queue.SimpleQueue()
        self.asynchronous = asynchronous
        self.inner: CheckpointIO = AsyncCheckpointIO(_Persist(self, base)) if asynchronous else base

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        step = 0
        with quietly():
            step = int(checkpoint.get("global_step", 0))
        timing = Timing()
        if self.asynchronous:
            returned = threading.Event()
            self.pending.put((timing, returned, step))
            try:
                self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
            finally:  # the worker waits on it: set even when the submit raises, so that nothing hangs
                timing.done()
                returned.set()
            return
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        timing.done()
        write(self.path, timing, framework="lightning", step=step, paths=[os.fspath(path)], counted="own files")

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> Any:  # the inner one's defaults stand
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:  # AsyncCheckpointIO's waits for the writes in flight, and so for their lines
        self.inner.teardown()


class _Persist(CheckpointIO):
    """The write AsyncCheckpointIO runs in its worker thread: the base write, then the save's line."""

    def __init__(self, recorder: RecordingCheckpointIO, base: CheckpointIO) -> None:
        self.recorder = recorder
        self.base = base

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        timing, returned, step = self.recorder.pending.get()
        self.base.save_checkpoint(checkpoint, path, storage_options=storage_options)
        end = timing.now()
        returned.wait()  # the call's return is stamped just after the submit; a write can beat it
        write(
            self.recorder.path,
            timing,
            framework="lightning",
            step=step,
            paths=[os.fspath(path)],
            counted="own files",
            persisted=max(end, timing.returned or end),
        )

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        return self.base.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.base.remove_checkpoint(path)

    def teardown(self) -> None:
        self.base.teardown()
