"""One rich Console for stdout; rich itself honours NO_COLOR and non-TTY output."""

from __future__ import annotations

import sys
from functools import lru_cache

from rich.console import Console


@lru_cache(maxsize=1)
def console() -> Console:
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


@lru_cache(maxsize=1)
def err_console() -> Console:
    return Console(stderr=True, highlight=False)


def print_json(model) -> None:
    """The command's pydantic model, exactly as the table renders it."""
    sys.stdout.write(model.model_dump_json(indent=2) + "\n")
