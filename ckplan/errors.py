"""The one exception type the CLI turns into a single stderr line and exit code 2."""


class InputError(ValueError):
    """Bad input from the user: a flag, a file or a target. Never a bug in ckplan."""
