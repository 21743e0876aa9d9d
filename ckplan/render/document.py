"""A small document model with two renderers (Markdown and HTML), so a report is assembled once."""

from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class TableBlock:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    path: str
    alt: str


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> "Document":
        self.blocks.extend(blocks)
        return self


def to_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {item}" for item in b.items] + [""]
        elif isinstance(b, TableBlock):
            cell = lambda s: str(s).replace("|", "\\|")
            out.append("| " + " | ".join(cell(h) for h in b.header) + " |")
            out.append("|" + "|".join("---" for _ in b.header) + "|")
            out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Image):
            out += [f"![{b.alt}]({b.path})", ""]
    return "\n".join(out)


def to_html(doc: Document) -> str:
    e = html.escape
    out = ["<!doctype html>", "<html><head><meta charset='utf-8'>", f"<title>{e(doc.title)}</title>",
           "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
           "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
           "td:first-child,th:first-child{text-align:left}img{max-width:100%}</style></head><body>",
           f"<h1>{e(doc.title)}</h1>"]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, TableBlock):
            out.append("<table><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in b.header) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in b.rows]
            out.append("</table>")
        elif isinstance(b, Image):
            out.append(f"<p><img src='{e(b.path)}' alt='{e(b.alt)}'></p>")
    out.append("</body></html>")
    return "\n".join(out)
