"""Stopping work that runs on a thread other than the main one, when the main one is told to stop (Ctrl-C).

Why: a campaign brings its layers up side by side, each on a thread of its own, and only the main thread
hears a Ctrl-C. The main thread then sets the event the workers were started with; what they do that can
take long (a playbook, a wait for a guest to boot) looks at it through :func:`cancelled` or
:func:`check` and stops, so what they made can be taken down before dlinfra exits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_BOUND = threading.local()


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
    """Run the body uncancelled: the cleanup of a cancelled bring-up must run to its end."""
    with cancellable(threading.Event()):
        yield


def cancelled() -> bool:
    """Whether this thread's work was cancelled (never, on a thread that :func:`cancellable` did not bind)."""
    event = getattr(_BOUND, "event", None)
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

    def run() -> None:
        with cancellable(stop):
            target()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, stop
