"""A target: one place where the payload runs, on some layer, and how it is reached.

What every provider hands back and everything after provisioning speaks of (deploy, launch, collect, the Ansible
inventories of :mod:`dlinfra.runtime.ansible`). It sits below the providers, beside the transports it opens.

Rules every target keeps: one target per place a payload process can run;
``cpu_set`` is the CPUs the payload may pin to there (cells split it between
processes sharing the target); ``home`` is a folder private to the target (the
payload venv lives in ``home/venv``); ``emulated`` is true when timings are not
comparable (QEMU TCG); ``physical_host`` names the machine underneath, so
results group per real host; ``details`` is what every record of the target
carries as ``target_details`` (JSON-safe, no secret).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlinfra.transport import ContainerAccess, ContainerTransport, SshEndpoint, SshTransport, Transport


@dataclass
class Target:
    """A place where the payload runs, on some layer, and how it is reached."""

    layer: str
    name: str
    physical_host: str
    #: Where SSH goes: the target itself, or the host of a container (see ``container``).
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str | None = None
    provider: str = ""
    cpu_set: list[int] = field(default_factory=list)
    memory_bytes: int | None = None
    devices: list[str] = field(default_factory=list)
    emulated: bool = False
    #: Folder private to this target: payload venv, wheelhouse, run files.
    home: str = ".dlinfra"
    #: Interpreter used to create the venv (the venv's own python runs the payload).
    base_python: str = "python3"
    #: Where the payload's dependencies are unpacked, shared by the targets that name the same folder on one
    #: machine (None: the role's default, ``home/deps``).
    deps_store: str | None = None
    #: Inventory groups of the host underneath: a spec's ``hosts`` patterns match them.
    groups: list[str] = field(default_factory=list)
    #: Set for a container: commands enter it through its host's SSH.
    container: ContainerAccess | None = None
    #: The address other processes of a cell dial, when not ``address`` (a container's bridge address).
    peer_ip: str | None = None
    #: Host ports published to this target, in order (a bridge container's reachable ports).
    published_ports: list[int] = field(default_factory=list)
    #: The payload came with the target's image: deploy only checks its hash.
    payload_in_image: bool = False
    #: The interpreter Ansible uses on the target.
    ansible_python: str = "auto_silent"
    #: What ``python -m dlinfra.payload identity`` reported there, once deployed or verified.
    identity: dict[str, Any] | None = None
    #: What every record of this target carries as ``target_details`` (JSON-safe; no secrets).
    details: dict[str, Any] = field(default_factory=dict)
    #: Where it reads the data sets dlinfra ships (None: ``home/datasets``; a container: its read-only mount).
    data_root: str | None = None
    #: For a container: its host, which keeps the data sets the container mounts (None: the target itself).
    data_host: Target | None = None

    @property
    def python(self) -> str:
        """The payload venv's interpreter on the target."""
        return f"{self.home}/venv/bin/python"

    @property
    def runs_dir(self) -> str:
        return f"{self.home}/runs"

    @property
    def datasets_dir(self) -> str:
        """The folder of shipped data sets, as the payload on this target sees it."""
        return self.data_root or f"{self.home}/datasets"

    @property
    def peer_address(self) -> str:
        """The address other processes of a cell reach this target at (a container's own, or the host's)."""
        return self.peer_ip or self.address

    @property
    def ssh(self) -> SshEndpoint:
        """Where SSH goes for this target (its host's sshd for a container)."""
        return SshEndpoint(self.name, self.address, self.port, self.user, self.key_file, self.known_hosts)

    def transport(self) -> Transport:
        """A new open transport to this target: SSH, and into the container when it is one."""
        link: Transport = SshTransport(self.ssh)
        if self.container is not None:
            link = ContainerTransport(link, self.container, self.name)
        return link

    def ansible_vars(self) -> dict[str, Any]:
        """Host variables for an inventory that reaches this target the way the transport does."""
        return {
            **self.ssh.ansible_vars(),
            "ansible_python_interpreter": self.ansible_python,
            "dlinfra_home": self.home,
            "dlinfra_python": self.base_python,
            "dlinfra_layer": self.layer,
            **({"dlinfra_deps_store": self.deps_store} if self.deps_store else {}),
        }
