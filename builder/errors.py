"""The one exception type that reaches the user as a single line."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or environment the user can fix: printed as one line, exit code 2, no traceback."""

    exit_code = 2


class CheckFailed(Exception):
    """A check (render --check, a lint) found differences: printed, exit code 1."""

    exit_code = 1
