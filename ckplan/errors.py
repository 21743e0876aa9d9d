"""The exceptions the CLI turns into a single stderr line, each with its own exit code.

Scripts that drive ckplan tell the three apart by the exit code: fix the
command (2), fix the machine (3), or look at the target and try again (4).
Anything else that escapes a command is a bug in ckplan (exit code 1).
"""

import errno
import os


class InputError(ValueError):
    """Bad input from the user: a flag, a file or a target. Never a bug in ckplan.

    The library names its own parameters in a message as ‹name› (a Policy field, a build_plan parameter); it does
    not know the CLI's flags. `render(names)` puts the caller's names in (the CLI maps ‹mtbf_s› to --mtbf), and
    str() shows the parameter names themselves, for a caller of the library.
    """

    exit_code = 2

    def render(self, names: dict[str, str]) -> str:
        import re

        return re.sub(r"‹(\w+)›", lambda m: names.get(m[1], m[1]), str(self.args[0]) if self.args else "")

    def __str__(self) -> str:
        return self.render({})


class EnvironmentProblem(RuntimeError):
    """The machine lacks something ckplan needs: fio, an optional extra, a reachable endpoint."""

    exit_code = 3


class MeasurementFailed(RuntimeError):
    """A probe or save failed while it was measuring: the disk filled up, fio died."""

    exit_code = 4


class OutputLost(Exception):
    """Writing the command's output to stdout failed: the reader closed the pipe (`| head`), or the file filled up
    (`> /dev/full`). Not an OSError, so that nothing between the write and main takes it for a file's error."""

    def __init__(self, cause: OSError):
        super().__init__(cause.strerror or str(cause))
        self.errno = cause.errno


def missing_extra(what: str, package: str, extra: str) -> EnvironmentProblem:
    """The error for an optional dependency that is not installed, with the pip command that installs it."""
    return EnvironmentProblem(f"{what} needs {package}: pip install 'ckplan[{extra}]'")


def did_you_mean(name: str, choices: list[str]) -> str:
    """'; did you mean a, b?' for the near misses of `name` among `choices`, else the list of known choices."""
    import difflib

    near = difflib.get_close_matches(name.lower(), choices, n=3, cutoff=0.4)
    return f"; did you mean {', '.join(near)}?" if near else f"; known: {', '.join(choices)}"


def describe_errno(code: int, what: str, failed: str = "fio failed") -> str:
    """A failed write's errno in words, for a MeasurementFailed: the probe's fio runs, the savers' saves."""
    if code == errno.ENOSPC:
        return f"the target filled up (ENOSPC) during {what}; nothing was left behind"
    if code == errno.EROFS:
        return f"the target is read-only (EROFS) during {what}"
    if code == errno.EACCES or code == errno.EPERM:
        return f"permission denied during {what}"
    if code == errno.EINVAL:
        return f"the target refused the I/O mode (EINVAL) during {what}"
    return f"{failed} during {what}: {os.strerror(code)} (errno {code})"


def oserror_message(exc: OSError, what: str) -> MeasurementFailed:
    """A write that failed mid-measurement (the target filled up, went read-only): exit code 4."""
    if exc.errno:
        return MeasurementFailed(describe_errno(exc.errno, what, failed="a write failed"))
    return MeasurementFailed(f"{what} failed: {exc}")
