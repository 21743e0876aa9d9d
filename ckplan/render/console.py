"""One rich Console for stdout; rich itself honours NO_COLOR and non-TTY output.

Every string a renderer takes from a result (a name, a path, a note: anything a file may have set) goes into the
output through `shown`, which makes its control characters visible and keeps rich from reading it as markup
(`[bold red]`, `[link=…]`). A terminal whose encoding lacks ckplan's non-ASCII characters (`PYTHONIOENCODING=ascii`,
a C locale without UTF-8) gets them in ASCII before rich lays a table out, so its columns stay aligned; rich draws
its boxes in ASCII there by itself.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ckplan.terminal import for_encoding, visible


def shown(text: object) -> str:
    """Text from a result, for a rich markup string or a table cell: shown as it is, never acted on."""
    return escape(visible(str(text)))


class _Console(Console):
    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(for_encoding(text, self.encoding), **kwargs)


@lru_cache(maxsize=1)
def console() -> Console:
    # emoji codes off: a name such as ":warning:" is printed as written
    return _Console(highlight=False, emoji=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


@lru_cache(maxsize=1)
def err_console() -> Console:
    return _Console(stderr=True, highlight=False, emoji=False)
