"""The `ckplan` command: global options, the command table, and `main`, which turns every error into one line.

Each command lives in a module under `ckplan.cli.commands`, parses its flags, calls one library function and
renders. A command's module is imported, and its click command built, only when that command runs, is completed
or is listed by `--help`: building all fifteen, with their option groups, cost a third of `ckplan size`'s
start-up (scripts/bench_size.py). Library imports happen inside the commands for the same reason.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import os
import sys
from collections.abc import Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_command_name

from ckplan.errors import EnvironmentProblem, InputError, MeasurementFailed, OutputLost
from ckplan.terminal import FALLBACK, visible

if TYPE_CHECKING:
    from typer import _click  # the click that typer vendors: the types of a group's methods

# command → its module under ckplan.cli.commands, in the order `ckplan --help` lists them
COMMANDS: dict[str, str] = {
    "size": "size",
    "models": "size",
    "probe": "probe",
    "calibrate": "probe",
    "clean": "probe",
    "profiles": "probe",
    "recommend": "plan",
    "report": "plan",
    "validate": "validate",
    "provision": "plan",
    "diagnose": "diagnose",
    "watch": "diagnose",
    "agent": "probe",
    "k8s": "k8s",
    "compress-test": "compress",
}


class _CommandTable(MutableMapping[str, "_click.Command"]):
    """Every command's name, in COMMANDS' order; a command's module is imported and its click command built on
    first access. A group's `commands` mapping: typer lists, resolves and suggests ("did you mean") through it."""

    def __init__(self) -> None:
        self._built: dict[str, _click.Command] = {}

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built:
            module = importlib.import_module(f"ckplan.cli.commands.{COMMANDS[name]}")  # KeyError: no such command
            (info,) = [
                c
                for c in module.commands.registered_commands
                if (c.name or get_command_name(c.callback.__name__)) == name
            ]
            self._built[name] = get_command_from_info(
                info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
            )
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class LazyCommands(TyperGroup):
    """A group that builds a command when it runs, completes or is listed, instead of every command up front."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _CommandTable()


app = typer.Typer(
    cls=LazyCommands,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Plan checkpoint intervals and the storage they need.",
)


def flag_names(commands: Iterable[_click.Command] | None = None) -> dict[str, str]:
    """Parameter → its long flag, over the options of `commands` (default: every command's, built for a failure's
    message only): the ‹name›s in an InputError's message (errors.InputError.render). An option's parameter is
    named as the library's parameter or the request model's field, so one map serves both doors' messages."""
    names: dict[str, str] = {}
    for command in _CommandTable().values() if commands is None else commands:
        for param in command.params:
            flag = next((o for o in param.opts if o.startswith("--")), None)
            if flag is not None and param.name is not None:
                names.setdefault(param.name, flag)
    return names


_debug = False  # set by --debug or CKPLAN_DEBUG=1: an internal error re-raises with its traceback


def _print_version(value: bool) -> None:
    if value:
        from ckplan.version import __version__

        print(f"ckplan {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error, show the traceback (also CKPLAN_DEBUG=1).")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print ckplan's version and exit.")
    ] = False,
) -> None:
    global _debug
    _debug = _debug or debug


class _Stdout:
    """sys.stdout, whose write and flush failures become OutputLost: every writer of the output (print, rich, click's
    help) goes through it, and rich would otherwise turn a closed pipe into exit code 1 of its own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputLost(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputLost(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _ClosedStdout:
    """sys.stdout when descriptor 1 was not open at start (`ckplan size >&-`; Python leaves sys.stdout None): the
    first write fails as one to a full disk does, so the command ends in one line and exit code 3, as it would
    there. A command that writes nothing (`ckplan agent`) runs as usual."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        if not text:
            return 0
        raise OSError(errno.EBADF, f"it is not open ({os.strerror(errno.EBADF)})")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("stdout is not open")


