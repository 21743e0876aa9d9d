"""Output formats behind two small interfaces, each chosen in one place.

A command's result is printed in one `ResultFormat` (a rich table for people, JSON for tools), picked by
`result_format`. A report's `Document` is written in every `DocumentFormat` (Markdown, HTML), each named by the
suffix of the file it fills. A document format is one module here and its name in DOCUMENT_FORMATS;
a result format is one module and its name in RESULT_FORMATS, which `--json` indexes (table, then json).

Each format's module is imported only when it is used: `ckplan size` must start fast, and the table format pulls
in rich and every renderer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ckplan.render.document import Document


class ResultFormat(Protocol):
    def emit(self, result: BaseModel, **options: Any) -> None:
        """Print one command's result to stdout; `options` are the renderer's (a table's), others ignore them."""


class DocumentFormat(Protocol):
    suffix: str

    def render(self, doc: Document) -> str:
        """The whole document as the text of one file."""


# each a module under ckplan.render.formats whose module-level `emit` / `suffix` and `render` are the interface
RESULT_FORMATS = ("table", "json")
DOCUMENT_FORMATS = ("markdown", "html")


def result_format(as_json: bool) -> ResultFormat:
    """The format a command's `--json` flag chose."""
    module: Any = importlib.import_module(f"ckplan.render.formats.{RESULT_FORMATS[as_json]}")
    return module


def document_formats() -> dict[str, DocumentFormat]:
    """Every document format by name (the name is also the field of `ReportFiles` that holds its file's path)."""
    return {name: importlib.import_module(f"ckplan.render.formats.{name}") for name in DOCUMENT_FORMATS}  # type: ignore[misc]
