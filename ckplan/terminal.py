"""Text on its way to a terminal: what came from a file shown with its control characters visible, and what the
terminal's encoding cannot hold spelt in ASCII.

A profile's name, a plan's paths, a log's lines, a host list's entries and a file's own name are whatever their
author wrote: an escape sequence among them would clear the screen, retitle the window or recolour what follows,
a carriage return would overwrite the line, and a bidi override would show the rest of it reversed. `visible` is
the one place such characters are made visible; the renderers (ckplan.render.console.shown, which also keeps rich
from reading the text as markup) and the CLI's error lines call it. JSON output is left exact: its own escaping
covers every control character.

Standard library only: imported by the CLI before anything else, and by the renderers.
"""

from __future__ import annotations

import codecs
import unicodedata

# the categories whose characters act on a terminal or hide among the text instead of showing as themselves:
# controls (C0, DEL, C1: ESC, CR, BEL, backspace, CSI), format characters (bidi overrides and isolates, zero-width
# characters, the byte-order mark), lone surrogates (a file name's undecodable bytes), unassigned code points
# (a terminal newer than Python's Unicode tables may give them a meaning) and the line and paragraph separators
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    """One character as Python writes it in a string literal: \\x1b, \\u202e, \\U000e0001."""
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with every control, format, surrogate, unassigned and separator character written as its escape.

    A backslash stays as it is: paths and --pattern regexes are full of them, and text from a file that spells
    `\\x1b` itself shows just what it holds."""
    if text.isprintable():  # every printable character, space included: nothing to do (the common case)
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


# ckplan's own non-ASCII characters (units, arrows, the model's symbols, rich's boxes and marks) in ASCII; the
# rest go through their compatibility decomposition (é → e) or, failing that, their escape
_ASCII = {
    "‹": "<",
    "›": ">",
    "«": "<<",
    "»": ">>",
    "×": "x",
    "…": "...",
    "÷": "/",
    "−": "-",
    "–": "-",
    "—": "--",
    "·": "-",
    "•": "*",
    "→": "->",
    "←": "<-",
    "◀": "<",
    "▶": ">",
    "≥": ">=",
    "≤": "<=",
    "≈": "~",
    "±": "+/-",
    "√": "sqrt",
    "∞": "inf",
    "′": "'",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "µ": "u",  # micro sign: "1 µs" reads "1 us", the unit ckplan parses
    "μ": "u",
    "τ": "tau",
    "δ": "delta",
    "Δ": "Delta",
    "σ": "sigma",
    "κ": "kappa",
    "λ": "lambda",
    "Σ": "Sum",
    "²": "^2",
    "⅓": "1/3",
    "§": "S",
    "█": "#",
    "\u00a0": " ",
}


def ascii_char(ch: str) -> str:
    """One character in ASCII: ckplan's own by its table, box drawing by its shape, a letter with accents without
    them, anything else by its escape."""
    if ch in _ASCII:
        return _ASCII[ch]
    if "\u2500" <= ch <= "\u257f":  # box drawing: rich's tables and rules
        name = unicodedata.name(ch, "")
        return "-" if "HORIZONTAL" in name else "|" if "VERTICAL" in name else "+"
    base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
    return base if base and base.isascii() and base.isprintable() else _escape(ch)


def encodable(text: str, encoding: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def for_encoding(text: str, encoding: str) -> str:
    """`text` with each character `encoding` cannot hold in ASCII (ascii_char); `text` itself where it can."""
    if encodable(text, encoding):
        return text
    return "".join(ch if encodable(ch, encoding) else ascii_char(ch) for ch in text)


def _fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(ascii_char(ch) for ch in exc.object[exc.start : exc.end]), exc.end


FALLBACK = "ckplan.ascii"  # the codec error handler that writes what an encoding cannot hold in ASCII
codecs.register_error(FALLBACK, _fallback)