def _open_standard_descriptors() -> None:
    """A standard descriptor closed at start is opened on /dev/null, so that no file ckplan opens takes its number:
    what a child such as fio writes to its stdout, or ckplan's own error line, would land in that file. Python has
    already set sys.stdout (or sys.stderr) to None for it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stderr is None:  # print(file=None) would write the error line on stdout; kept open for the process
        sys.stderr = open(2, "w", encoding="utf-8", errors=FALLBACK, closefd=False)  # noqa: SIM115


def _spell_unencodable(stream: Any) -> None:
    """A character the stream's encoding lacks (PYTHONIOENCODING=ascii, a C locale without UTF-8 mode) is written
    in ASCII, or as its escape, instead of failing the write: rich's tables, click's help and the error lines
    hold ×, µ, ‹›, ≥ and box drawing. On UTF-8 only a lone surrogate (a file name's undecodable byte) needs it."""
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
        stream.reconfigure(errors=FALLBACK)


def main() -> None:
    """Entry point: every error becomes one line on stderr and an exit code.

    2 bad input, 3 a missing or broken environment (stdout that cannot be written included), 4 a measurement
    that failed, 130 interrupted, 141 stdout's reader gone (nothing said, as a command killed by SIGPIPE),
    1 anything else (a bug; --debug shows its traceback).
    The parser's errors are typer's public exception classes (typer.Exit, typer.Abort and
    typer.TyperException, the base of the click exceptions typer vendors).
    """
    _open_standard_descriptors()
    stdout = sys.stdout
    _spell_unencodable(stdout)
    _spell_unencodable(sys.stderr)
    sys.stdout = _Stdout(_ClosedStdout() if stdout is None else stdout)  # type: ignore[assignment]
    try:
        _main()
    finally:
        sys.stdout = stdout


def _main() -> None:
    global _debug
    _debug = os.environ.get("CKPLAN_DEBUG", "") not in ("", "0")
    # ckplan's models are its own; a pydantic plugin has nothing to observe in them, and looking for plugins
    # reads every installed package's entry points on the first validation (~15 ms of `ckplan size`, more in a
    # large environment). A user's own setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    try:
        result = app(standalone_mode=False)
    except OutputLost as exc:
        _output_lost(exc)
    except InputError as exc:
        _fail(exc.render(flag_names()) or type(exc).__name__, exc.exit_code)
    except (EnvironmentProblem, MeasurementFailed) as exc:
        _fail(str(exc) or type(exc).__name__, exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        print("ckplan: interrupted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as exc:
        _flush()
        _exit(exc.exit_code)
    except typer.TyperException as exc:  # the parser's errors (click's, as typer vendors them)
        if len(sys.argv) <= 1:  # `ckplan` alone: the help was shown (no_args_is_help), not an error
            sys.exit(0)
        _fail(exc.format_message(), exc.exit_code or 2)
    except Exception as exc:
        name = type(exc).__name__
        if _debug:
            raise
        detail = str(exc).strip().splitlines()
        print(
            f"ckplan: internal error: {name}{': ' + visible(detail[0]) if detail else ''} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)
    _flush()
    _exit(result if isinstance(result, int) else 0)


def _flush() -> None:
    """The output's last bytes, written now rather than at exit: a full disk or a closed pipe is found while it can
    still be said."""
    try:
        sys.stdout.flush()
    except OutputLost as exc:
        _output_lost(exc)


def _output_lost(exc: OutputLost) -> None:
    """Stdout failed: its unwritten output is dropped (stdout goes to /dev/null, so that the flush at exit does not
    fail again); a closed pipe ends quietly with 141, as `head` expects of the command before it; anything else
    (ENOSPC, EIO) is the environment's, 3."""
    # a stream with no file descriptor (a test's capture) has nothing to flush at exit
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if exc.errno == errno.EPIPE:
        sys.exit(141)
    _fail(f"cannot write the output to stdout: {exc}", 3)


def _exit(code: int) -> None:
    if code == 130:  # typer turns KeyboardInterrupt (Ctrl-C, or children.interrupt_on_signals's) into exit code 130
        print("ckplan: interrupted", file=sys.stderr)
    sys.exit(code)


def _fail(message: str, code: int) -> None:
    """The one error line. A message quotes what a file or a flag held (a name, a path, a line of a log): its
    control characters are shown as escapes, a newline too, so that the line stays one and acts on nothing."""
    print(f"ckplan: error: {visible(message.strip())}", file=sys.stderr)
    sys.exit(code)
