"""SSH connections to targets through fabric, with host keys always checked.

Why here and not inline: fabric's default accepts unknown host keys
(``AutoAddPolicy``) and reads the user's ``~/.ssh/config``; every dlinfra
connection must instead reject unknown keys, read only the target's own
known_hosts and behave the same for every user. Remote commands are built
from argument lists with each argument quoted (:func:`remote_command`), never
from strings.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Sequence
from pathlib import Path

import paramiko
from fabric import Config, Connection

from dlinfra.errors import TargetError
from dlinfra.providers.base import Target


def remote_command(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """One remote command line from an argument list; every piece is quoted, values never parsed by a shell."""
    prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    return shlex.join([*prefix, *argv])


def connect(target: Target, timeout: float = 10.0) -> Connection:
    """An open connection to ``target``; errors name the target and say what to do."""
    config = Config(overrides={"load_ssh_configs": False, "run": {"in_stream": False}})
    connect_kwargs: dict[str, object] = {"allow_agent": False, "look_for_keys": target.key_file is None}
    if target.key_file:
        connect_kwargs["key_filename"] = [target.key_file]
    conn = Connection(
        host=target.address,
        user=target.user,
        port=target.port,
        config=config,
        connect_timeout=timeout,
        connect_kwargs=connect_kwargs,
    )
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    known = Path(target.known_hosts).expanduser() if target.known_hosts else Path.home() / ".ssh" / "known_hosts"
    if known.exists():
        conn.client.load_host_keys(str(known))
    where = f"host {target.name} ({target.user}@{target.address}:{target.port})"
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        raise TargetError(
            f"{where}: host key does not match {known}", "someone may be intercepting; check the key and update it"
        ) from None
    except paramiko.AuthenticationException:
        raise TargetError(f"{where}: SSH authentication failed", "check ansible_user and the private key") from None
    except paramiko.SSHException as exc:
        if "known_hosts" in str(exc) or "not found in" in str(exc):
            raise TargetError(
                f"{where}: host key is not in {known}",
                "add it (ssh-keyscan, checked by hand) or set dlinfra_known_hosts",
            ) from None
        raise TargetError(f"{where}: SSH failed: {exc}") from None
    except (TimeoutError, OSError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise TargetError(f"{where} is unreachable: {reason}", "is the host up and its sshd running?") from None
    transport = conn.client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return conn


class ConnectionPool:
    """Keeps one open connection per target across cells (a new SSH handshake per cell costs ~0.2 s)."""

    def __init__(self) -> None:
        self._conns: dict[str, Connection] = {}

    def get(self, target: Target, slot: int = 0) -> Connection:
        """The open connection for ``target`` (processes sharing a target use one ``slot`` each)."""
        key = f"{target.name}#{slot}"
        conn = self._conns.get(key)
        transport = conn.client.get_transport() if conn is not None else None
        if conn is not None and transport is not None and transport.is_active():
            return conn
        if conn is not None:
            self.drop(target, slot)
        conn = connect(target)
        self._conns[key] = conn
        return conn

    def drop(self, target: Target, slot: int = 0) -> None:
        conn = self._conns.pop(f"{target.name}#{slot}", None)
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection may raise anything
                conn.close()

    def close(self) -> None:
        for conn in self._conns.values():
            with contextlib.suppress(Exception):
                conn.close()
        self._conns.clear()
