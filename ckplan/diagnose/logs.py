"""Extract checkpoint save durations from training logs, streaming, in bounded memory.

The extractors: what each framework prints is read by its module in ckplan/frameworks/, a user's --pattern by
diagnose/extractors.py; this module reads a log and feeds them its lines.

How a log is read: in binary blocks of BLOCK bytes, never line by
line in Python. Each extractor names byte strings (`needles`) of which every
line it acts on contains one; bytes.find locates them in the block, and only
the lines around them are decoded (UTF-8, undecodable bytes replaced) and fed
to the extractors, in file order, exactly as the whole log once was, line by
line: a line no extractor acts on changes nothing. Lines end at \n, \r\n or
\r, as in Python's text mode, and a line cut by a block boundary is carried
into the next block. Two extractors also want lines that depend on their state:
the Hugging Face one, every line naming the open checkpoint directory, and the
Lightning one, the next timestamped line. A user pattern's needle is a literal
its every match contains, read from the parsed regex; a pattern with none is
tried on every line (correct, and as slow as before). A line longer than MAX_LINE is
no log line (a binary blob, a dump): it is read past, never held, and counted.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import BinaryIO

from ckplan.diagnose.extractors import Custom
from ckplan.errors import InputError
from ckplan.frameworks import LOG_EXTRACTORS
from ckplan.frameworks.logs import Extractor, Save
from ckplan.readers import open_stream

BLOCK = 4 * 2**20  # bytes read at a time: as fast as 8 or 16 MiB here, and the old reader's buffer size
MAX_LINE = BLOCK  # a longer line is no log line: it is skipped, never held whole


def _line_end(buf, p: int, hi: int) -> tuple[int, int]:
    """(end, end of text) of the line around p in buf[:hi]: after its \\n, \\r\\n or \\r, and before it.

    (hi, hi) if no line end comes before hi. Searches in growing windows, so that finding the
    end costs the line's length, not the block's, whichever of \\n and \\r the log does not use.
    """
    width = 512
    while True:
        top = min(hi, p + width)
        nl = buf.find(b"\n", p, top)
        cr = buf.find(b"\r", p, top if nl < 0 else nl)
        if cr >= 0:
            return (cr + 2 if cr + 1 < hi and buf[cr + 1] == 10 else cr + 1), cr
        if nl >= 0:
            return nl + 1, nl
        if top == hi:
            return hi, hi
        p, width = top, width * 8


class _Reader:
    """Feeds the extractors the lines of blocks of a log that any of them may act on, in order."""

    def __init__(self, extractors: list[Extractor], max_line: int = MAX_LINE):
        self.extractors = extractors
        self.max_line = max_line
        self.long_lines = 0
        self.needles = tuple(dict.fromkeys(n for ex in extractors for n in ex.needles))
        self.stateful = [ex for ex in extractors if type(ex).wanted is not Extractor.wanted]
        self.saves: list[Save] = []

    def feed_lines(self, buf, lo: int, hi: int) -> None:
        """Every line in buf[lo:hi] (whole lines; the last may lack its end only at the end of the log)."""
        if b"" in self.needles:  # a pattern with no literal: every line, decoded in one go
            text = buf[lo:hi].decode("utf-8", "replace")  # as line by line: no UTF-8 sequence spans a \n or \r
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            lines = text.split("\n")
            last = lines.pop()  # "" after a final line end, else a last line without one
            for line in lines:
                line += "\n"
                for ex in self.extractors:
                    self.saves.extend(ex.feed(line))
            if last:
                for ex in self.extractors:
                    self.saves.extend(ex.feed(last))
            return
        found: dict = {}  # needle or regex -> where it next occurs from the last place searched (hi: nowhere)
        pos = lo
        while pos < hi:
            at = hi
            for needle in self.needles:
                at = min(at, self._next(found, needle, buf, pos, hi))
            for ex in self.stateful:
                if (want := ex.wanted()) is not None:
                    at = min(at, self._next(found, want, buf, pos, hi))
            if at >= hi:
                return
            start = max(pos - 1, buf.rfind(b"\n", pos, at), buf.rfind(b"\r", pos, at)) + 1
            end, text_end = _line_end(buf, at, hi)
            line = buf[start:text_end].decode("utf-8", "replace")
            if end > text_end:
                line += "\n"  # as text mode gives it, whichever line end the log uses
            for ex in self.extractors:
                self.saves.extend(ex.feed(line))
            pos = end

    @staticmethod
    def _next(found: dict, what, buf, pos: int, hi: int) -> int:
        at = found.get(what, -1)
        if at < pos:
            if isinstance(what, bytes):
                at = buf.find(what, pos, hi)
            else:
                at = m.start() if (m := what.search(buf, pos, hi)) else -1
            found[what] = at = hi if at < 0 else at
        return at

    def read(self, f: BinaryIO, block: int) -> int:
        """Every line of the file, in blocks, but those longer than max_line or the block if it is larger (counted
        in long_lines, read past unheld: such a line spans blocks); the bytes read."""
        cap = max(self.max_line, block)
        buf = bytearray(block)
        view = memoryview(buf)  # a slice of it is copied once, into the bytes carried, not twice
        carry: list[bytes] = []  # the start of a line that the last block cut
        carried = 0  # its bytes
        skipping = False  # inside a line longer than max_line: read on to its end
        after_cr = False  # the line skipped ended at a \r in the last block's last byte: a \n here is its \r\n
        read = 0
        while n := f.readinto(buf):  # type: ignore[attr-defined]  # opened unbuffered: a FileIO
            read += n
            lo = 1 if after_cr and buf[0] == 10 else 0
            after_cr = False
            if skipping:
                end, text_end = _line_end(buf, lo, n)
                if text_end == n:
                    continue
                skipping, lo, after_cr = False, end, end == n and buf[n - 1] == 13
            elif carry:  # finish the cut line first
                if carry[-1].endswith(b"\r"):  # it ended there; a \n here is part of its \r\n
                    lo = 1 if buf[0] == 10 else 0
                else:
                    end, text_end = _line_end(buf, 0, n)
                    if text_end == n or text_end == n - 1 and buf[text_end] == 13:  # not ended, or maybe by a \r\n
                        carried += n
                        if carried > cap:
                            carry, carried, skipping = [], 0, text_end == n
                            after_cr = not skipping
                            self.long_lines += 1
                        else:
                            carry.append(bytes(view[:n]))
                        continue
                    lo = end
                carry.append(bytes(view[:lo]))
                line = b"".join(carry)
                carry, carried = [], 0
                if len(line) > cap:
                    self.long_lines += 1
                else:
                    self.feed_lines(line, 0, len(line))
            # whole lines up to the last line end; a \r in the last byte may be the start of a \r\n
            cut = max(buf.rfind(b"\n", lo, n), buf.rfind(b"\r", lo, n - 1)) + 1
            if cut > lo:
                self.feed_lines(buf, lo, cut)
            lo = max(lo, cut)
            if lo < n:
                carry.append(bytes(view[lo:n]))
                carried = n - lo
        if carry:  # a last line without a line end
            line = b"".join(carry)
            self.feed_lines(line, 0, len(line))
        return read


def extract(
    paths: list[Path], pattern: str | None = None, block: int = BLOCK, max_line: int = MAX_LINE
) -> tuple[list[Save], int, int]:
    """Every save in the logs, in order, the bytes read, and the lines skipped as longer than MAX_LINE. Memory
    stays bounded by the number of saves (and one block, and MAX_LINE of a line that blocks cut)."""
    custom = Custom(pattern) if pattern else None
    extractors: list[Extractor] = [custom] if custom else [cls() for cls in LOG_EXTRACTORS]
    reader = _Reader(extractors, max_line)
    read = 0
    for path in paths:
        try:  # logs are streamed, so any size goes, but a FIFO or device must not
            with open_stream(path, "log", buffering=0) as f, custom.watchdog() if custom else contextlib.nullcontext():
                read += reader.read(f, block)
        except OSError as exc:
            raise InputError(f"cannot read log {path}: {exc.strerror}") from None
        for ex in extractors:
            reader.saves.extend(ex.finish())
    return reader.saves, read, reader.long_lines
