"""The JSON format: the command's pydantic model, exactly the one its table renders.

Where stdout's encoding cannot hold a character, it is written as JSON's \\u escape: the same document in ASCII.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from pydantic import BaseModel

from ckplan.terminal import encodable


def emit(result: BaseModel, **options: Any) -> None:
    text = result.model_dump_json(indent=2)
    if not encodable(text, getattr(sys.stdout, "encoding", None) or "utf-8"):
        text = _ascii_json(text)
    sys.stdout.write(text + "\n")


def _ascii_json(text: str) -> str:
    # outside its strings a JSON document is ASCII, so every other character is inside one, where \uXXXX (a
    # surrogate pair past the BMP) stands for it exactly
    def escaped(match: re.Match[str]) -> str:
        code = ord(match[0])
        if code < 0x10000:
            return f"\\u{code:04x}"
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"

    return re.sub(r"[^\x00-\x7f]", escaped, text)
