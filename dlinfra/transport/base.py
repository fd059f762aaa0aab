"""The transport interface: run an argv, put and fetch a file, on one target."""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlinfra.errors import TargetError


class LinkLost(TargetError):
    """The link to a target broke during a command or a file transfer; ``cause`` says how."""

    def __init__(self, name: str, cause: str) -> None:
        super().__init__(f"host {name}: connection lost ({cause})")
        self.cause = cause


@dataclass(frozen=True)
class CommandResult:
    """How a remote command ended: ``exit_code`` is -1 when the link closed without an exit status."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def last_error_line(self) -> str:
        return (self.stderr.strip().splitlines() or ["no output"])[-1]


class Transport(abc.ABC):
    """Commands and files of one target. Arguments are lists: no value is ever parsed by a shell."""

    #: What error messages call this target (``host NAME``).
    name: str

    @abc.abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run ``argv`` to its end; raises :class:`dlinfra.errors.TargetError` when the target is unreachable.
        ``on_stdout`` is handed the command's output as it arrives (the whole of it is in the result as well)."""

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """The bytes of a file on the target; FileNotFoundError when it is not there."""

    @abc.abstractmethod
    def put(self, local: str, remote: str) -> None:
        """Copy a local file to ``remote`` on the target."""

    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the link still works (a pool replaces a dead one)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the link; never raises."""

    def open_files(self) -> None:  # noqa: B027 - an optional step
        """Open ahead of time what reading a file needs, so that a cell's first fetch does not wait for it; best
        effort (what fails here fails again, and is reported, at the first read). Here: nothing to open."""

    def check(self, timeout: float = 5.0) -> None:
        """Prove, within ``timeout``, that the link still carries commands, running none; raises
        :class:`LinkLost` where it does not. Here: :meth:`alive`; a transport with a cheaper proof says so."""
        if not self.alive():
            raise LinkLost(self.name, "the link is closed")


class TransportPool:
    """One open transport per (target, slot), kept across cells: a new SSH handshake per cell costs ~0.2 s.

    Processes that share a target use one slot each, so their commands run on separate links.
    """

    def __init__(self, opener: Callable[[object], Transport]) -> None:
        self._open = opener
        self._links: dict[tuple[str, int], Transport] = {}
        self._lock = threading.Lock()

    def get(self, target: object, slot: int = 0) -> Transport:
        key = (str(getattr(target, "name", target)), slot)
        with self._lock:
            link = self._links.get(key)
            if link is not None and link.alive():
                return link
            if link is not None:
                self._links.pop(key, None)
                link.close()
        link = self._open(target)
        with self._lock:
            self._links[key] = link
        return link

    def drop(self, target: object, slot: int = 0) -> None:
        with self._lock:
            link = self._links.pop((str(getattr(target, "name", target)), slot), None)
        if link is not None:
            link.close()

    def close(self) -> None:
        with self._lock:
            links, self._links = list(self._links.values()), {}
        for link in links:
            with contextlib.suppress(Exception):
                link.close()
