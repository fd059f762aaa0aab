"""SSH, the one place that builds SSH connections and command lines, with host keys always checked.

Why one place: fabric's default accepts unknown host keys (``AutoAddPolicy``)
and reads the user's ``~/.ssh/config``; OpenSSH and Ansible each take their
own flags. Every dlinfra connection instead rejects unknown keys, reads only
the target's own known_hosts and behaves the same for every user, whichever of
the three carries it: :func:`~dlinfra.transport.fabric_link.connect` (fabric, for the run engine),
:meth:`SshEndpoint.argv` (OpenSSH, for engines driven over SSH and boot
probes) and :meth:`SshEndpoint.ansible_vars` (Ansible). Remote commands are
built from argument lists with each argument quoted (:func:`remote_command`),
never from strings.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra.transport.base import CommandResult, LinkLost, Transport

if TYPE_CHECKING:
    from fabric import Connection

#: Ansible's OpenSSH options (its ansible.cfg): one multiplexed connection per host, host keys always checked.
ANSIBLE_SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=30s -o StrictHostKeyChecking=yes -o BatchMode=yes"


def ansible_ssh_common_args(known_hosts: str | None) -> str:
    """``ansible_ssh_common_args`` of a host (or a group) whose keys are in ``known_hosts``: checked, always."""
    return " ".join(
        [*([f"-o UserKnownHostsFile={known_hosts}"] if known_hosts else []), "-o StrictHostKeyChecking=yes"]
    )


def with_connect_timeout(argv: Sequence[str], seconds: int) -> list[str]:
    """An ssh argv that :meth:`SshEndpoint.argv` made (a run's state file keeps one) with another connect timeout:
    a sweep reaching a host that may be gone waits less than a bring-up."""
    out = list(argv)
    for i in range(1, len(out) - 1):
        if out[i] == "-o" and out[i + 1].startswith("ConnectTimeout="):
            out[i + 1] = f"ConnectTimeout={seconds}"
            return out
    return [*out[:1], "-o", f"ConnectTimeout={seconds}", *out[1:]]


def through(via: Sequence[str], argv: Sequence[str]) -> list[str]:
    """``argv`` run through ``via``, an ssh argv prefix (:meth:`SshEndpoint.argv` without a command), quoted as
    one string for the remote shell; ``argv`` itself when ``via`` is empty (a host of this machine)."""
    return [*via, shlex.join(argv)] if via else list(argv)


def remote_command(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """One remote command line from an argument list; every piece is quoted, values never parsed by a shell."""
    prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    return shlex.join([*prefix, *argv])


@dataclass(frozen=True)
class SshEndpoint:
    """Where and as whom SSH goes, and which key and known_hosts file it uses."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str | None = None

    @property
    def where(self) -> str:
        return f"host {self.name} ({self.user}@{self.address}:{self.port})"

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts).expanduser() if self.known_hosts else Path.home() / ".ssh" / "known_hosts"

    def argv(self, command: Sequence[str] | None = None, *, connect_timeout: int = 10) -> list[str]:
        """The OpenSSH argv reaching this endpoint (strict host key checking), then ``command`` quoted."""
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
        argv += ["-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR", "-p", str(self.port)]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        if self.key_file:
            argv += ["-o", "IdentitiesOnly=yes", "-i", self.key_file]
        argv.append(f"{self.user}@{self.address}")
        if command is None:
            return argv
        # ssh hands the remote side one string for its shell: quote every word, never paste raw values.
        return [*argv, "--", shlex.join(command)]

    def ansible_vars(self) -> dict[str, Any]:
        """Inventory variables that make Ansible reach this endpoint exactly as :func:`connect` does."""
        hv: dict[str, Any] = {
            "ansible_host": self.address,
            "ansible_port": self.port,
            "ansible_user": self.user,
            "ansible_ssh_common_args": ansible_ssh_common_args(self.known_hosts),
        }
        if self.key_file:
            hv["ansible_ssh_private_key_file"] = self.key_file
        return hv


class SshTransport(Transport):
    """A target over one persistent SSH connection (fabric): commands on channels, files over SFTP."""

    def __init__(self, endpoint: SshEndpoint, timeout: float = 10.0) -> None:
        # Imported here: fabric and paramiko take ~0.1 s to import, which every dlinfra process that never
        # connects (a refused spec, a report, a sweep with nothing to do) would pay.
        from dlinfra.transport.fabric_link import connect

        self.endpoint = endpoint
        self.name = endpoint.name
        self.conn: Connection = connect(endpoint, timeout)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: Callable[[str], None] | None = None,
    ) -> CommandResult:
        # invoke writes what it does not hide to out_stream, as it arrives; stderr is only collected.
        shown = {"hide": "stderr", "out_stream": _Feed(on_stdout)} if on_stdout else {"hide": True}
        try:
            result = self.conn.run(remote_command(argv, env), warn=True, in_stream=False, timeout=timeout, **shown)
        except Exception as exc:  # noqa: BLE001 - paramiko/invoke raise many kinds on a dead link
            raise LinkLost(self.name, _describe(exc)) from None
        return CommandResult(result.exited if result.exited is not None else -1, result.stdout, result.stderr)

    def read(self, path: str) -> bytes:
        try:
            with self.conn.sftp().open(path, "r") as fh:
                return fh.read()
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - sftp on a dead link
            raise LinkLost(self.name, f"cannot read {path}: {_describe(exc)}") from None

    def put(self, local: str, remote: str) -> None:
        try:
            self.conn.put(local, remote)
        except Exception as exc:  # noqa: BLE001 - sftp on a dead link
            raise LinkLost(self.name, f"cannot write {remote}: {_describe(exc)}") from None

    def open_files(self) -> None:
        """The SFTP session, which fabric keeps: opening it starts an sftp-server on the host, ~0.25 s of a
        cell's wall time in an emulated guest when its first fetch paid for it."""
        with contextlib.suppress(Exception):  # a dead link is reported by the read that needs it
            self.conn.sftp()

    def alive(self) -> bool:
        link = self.conn.client.get_transport()
        return link is not None and link.is_active()

    def check(self, timeout: float = 5.0) -> None:
        """Open and close a session channel: one SSH round trip, no process on the host, bounded by ``timeout``
        (a host that vanished without closing the TCP connection would leave a keepalive unanswered for good)."""
        link = self.conn.client.get_transport()
        try:
            if link is None or not link.is_active():
                raise EOFError("the SSH connection is closed")
            link.open_session(timeout=timeout).close()
        except Exception as exc:  # noqa: BLE001 - paramiko raises many kinds on a dead link
            raise LinkLost(self.name, _describe(exc)) from None

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001, S110 - closing a dead connection may raise anything
            pass


class _Feed:
    """A write-only stream that hands each piece written to it to a callback (invoke's ``out_stream``)."""

    def __init__(self, callback: Callable[[str], None]) -> None:
        self.write = callback

    def flush(self) -> None:
        """Nothing is kept here."""


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
