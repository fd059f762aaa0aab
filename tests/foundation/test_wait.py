"""The one wait helper (dlinfra/runtime/wait.py): what comes in time is returned, what does not is one error
naming what was awaited, a reason to stop waiting ends it early, and a stopped campaign ends it at once."""

from __future__ import annotations

import threading
import time

import pytest

from dlinfra import cancel
from dlinfra.errors import TargetError
from dlinfra.runtime.wait import WaitTimedOut, retry_until, wait_for


def test_it_returns_what_came() -> None:
    calls = iter([None, False, "up"])
    assert wait_for("the socket", lambda: next(calls), timeout=5, interval=0.01) == "up"
    assert wait_for("no time at all", lambda: 7, timeout=0.0) == 7  # checked before the deadline is looked at


def test_the_deadline_and_a_reason_to_give_up_name_what_was_awaited() -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimedOut, match=r"^dockerd: not within 0.05 s"):
        wait_for("dockerd", lambda: None, timeout=0.05, interval=0.01)
    with pytest.raises(WaitTimedOut, match=r"^dockerd: it exited"):
        wait_for("dockerd", lambda: None, timeout=60, interval=0.01, give_up=lambda: "it exited")
    assert time.monotonic() - started < 5


def test_retry_until_returns_after_failures_and_names_the_last_error() -> None:
    attempts = iter([OSError("refused"), OSError("refused"), "facts"])

    def action() -> str:
        got = next(attempts)
        if isinstance(got, Exception):
            raise got
        return got

    assert retry_until("node-1 answers SSH", action, timeout=5, interval=0.01) == "facts"
    with pytest.raises(TargetError, match=r"^node-1 answers SSH: banner timeout \(is sshd up\?\)$"):
        retry_until("node-1 answers SSH", _raises(EOFError("banner timeout")), timeout=0.05, interval=0.01,
                    hint="is sshd up?")  # fmt: skip


def test_a_stopped_campaign_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    with cancel.cancellable(stop), pytest.raises(cancel.Cancelled):
        wait_for("the guest", lambda: None, timeout=60, interval=0.01)


def _raises(exc: Exception):
    def action() -> None:
        raise exc

    return action
