"""How commands and files reach a target: one :class:`Transport` interface, SSH and exec-in-container.

Why one interface: the run engine (deploy, launch, fetch) must not care whether
a target is a host, a guest, a container on a host or a container in a guest.
A target says how it is reached (:meth:`dlinfra.providers.base.Target.transport`);
everything after provisioning speaks only :class:`Transport`.
"""

from dlinfra.transport.base import CommandResult, LinkLost, Transport, TransportPool
from dlinfra.transport.container import ContainerAccess, ContainerTransport
from dlinfra.transport.ssh import SshEndpoint, SshTransport, remote_command

__all__ = [
    "CommandResult",
    "ContainerAccess",
    "ContainerTransport",
    "LinkLost",
    "SshEndpoint",
    "SshTransport",
    "Transport",
    "TransportPool",
    "remote_command",
]
