"""Errors a user can act on.

Every error rlkit raises on purpose says, in one line, what was wrong and what to do. The CLI
prints such errors without a traceback: `UsageError` exits with code 2 (bad arguments or input),
any other `RlkitError` with code 1 (the world was not as needed: a missing file, a dead cluster).
"""


class RlkitError(RuntimeError):
    """A failure the user can fix; the message is one line saying what and how."""


class UsageError(RlkitError, ValueError):
    """Bad arguments, config values or input data (CLI exit code 2).

    Subclasses ValueError so that library callers validating input can catch the usual type.
    """
