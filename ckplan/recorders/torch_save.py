"""Plain torch.save of one rank's file, recorded: the call's return is the end (torch.save writes and closes the
file before it returns; it does not fsync)."""

from __future__ import annotations

import os
from typing import Any

import torch

from ckplan.record import Framework, record_save


def save(to: str | os.PathLike[str], obj: Any, f: str | os.PathLike[str], *, step: int, **kwargs: Any) -> None:
    """torch.save(obj, f, **kwargs), recorded to `to` as step `step`, counting the file `f`."""
    framework: Framework = "torch.save"
    with record_save(to, f, framework=framework, step=step, counted="own files"):
        torch.save(obj, f, **kwargs)
