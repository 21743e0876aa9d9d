"""Output: rich tables for people, JSON for tools, Markdown/HTML for reports (the formats live in `formats/`).

`emit(result, as_json)` prints any command's result in the format the command's `--json` flag chose.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ckplan.render.formats import result_format


def emit(result: BaseModel, as_json: bool, **options: Any) -> None:
    """Print a result as JSON (the same model) or through its table renderer; `options` go to the renderer."""
    result_format(as_json).emit(result, **options)
