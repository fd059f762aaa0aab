"""Errors the payload reports as one line plus a failure record."""

from __future__ import annotations

from dlinfra.errors import DlinfraError


class PayloadError(DlinfraError):
    """Bad input to the payload (flag, data path, cluster layout): the message names it."""


class PeerLost(DlinfraError):
    """A task of the cluster vanished or stopped answering; the message names it."""

    exit_code = 3
