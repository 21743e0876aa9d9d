"""A small document model, so a report is assembled once and written in every document format
(`ckplan.render.formats`: Markdown, HTML)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str
    quiet: bool = False  # small print (when and by what a report was made)


@dataclass
class Bullets:
    items: list[str]


@dataclass
class TableBlock:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Decision:
    """The one line a reader needs: a verdict (ok, tight, infeasible), what to do, and why."""

    verdict: str
    summary: str
    reason: str


@dataclass
class Image:
    """A PNG: linked by `path` from the Markdown (the file is written beside it), embedded from `data` in the HTML."""

    path: str
    alt: str
    data: bytes = b""


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> Document:
        self.blocks.extend(blocks)
        return self
