"""Stopping work that runs on a thread other than the main one, when the main one is told to stop (Ctrl-C).

Why: a campaign brings its layers up side by side, each on a thread of its own, and only the main thread
hears a Ctrl-C. The main thread then sets the event the workers were started with; what they do that can
take long (a playbook, a wait for a guest to boot) looks at it through :func:`cancelled` or
:func:`check` and stops, so what they made can be taken down before dlinfra exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

_BOUND = threading.local()
#: Set once the whole process is told to stop (``dlinfra run``'s first SIGINT, SIGTERM or SIGHUP): every thread's
#: work is cancelled, except what runs :func:`shielded` (the teardown).
_PROCESS_STOP = threading.Event()
#: How long a cancelled child process gets between SIGTERM and SIGKILL.
TERM_GRACE_S = 5.0
#: How often a cancellable wait looks at the stop.
POLL_S = 0.2


class Cancelled(KeyboardInterrupt):
    """Raised on a worker thread whose work was cancelled: the worker's own Ctrl-C."""


@contextmanager
def cancellable(event: threading.Event) -> Iterator[None]:
    """Run the body on this thread under ``event``: once it is set, :func:`cancelled` is true here."""
    previous = getattr(_BOUND, "event", None)
    _BOUND.event = event
    try:
        yield
    finally:
        _BOUND.event = previous


@contextmanager
def shielded() -> Iterator[None]:
    """Run the body uncancelled: the cleanup of a cancelled bring-up must run to its end, even once the whole
    process is told to stop (:func:`stop_process`)."""
    was = getattr(_BOUND, "shielded", False)
    _BOUND.shielded = True
    try:
        with cancellable(threading.Event()):
            yield
    finally:
        _BOUND.shielded = was


def stop_process() -> None:
    """Cancel the work of every thread of this process that is not :func:`shielded` (the interrupt policy's)."""
    _PROCESS_STOP.set()


def process_stopping() -> bool:
    """Whether the whole process was told to stop."""
    return _PROCESS_STOP.is_set()


def reset_process() -> None:
    """Forget a process-wide stop (a test, or a library caller, that runs a second campaign in this process)."""
    _PROCESS_STOP.clear()


def cancelled() -> bool:
    """Whether this thread's work was cancelled: its own event (:func:`cancellable`) is set, or the whole process
    was told to stop and this is the main thread or one :func:`cancellable` bound (a layer's bring-up, a helper),
    not :func:`shielded`. A plain thread (a cell's process, a teardown's) watches what its starter gives it."""
    event = getattr(_BOUND, "event", None)
    if _PROCESS_STOP.is_set() and not getattr(_BOUND, "shielded", False):
        if event is not None or threading.current_thread() is threading.main_thread():
            return True
    return event is not None and event.is_set()


def check() -> None:
    """Raise :class:`Cancelled` when this thread's work was cancelled; for the loops that wait."""
    if cancelled():
        raise Cancelled


class _Either(threading.Event):
    """Set once set itself, or once the event of the work that started it is (read with ``is_set``, as
    :func:`cancelled` does; ``wait`` sees its own flag only)."""

    def __init__(self, parent: threading.Event | None) -> None:
        super().__init__()
        self._parent = parent

    def is_set(self) -> bool:
        return super().is_set() or (self._parent is not None and self._parent.is_set())


def start_helper(target: Callable[[], None], name: str) -> tuple[threading.Thread, threading.Event]:
    """Run ``target`` on a daemon thread of its own, cancelled with this thread's work, or by setting the event
    returned (its starter gave up on it); the starter joins the thread.

    Why: a helper that runs a playbook (a layer's facts beside its deploy) must stop when a Ctrl-C or a bad spec
    stops the campaign, or its ``ansible-playbook`` outlives dlinfra.
    """
    stop = _Either(getattr(_BOUND, "event", None))
    shield = getattr(_BOUND, "shielded", False)

    def run() -> None:
        _BOUND.shielded = shield  # a helper of a teardown is part of it
        with cancellable(stop):
            target()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, stop


def run_process(
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    input_text: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True)`` that stops when this thread's work is cancelled:
    the child (in a session of its own, with whatever it started) gets SIGTERM, then SIGKILL after
    :data:`TERM_GRACE_S`, and :class:`Cancelled` follows. Raises ``subprocess.TimeoutExpired`` as ``run`` does.

    Why: an image build or a wheelhouse download takes minutes; a Ctrl-C (or a SIGTERM to dlinfra's pid alone,
    which its children never see) must stop it within seconds, not after it.
    """
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = input_text
    while True:
        try:
            out, err = proc.communicate(pending, timeout=POLL_S)
            return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            pending = None  # communicate() sent it already
        if cancelled() or (deadline is not None and time.monotonic() > deadline):
            stop_child(proc)
            check()
            raise subprocess.TimeoutExpired(list(argv), timeout or 0.0)


def stop_child(proc: subprocess.Popen[str]) -> None:
    """SIGTERM a child started in a session of its own (its whole process group), SIGKILL after the grace."""
    for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.communicate(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
