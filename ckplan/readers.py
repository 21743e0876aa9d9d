"""The one way ckplan reads a file a user names: plans, storage profiles, host lists, logs, tensor samples.

Every refusal is one InputError naming the file and what it was meant to be.
The file's type is checked with os.stat before it is opened: opening a FIFO
blocks until a writer appears, /dev/zero never ends, and opening some devices
has side effects (a tape rewinds). The open itself is non-blocking and checked
again, and what is read is capped. Files in places another user can write (a
scratch directory's marker, the saved profiles) are read with follow=False.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from ckplan.errors import InputError

# Storage profiles, host lists and TOML files are a few MB at most (a profile's raw fio JSON is the bulk).
MAX_DOCUMENT_BYTES = 64 * 2**20
# A plan lists every file of one save, ~180 bytes each: a 65,536-GPU plan is 12-15 MB, and one of the most files
# a plan may list (sizing.plan.MAX_MANIFEST_FILES, 524,288) about 95 MB.
MAX_PLAN_BYTES = 128 * 2**20

Model = TypeVar("Model", bound=BaseModel)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular_file(path: Path, what: str, follow: bool = True) -> os.stat_result:
    """The file's stat, or one line saying why it is not a regular file ckplan can read; with follow=False, a
    symbolic link is refused too (a file in a place another user can write is read only as itself)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{what} {path} is a symbolic link, which ckplan does not follow there")
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise InputError(f"{what} {path} is {kind}, not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path} is not a regular file")
    return st


def open_regular(path: Path, what: str, follow: bool = True) -> tuple[int, os.stat_result]:
    """A read-only descriptor on a regular file, and its stat as opened. The stat before the open refuses a device
    or FIFO before opening it; the open is non-blocking (and, with follow=False, refuses a symbolic link), and the
    opened file is checked again, so a FIFO or link swapped in between the two still cannot block or redirect the
    read."""
    check_regular_file(path, what, follow)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{what} {path} is a symbolic link, which ckplan does not follow there") from None
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{what} {path} is not a regular file")
    return fd, st


def open_stream(path: Path, what: str, buffering: int = -1) -> BinaryIO:
    """A regular file opened as open_regular does, for reading in a stream (a log, a record file: any size)."""
    fd, _ = open_regular(path, what)
    return os.fdopen(fd, "rb", buffering=buffering)


def read_regular(path: Path, what: str, max_bytes: int, follow: bool = True) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most max_bytes (opened by open_regular), and its stat as opened."""
    fd, st = open_regular(path, what, follow)
    try:
        if st.st_size > max_bytes:
            raise InputError(f"{what} {path} is too large: {st.st_size:,} bytes (at most {max_bytes:,})")
        chunks, got, want = [], 0, st.st_size + 1
        while got <= max_bytes:  # the file may have grown since the stat: read one byte past the cap at most
            chunk = os.read(fd, min(want, max_bytes + 1 - got))
            want = 2**16
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if got > max_bytes:
        raise InputError(f"{what} {path} is too large: over {max_bytes:,} bytes")
    return b"".join(chunks), st


def read_text_file(path: Path, what: str, max_bytes: int = MAX_DOCUMENT_BYTES, follow: bool = True) -> str:
    """The whole file as text: a regular file of at most max_bytes, in UTF-8 (a byte-order mark is allowed)."""
    data, _ = read_regular(path, what, max_bytes, follow)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(
            f"{what} {path} is UTF-16 text; ckplan reads UTF-8 (convert it, e.g. iconv -f UTF-16 -t UTF-8)"
        )
    if b"\x00" in data:
        raise InputError(f"{what} {path} is a binary file, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{what} {path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from None


def _no_constant(name: str) -> float:
    # JSON has no NaN or Infinity; Python's json module accepts them, and ckplan never writes them
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: Path, what: str, max_bytes: int = MAX_DOCUMENT_BYTES, follow: bool = True) -> Any:
    """The parsed JSON document in a file, or one line saying what is wrong with it."""
    import json  # here, not at the top: `ckplan size` reads only TOML, and start-up time counts

    text = read_text_file(path, what, max_bytes, follow)
    if not text.strip():
        raise InputError(f"{what} {path} is empty")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{what} {path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise InputError(f"{what} {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"{what} {path} is nested too deeply to be a ckplan file") from None


def validation_message(exc: ValidationError, parameters: bool = False) -> str:
    """The first bad field of a pydantic error, as 'where: what'; with `parameters`, its field as ‹name›, for the
    CLI to name the flag that set it (errors.InputError.render)."""
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    if parameters and loc:
        loc[0] = f"‹{loc[0]}›"
    what = first["msg"].removeprefix("Value error, ")
    return f"{'.'.join(loc)}: {what}" if loc else what


def validate_model(data: Any, model_cls: type[Model], described: str) -> Model:
    """data as model_cls, or an InputError naming `described` and the first bad field; with `described` empty, the
    data are a library call's parameters, and the field is named as ‹field› (validation_message).

    The cyclic garbage collector is paused meanwhile: a plan of a million files makes millions of objects at
    once, none of them in a cycle, and its passes over them doubled the load time (4.9 against 2.3 s)."""
    import gc

    paused = gc.isenabled()
    gc.disable()
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        if not described:
            raise InputError(validation_message(exc, parameters=True)) from None
        raise InputError(f"{described}: {validation_message(exc)}") from None
    except RecursionError:  # deeply nested values inside a free-form field
        raise InputError(f"{described}: nested too deeply") from None
    finally:
        if paused:
            gc.enable()


def read_json_model(
    path: Path, model_cls: type[Model], what: str, max_bytes: int = MAX_DOCUMENT_BYTES, expected: str = ""
) -> Model:
    """A JSON file validated as model_cls. `expected` says where a valid file comes from, for the error."""
    data = read_json(path, what, max_bytes)
    return validate_model(data, model_cls, f"{path} is not a valid {what}{expected}")
