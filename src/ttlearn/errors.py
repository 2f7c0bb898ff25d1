"""Every failure a user can cause or fix, in one place: the CLI prints each as one red line (`cli.common.friendly`).

A room raises the error of its cause with a message that says what to do; the CLI knows only `UserError`. Errors
that predate this module (`ValueError` for bad input, `LLMError` for a dead back end, …) stay where they are and are
listed beside it in `cli.common.USER_ERRORS`.
"""

from __future__ import annotations


class UserError(Exception):
    """A failure the user can fix; its message is one line that says how."""


class StoreUnreachable(UserError, ConnectionError):
    """A memory store (PostgreSQL) cannot be reached or was lost; the message names it without its password."""


class DatabaseServerError(UserError, RuntimeError):
    """A database server ttlearn starts itself (MariaDB for db_bench) failed to install, start or answer."""


class BenchmarkDataError(UserError, RuntimeError):
    """A benchmark's shipped or prepared data cannot be read as the environment needs it."""
