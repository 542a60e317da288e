"""Errors a user can act on, each one line saying what was wrong and what to do. The CLI prints
them without a traceback: `UsageError` exits 2 (bad arguments or input), any other `RlkitError` 1."""


class RlkitError(RuntimeError):
    """A failure the user can fix; the message is one line saying what and how."""


class UsageError(RlkitError, ValueError):
    """Bad arguments, config values or input data (CLI exit code 2); also a ValueError."""
