"""The one wait helper (dlinfra/runtime/wait.py): what comes in time is returned, what does not is one error
naming what was awaited, a reason to stop waiting ends it early, and a stopped campaign ends it at once."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

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


#: Loops that sleep and are no wait: each with why. The payload keeps waits of its own (it may import nothing of
#: the controller's; dlinfra/payload/control.py documents them).
NOT_WAITS = {
    "dlinfra/runtime/progress.py": "the heartbeat ticks every second while a phase runs; it awaits nothing",
}


def _sleeping_loops(path: Path) -> list[int]:
    """Lines of the ``while``/``for`` loops in ``path`` whose body calls ``time.sleep``."""
    found = []
    for loop in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(loop, ast.While | ast.For):
            continue
        for node in (n for stmt in loop.body for n in ast.walk(stmt)):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and func.attr == "sleep" and getattr(func.value, "id", "") == "time":
                found.append(loop.lineno)
                break
    return found


def test_every_poll_goes_through_the_wait_helper() -> None:
    """A loop that sleeps until something comes is written with wait_for or retry_until, which give it a
    deadline, a name in its messages and a cancel check; a new hand-written one fails here."""
    root = Path(__file__).resolve().parents[2]
    package = root / "dlinfra"
    loose = [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(package.rglob("*.py"))
        if package / "payload" not in path.parents and path.name != "wait.py"
        and str(path.relative_to(root)) not in NOT_WAITS
        for line in _sleeping_loops(path)
    ]  # fmt: skip
    assert not loose, f"hand-written wait loops (use dlinfra.runtime.wait): {loose}"
    gone = [name for name in NOT_WAITS if not _sleeping_loops(root / name)]
    assert not gone, f"the exception list names loops that are gone: {gone}"
