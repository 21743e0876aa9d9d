"""The HTML document format: one self-contained file.

Its images are embedded as data: URIs, its style is inline, and it links no script, style sheet or font, so it
can be mailed or attached to a ticket and still read on a phone."""

from __future__ import annotations

import base64
import html
import struct

from ckplan.render.document import Bullets, Decision, Document, Heading, Image, Para, TableBlock

suffix = ".html"

# The decision box's colours by verdict: (background, border). The browser test finds the box by its background.
VERDICT_COLOURS = {"ok": ("#e7f5ea", "#2e7d32"), "tight": ("#fff4de", "#c77700"), "infeasible": ("#fdeaea", "#c62828")}

_CSS = (
    "*{box-sizing:border-box}"
    "html{-webkit-text-size-adjust:100%;text-size-adjust:100%}"
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif;color:#1a1a1a;"
    "background:#fff;max-width:1100px;margin:0 auto;padding:1.5em 2em 3em;line-height:1.45;overflow-wrap:break-word}"
    "h1{font-size:1.45em;line-height:1.25;margin:0 0 .6em}"
    "h2{font-size:1.2em;margin:1.6em 0 .5em;padding-bottom:.2em;border-bottom:1px solid #e3e3e3}"
    ".decision{margin:0 0 1.2em;padding:.8em 1.1em;border-left:6px solid;border-radius:4px}"
    ".decision h2{margin:0 0 .3em;border:0;padding:0;font-size:.85em;text-transform:uppercase;letter-spacing:.06em;"
    "color:#444}"
    ".decision .verdict{font-size:1.25em;line-height:1.35;margin:0 0 .35em}"
    ".decision .reason{margin:0;color:#333}"
    + "".join(
        f".decision-{v}{{background:{bg};border-color:{bd}}}.decision-{v} strong{{color:{bd}}}"
        for v, (bg, bd) in VERDICT_COLOURS.items()
    )
    + ".meta{color:#666;font-size:.85em}"
    ".table-wrap{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:1em 0;max-width:100%}"
    "table{border-collapse:collapse;font-variant-numeric:tabular-nums}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;vertical-align:top;white-space:nowrap}"
    "th{background:#f4f4f4}"
    "td:first-child,th:first-child{text-align:left;white-space:normal;min-width:7em}"
    "td.long{white-space:normal;min-width:12em}"
    "figure{margin:1em 0}"
    "img{display:block;max-width:100%;height:auto}"
    "@media (max-width:600px){body{padding:1em .9em 2em;font-size:15px}h1{font-size:1.2em}"
    ".decision{padding:.7em .8em}.decision .verdict{font-size:1.1em}td,th{padding:3px 6px}}"
)


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its IHDR chunk; ValueError if `data` is not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">II", data[16:24])


def _img(b: Image) -> str:
    e = html.escape
    if not b.data:
        raise ValueError(f"image {b.path} has no data to embed: the HTML report links no file")
    w, h = png_size(b.data)
    uri = "data:image/png;base64," + base64.b64encode(b.data).decode("ascii")
    return f'<figure><img src="{uri}" width="{w}" height="{h}" alt="{e(b.alt)}"></figure>'


def _td(text: str) -> str:
    # A figure stays on one line (the table scrolls sideways on a phone); a sentence may wrap.
    return f'<td class="long">{html.escape(text)}</td>' if len(text) > 24 else f"<td>{html.escape(text)}</td>"


def render(doc: Document) -> str:
    e = html.escape
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(doc.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Decision):
            out.append(
                f'<section class="decision decision-{e(b.verdict)}" id="decision"><h2>Decision</h2>'
                f'<p class="verdict"><strong>{e(b.verdict.upper())}</strong> — {e(b.summary)}.</p>'
                f'<p class="reason">{e(b.reason)}.</p></section>'
            )
        elif isinstance(b, Para):
            out.append(f'<p class="meta">{e(b.text)}</p>' if b.quiet else f"<p>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, TableBlock):
            out.append(
                '<div class="table-wrap"><table><thead><tr>'
                + "".join(f"<th>{e(str(h))}</th>" for h in b.header)
                + "</tr></thead><tbody>"
            )
            out += ["<tr>" + "".join(_td(str(c)) for c in row) + "</tr>" for row in b.rows]
            out.append("</tbody></table></div>")
        elif isinstance(b, Image):
            out.append(_img(b))
    out.append("</body></html>")
    return "\n".join(out)
