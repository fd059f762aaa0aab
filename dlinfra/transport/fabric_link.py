"""The fabric connection behind :class:`~dlinfra.transport.ssh.SshTransport`, with host keys always checked.

Why a module of its own: fabric and paramiko take ~0.1 s to import, and only a process that connects needs them
(:mod:`dlinfra.transport.ssh` imports this when a transport opens). What the connection accepts is
:mod:`dlinfra.transport.ssh`'s rule: unknown host keys refused, only the target's own known_hosts read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import paramiko
from fabric import Config, Connection

from dlinfra.errors import TargetError, Unreachable


class Endpoint(Protocol):
    """What a connection needs of :class:`~dlinfra.transport.ssh.SshEndpoint` (named here, not imported: that
    module imports this one when a transport opens)."""

    address: str
    port: int
    user: str
    key_file: str | None

    @property
    def where(self) -> str: ...

    def known_hosts_path(self) -> Path: ...


class _UnknownHostKey(paramiko.SSHException):
    """The host's key is in no known_hosts file: told apart by its type, not by paramiko's message."""


class _RefuseUnknownKey(paramiko.MissingHostKeyPolicy):
    """paramiko's RejectPolicy, raising :class:`_UnknownHostKey`."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise _UnknownHostKey(hostname)


def connect(endpoint: Endpoint, timeout: float = 10.0) -> Connection:
    """An open fabric connection; errors name the host and say what to do."""
    config = Config(overrides={"load_ssh_configs": False, "run": {"in_stream": False}})
    connect_kwargs: dict[str, object] = {"allow_agent": False, "look_for_keys": endpoint.key_file is None}
    if endpoint.key_file:
        connect_kwargs["key_filename"] = [endpoint.key_file]
    conn = Connection(
        host=endpoint.address,
        user=endpoint.user,
        port=endpoint.port,
        config=config,
        connect_timeout=timeout,
        connect_kwargs=connect_kwargs,
    )
    conn.client.set_missing_host_key_policy(_RefuseUnknownKey())
    known = endpoint.known_hosts_path()
    if known.exists():
        conn.client.load_host_keys(str(known))
    where = endpoint.where
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        raise TargetError(
            f"{where}: host key does not match {known}", "someone may be intercepting; check the key and update it"
        ) from None
    except paramiko.AuthenticationException:
        raise TargetError(f"{where}: SSH authentication failed", "check ansible_user and the private key") from None
    except _UnknownHostKey:
        raise TargetError(
            f"{where}: host key is not in {known}", "add it (ssh-keyscan, checked by hand) or set dlinfra_known_hosts"
        ) from None
    except paramiko.SSHException as exc:
        raise TargetError(f"{where}: SSH failed: {exc}") from None
    except (TimeoutError, OSError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise Unreachable(f"{where} is unreachable: {reason}", "is the host up and its sshd running?") from None
    transport = conn.client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return conn
