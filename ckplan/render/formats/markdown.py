"""The Markdown document format: a report as GitHub-flavoured Markdown, its charts linked as files beside it."""

from __future__ import annotations

from ckplan.render.document import Bullets, Decision, Document, Heading, Image, Para, TableBlock

suffix = ".md"


def render(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Decision):
            out += ["## Decision", "", f"**{b.verdict.upper()}** — {b.summary}.", "", b.reason + ".", ""]
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
