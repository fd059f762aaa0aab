"""``dlinfra run``'s one interrupt policy: SIGINT, SIGTERM and SIGHUP seen in every phase, said at once.

Why one policy: a campaign is hours of phases (wheelhouse, image builds, bring-up and deploy playbooks, the
shield, facts, cells, teardown), each once with a handler of its own or none; a Ctrl-C during a playbook was
lost and the campaign ran all its cells. Now, for the whole run:

- the first signal prints ``interrupt: stopping after <phase>; Ctrl-C again to stop now`` and sets the
  process-wide stop of :mod:`dlinfra.cancel`: every cancellable wait, playbook (ansible-runner's cancel callback)
  and child process (:func:`dlinfra.cancel.run_process`) of every thread stops within :data:`STOP_BOUND_S`;
  the running cell is stored as interrupted, what was made is torn down (teardown runs
  :func:`~dlinfra.cancel.shielded`), the shield is restored, and the last line says what to ``--resume``;
- a second one stops at once (exit without teardown) and names ``dlinfra sweep``, which removes what is left;
- exit codes: 130 after SIGINT, 143 after SIGTERM or SIGHUP (a closed terminal is told to terminate).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from dlinfra import cancel
from dlinfra.runtime.progress import running_phases

#: The most seconds from the first signal to the running playbook, build step or cell being stopped: a playbook's
#: cancel is polled every second and its workers get 5 s before SIGKILL; a child process gets SIGTERM within 0.2 s
#: and SIGKILL 5 s later; a layer still coming up after that is given up on (``dlinfra sweep`` removes it).
STOP_BOUND_S = 30
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long the main thread's waits block at most: the kernel may give a signal to any thread, and Python runs
#: the handler on the main thread only once its wait returns.
POLL_S = 0.2
_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


class Policy:
    """The signal handlers of one ``dlinfra run``, and what the first signal was."""

    def __init__(self) -> None:
        #: Set by the first signal (the cells' loop and a running cell watch it).
        self.event = threading.Event()
        self.signum: int | None = None
        #: The phases that were running when the first signal came ("bring up" within "campaign" ...).
        self.during = ""
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """130 after SIGINT, 143 after SIGTERM or SIGHUP (128 + SIGTERM: the terminal asked it to terminate)."""
        return 130 if self.signum == signal.SIGINT else 143

    @property
    def signal_name(self) -> str:
        return _NAMES.get(signal.Signals(self.signum), "signal") if self.signum is not None else ""

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The handler: first signal, stop after the running phase; second, stop now."""
        if self.signum is None:
            self.signum = signum
            self.during = running_phases() or "the current step"
            cancel.stop_process()
            self.event.set()
            _line(f"interrupt ({_NAMES.get(signal.Signals(signum), signum)}): stopping after {self.during}; "
                  "Ctrl-C again to stop now")  # fmt: skip
            return
        _line("interrupt: stopping now, without tearing down; 'dlinfra sweep' removes what is left")
        os._exit(self.exit_code)  # no finally may run: the user asked twice

    def install(self) -> None:
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT: stays ignored
                continue
            self._previous[sig] = previous
            signal.signal(sig, self.handle)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


_ACTIVE: Policy | None = None


def active() -> Policy | None:
    """The policy installed now (None outside ``dlinfra run``, or off the main thread before one is)."""
    return _ACTIVE


def stop_reason() -> str:
    """Why a cell stopped early when its stop was set: what a stored failure says (a Ctrl-C, or which signal)."""
    policy = _ACTIVE
    if policy is None or policy.signum in (None, signal.SIGINT):
        return "interrupted by the user (Ctrl-C)"
    return f"interrupted by {policy.signal_name}"


@contextmanager
def installed() -> Iterator[Policy]:
    """Install the policy for the body (on the main thread; nested: the outer one stays); a new process-wide
    stop starts unset."""
    global _ACTIVE
    if _ACTIVE is not None:
        yield _ACTIVE
        return
    policy = Policy()
    if threading.current_thread() is not threading.main_thread():
        yield policy  # signals reach the main thread only: a library caller's own thread gets no handlers
        return
    cancel.reset_process()
    policy.install()
    _ACTIVE = policy
    try:
        yield policy
    finally:
        _ACTIVE = None
        policy.uninstall()


def _line(text: str) -> None:
    """One line on stderr, written at once (a signal handler must not wait for the progress printer's lock)."""
    try:
        os.write(2, f"{text}\n".encode())
    except OSError:
        pass  # stderr is gone (a closed terminal): the exit code says it
