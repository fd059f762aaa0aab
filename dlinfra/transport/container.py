"""Exec-in-container over another transport: a container is reached through its host, with no sshd of its own.

Why no sshd in the container: it would add a daemon, a key and a port to every
container and change what is measured. Commands run as ``ENGINE exec -i NAME
ARGV`` on the host. Where the container's runs folder is a bind mount of a host
folder (the docker and podman providers), its files are read and written through
the host's transport; where no host folder can be mounted (Zun mounts Cinder
volumes and files it writes itself, never a host folder), they are read through
the exec and written with the engine's ``cp``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dlinfra.errors import TargetError
from dlinfra.transport.base import CommandResult, Transport


@dataclass(frozen=True)
class ContainerAccess:
    """How a container is entered from its host: the exec argv, and where its runs folder lies on the host."""

    exec_argv: list[str]
    #: (folder inside the container, the same folder on the host): files below it are reached via the host.
    runs_dir: str
    #: None: no host folder is mounted there; files are read through the exec and written with ``copy_argv``.
    host_runs_dir: str | None
    extra: dict[str, str] = field(default_factory=dict)
    #: The engine's ``cp`` on the host and the container's name there (``docker cp``), when no folder is mounted.
    copy_argv: list[str] = field(default_factory=list)
    engine_name: str = ""

    def host_path(self, path: str) -> str:
        """Where ``path`` (inside the container) lies on the host; paths outside the bind mount are refused."""
        if self.host_runs_dir is None:
            raise FileNotFoundError(f"{path}: the container mounts no host folder")
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
        if self.access.host_runs_dir is not None:
            return self.host.read(self.access.host_path(path))
        found = self.run(["base64", "-w0", "--", path])  # the exec's output is text: the bytes travel encoded
        if not found.ok:
            if "No such file" in found.stderr:
                raise FileNotFoundError(f"{path} (in container {self.name})")
            raise TargetError(f"container {self.name}: reading {path} failed: {found.last_error_line()}")
        try:
            return base64.b64decode(found.stdout.strip(), validate=True)
        except binascii.Error as exc:
            raise TargetError(f"container {self.name}: reading {path} gave no base64 ({exc})") from exc

    def put(self, local: str, remote: str) -> None:
        if self.access.host_runs_dir is not None:
            self.host.put(local, self.access.host_path(remote))
            return
        staged = self.host.run(["mktemp", "--tmpdir", "dlinfra-put.XXXXXX"])
        if not staged.ok:
            raise TargetError(f"container {self.name}: no temporary file on its host: {staged.last_error_line()}")
        path = staged.stdout.strip()
        try:
            self.host.put(local, path)
            copied = self.host.run([*self.access.copy_argv, path, f"{self.access.engine_name}:{remote}"])
            if not copied.ok:
                raise TargetError(f"container {self.name}: copying {remote} in failed: {copied.last_error_line()}")
        finally:
            self.host.run(["rm", "-f", "--", path])

    def open_files(self) -> None:
        self.host.open_files()

    def alive(self) -> bool:
        return self.host.alive()

    def check(self, timeout: float = 5.0) -> None:
        self.host.check(timeout)

    def close(self) -> None:
        self.host.close()
