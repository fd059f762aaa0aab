"""Exec-in-container over another transport: a container is reached through its host, with no sshd of its own.

Why no sshd in the container: it would add a daemon, a key and a port to every
container and change what is measured. Commands run as ``ENGINE exec -i NAME
ARGV`` on the host; the container's runs folder is a bind mount of a host
folder, so its files are read and written through the host's transport.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dlinfra.transport.base import CommandResult, Transport


@dataclass(frozen=True)
class ContainerAccess:
    """How a container is entered from its host: the exec argv, and where its runs folder lies on the host."""

    exec_argv: list[str]
    #: (folder inside the container, the same folder on the host): files below it are reached via the host.
    runs_dir: str
    host_runs_dir: str
    extra: dict[str, str] = field(default_factory=dict)

    def host_path(self, path: str) -> str:
        """Where ``path`` (inside the container) lies on the host; paths outside the bind mount are refused."""
        if path == self.runs_dir or path.startswith(self.runs_dir + "/"):
            return self.host_runs_dir + path[len(self.runs_dir) :]
        raise FileNotFoundError(f"{path} is not under the container's runs folder {self.runs_dir}")


class ContainerTransport(Transport):
    """Runs commands inside a container through the host's transport."""

    def __init__(self, host: Transport, access: ContainerAccess, name: str) -> None:
        self.host = host
        self.access = access
        self.name = name

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: Callable[[str], None] | None = None,
    ) -> CommandResult:
        inner = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)
        return self.host.run([*self.access.exec_argv, *inner], timeout=timeout, on_stdout=on_stdout)

    def read(self, path: str) -> bytes:
        return self.host.read(self.access.host_path(path))

    def put(self, local: str, remote: str) -> None:
        self.host.put(local, self.access.host_path(remote))

    def open_files(self) -> None:
        self.host.open_files()

    def alive(self) -> bool:
        return self.host.alive()

    def check(self, timeout: float = 5.0) -> None:
        self.host.check(timeout)

    def close(self) -> None:
        self.host.close()
