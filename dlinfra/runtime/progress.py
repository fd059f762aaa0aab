"""Progress a person can follow, on a terminal and in a log: phases with start and end lines.

Why lines and not a live bar: ``make demo`` and CI pipe the output to a log,
where a redrawn bar shows nothing until it ends. Every phase prints a start
line and an end line with its duration; while a phase runs, a heartbeat prints
what it is waiting for whenever nothing else was printed for ``HEARTBEAT_S``
seconds, so no phase is ever silent for longer.

Code deep inside a provider does not need the console: it calls :func:`note`
("waiting for SSH on vm1; console: ...") and the heartbeat shows the latest
note of the innermost running phase. Phases may run side by side on several
threads (a campaign's layers come up together): a note goes to its own
thread's innermost phase, and the heartbeat shows each thread's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape

#: Longest silence while a phase runs, in seconds.
HEARTBEAT_S = 20.0


@dataclass
class Phase:
    """A running phase; set ``outcome`` (appended to the end line) or ``failure`` (ends it with ✗)."""

    name: str
    started: float = field(default_factory=time.monotonic)
    thread: int = field(default_factory=threading.get_ident)
    status: str = ""
    outcome: str = ""
    failure: str | None = None


class _Reporter:
    """The process's one progress printer: a console, the stack of running phases, a heartbeat thread."""

    def __init__(self) -> None:
        self.console: Console | None = Console(stderr=True)
        self.stack: list[Phase] = []
        self.lock = threading.Lock()
        self.last_print = time.monotonic()
        self.thread: threading.Thread | None = None

    def say(self, text: str) -> None:
        with self.lock:
            self.last_print = time.monotonic()
            if self.console is not None:
                self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}", highlight=False)

    def beat(self) -> None:
        """Print each thread's innermost phase and its latest note when nothing was printed for a while."""
        while True:
            time.sleep(1.0)
            with self.lock:
                if not self.stack:
                    self.thread = None
                    return
                quiet_for = time.monotonic() - self.last_print
                innermost = {p.thread: p for p in self.stack}  # the last pushed of each thread
            if quiet_for >= HEARTBEAT_S:
                for phase in sorted(innermost.values(), key=lambda p: p.started):
                    elapsed = time.monotonic() - phase.started
                    status = f": {escape(phase.status)}" if phase.status else ""
                    self.say(f"  … {escape(phase.name)} ({elapsed:.0f} s){status}")

    def push(self, phase: Phase) -> None:
        with self.lock:
            self.stack.append(phase)
            if self.thread is None:
                self.thread = threading.Thread(target=self.beat, name="dlinfra-heartbeat", daemon=True)
                self.thread.start()

    def pop(self, phase: Phase) -> None:
        with self.lock:
            if phase in self.stack:
                self.stack.remove(phase)


_REPORTER = _Reporter()


def use_console(console: Console | None) -> None:
    """Send progress to ``console`` (None: print nothing, as ``--quiet`` asks)."""
    _REPORTER.console = console


def current_console() -> Console | None:
    """Where progress goes (None under ``--quiet``), for code that prints its own rows (Ansible's)."""
    return _REPORTER.console


def running_phases() -> str:
    """The phases running now, innermost of each thread, oldest first ("bm: bring up, ctr: bring up"): what an
    interrupt stops after. Read without the lock: a signal handler calls it, and its thread may hold it."""
    innermost = {p.thread: p for p in list(_REPORTER.stack)}
    return ", ".join(p.name for p in sorted(innermost.values(), key=lambda p: p.started))


def say(text: str) -> None:
    """One progress line (rich markup allowed), timestamped."""
    _REPORTER.say(text)


def note(status: str) -> None:
    """What the innermost running phase of this thread (else of any) is doing now; the heartbeat prints it
    (no-op outside a phase)."""
    me = threading.get_ident()
    with _REPORTER.lock:
        mine = [p for p in _REPORTER.stack if p.thread == me] or _REPORTER.stack
        if mine:
            mine[-1].status = status


@contextmanager
def phase(name: str, detail: str = "") -> Iterator[Phase]:
    """``▶ name`` now, ``✓ name (12.3 s)`` or ``✗ name failed after 12.3 s: why`` at the end."""
    current = Phase(name)
    say(f"▶ {escape(name)}" + (f" [dim]{escape(detail)}[/dim]" if detail else ""))
    _REPORTER.push(current)
    try:
        yield current
    except BaseException as exc:
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc).strip().split("\n")[0]
        current.failure = why or type(exc).__name__
        raise
    finally:
        _REPORTER.pop(current)
        elapsed = time.monotonic() - current.started
        if current.failure is not None:
            say(f"[red]✗ {escape(name)} failed after {elapsed:.1f} s:[/red] {escape(current.failure)}")
        else:
            outcome = f", {escape(current.outcome)}" if current.outcome else ""
            say(f"[green]✓[/green] {escape(name)} ({elapsed:.1f} s{outcome})")
