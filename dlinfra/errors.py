"""The one error type users see.

Anything the user can fix (a bad flag, a spec field, an unreachable host, a
stopped daemon) is raised as :class:`DlinfraError`; the CLI prints it as one
line and exits non-zero. Everything else is a bug and shows a traceback only
with ``--debug``.
"""

from __future__ import annotations


class DlinfraError(Exception):
    """A user-facing failure: what went wrong, and what to do about it."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class SpecError(DlinfraError):
    """A campaign spec or inventory is invalid; the message names file and field."""


class TargetError(DlinfraError):
    """A host or target cannot be reached or prepared; the message names it."""


class Unreachable(TargetError):
    """A host that does not answer at all (no route, refused, timed out): a retry on a fresh connection will not
    help, so callers that retry a lost connection give up on this one at once."""


class StoreError(DlinfraError):
    """The results store cannot be opened or written."""
