"""Waiting for something that comes by itself (a daemon's socket, a server going ACTIVE, a node settling): one
helper, so that every wait has a deadline, an interval, a name for its messages, and stops when the campaign is
cancelled.

Why not a loop per caller: the hand-written loops each had their own way of missing one of those (no cancel
check, a last check skipped past the deadline, a message without what was awaited).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from dlinfra import cancel
from dlinfra.errors import TargetError

T = TypeVar("T")


class WaitTimedOut(TargetError):
    """What was awaited did not come within its deadline; the message names it and how long was waited."""


def wait_for(
    what: str,
    ready: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.5,
    cancellable: bool = True,
    give_up: Callable[[], str | None] | None = None,
    hint: str | None = None,
) -> T:
    """Call ``ready`` every ``interval`` seconds until it returns something other than None or False, and return
    that. ``give_up`` says why waiting longer is pointless (a process that exited), or None to go on; it and the
    deadline raise :class:`WaitTimedOut` naming ``what``. ``ready`` is called once more at the deadline, so a
    slow last step is not lost. ``cancellable``: a stopped campaign ends the wait (a teardown's is not)."""
    deadline = time.monotonic() + timeout
    while True:
        if cancellable:
            cancel.check()
        result = ready()
        if result is not None and result is not False:
            return result
        reason = give_up() if give_up is not None else None
        if reason:
            raise WaitTimedOut(f"{what}: {reason}", hint)
        if time.monotonic() >= deadline:
            raise WaitTimedOut(f"{what}: not within {timeout:g} s", hint)
        time.sleep(min(interval, max(0.01, deadline - time.monotonic())))


def retry_until(
    what: str, action: Callable[[], T], *, timeout: float, interval: float = 1.0, hint: str | None = None
) -> T:
    """Call ``action`` every ``interval`` seconds until it returns without raising (a machine that refuses SSH
    while it boots), and return what it returned. At the deadline, one :class:`TargetError`: ``what`` and the last
    error. A stopped campaign ends it at once (:mod:`dlinfra.cancel` raises a KeyboardInterrupt)."""
    last: list[BaseException] = []

    def attempt() -> tuple[T] | None:
        try:
            return (action(),)
        except Exception as exc:  # noqa: BLE001 - whatever the action raises while the thing is not ready
            last[:] = [exc]
            return None

    try:
        return wait_for(what, attempt, timeout=timeout, interval=interval)[0]
    except WaitTimedOut:
        raise TargetError(f"{what}: {last[0] if last else f'not within {timeout:g} s'}", hint) from None
