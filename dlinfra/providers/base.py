"""What every layer hands back (a :class:`Target`) and how a layer is driven (:class:`Provider`).

Everything after provisioning speaks only of targets, so every layer is measured
by the same code path (deploy, launch, collect). A layer plugs in by
implementing the two methods of :class:`Provider`:

``up(spec: LayerSpec) -> list[Target]``
    Make the layer's targets exist on ``spec.hosts`` (the inventory hosts that
    may carry the layer), wait until each answers SSH with a host key that the
    returned ``known_hosts`` file holds, and return them. Idempotent: calling
    it on a layer already up returns the same targets. Raise
    :class:`dlinfra.errors.TargetError` naming the host on failure.

``down() -> None``
    Remove everything ``up`` made, and nothing else. Idempotent.

Rules every provider keeps: one target per place a payload process can run;
``cpu_set`` is the CPUs the payload may pin to there (cells split it between
processes that share the target); ``home`` is a folder private to that target
(the payload venv lives in ``home/venv``); ``emulated`` is true when timings
are not comparable (QEMU TCG); ``physical_host`` is the inventory name of the
machine underneath, so results can be grouped per real host. Register the
class in :data:`dlinfra.providers.PROVIDERS`.

A target need not run its own sshd. A container is reached over its host's
SSH: its ``facts`` carry ``exec_prefix`` (an argv such as ``docker exec -i
NAME``, put before every payload command), ``host_runs_dir`` (where its
``runs_dir`` is bind-mounted on the host, for fetching records over SFTP) and
``peer_address`` (what other processes of a cell dial). ``payload_in_image``
says the payload came with the target's image, so deploy only checks its hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dlinfra.inventory import InventoryHost


@dataclass
class Target:
    """An SSH-reachable place where the payload runs, on some layer."""

    layer: str
    name: str
    physical_host: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str | None = None
    cpu_set: list[int] = field(default_factory=list)
    memory_bytes: int | None = None
    devices: list[str] = field(default_factory=list)
    emulated: bool = False
    #: Folder private to this target: payload venv, wheelhouse, run files.
    home: str = ".dlinfra"
    #: Interpreter used to create the venv (the venv's own python runs the payload).
    base_python: str = "python3"
    facts: dict[str, Any] = field(default_factory=dict)
    #: What every record of this target carries as ``target_details`` (JSON-safe; no secrets).
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def python(self) -> str:
        """The payload venv's interpreter on the target."""
        return f"{self.home}/venv/bin/python"

    @property
    def runs_dir(self) -> str:
        return f"{self.home}/runs"

    @property
    def peer_address(self) -> str:
        """The address other processes of a cell reach this target at (a container's own, or the host's)."""
        return str(self.facts.get("peer_address") or self.address)

    @property
    def payload_in_image(self) -> bool:
        return bool(self.facts.get("payload_in_image", False))

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as the SSH host must run it: inside the target's container when it has one."""
        return [*self.facts.get("exec_prefix", []), *argv]

    def host_path(self, path: str) -> str:
        """Where a file under ``runs_dir`` lies on the SSH host (a container's runs_dir is a bind mount)."""
        host_runs = self.facts.get("host_runs_dir")
        if host_runs and (path == self.runs_dir or path.startswith(self.runs_dir + "/")):
            return str(host_runs) + path[len(self.runs_dir) :]
        return path

    def ansible_vars(self) -> dict[str, Any]:
        """Host variables for an inventory that reaches this target the way fabric does."""
        args = ["-o StrictHostKeyChecking=yes"]
        if self.known_hosts:
            args.insert(0, f"-o UserKnownHostsFile={self.known_hosts}")
        hv: dict[str, Any] = {
            "ansible_host": self.address,
            "ansible_port": self.port,
            "ansible_user": self.user,
            "ansible_ssh_common_args": " ".join(args),
            "ansible_python_interpreter": self.facts.get("ansible_python_interpreter", "auto_silent"),
            "dlinfra_home": self.home,
            "dlinfra_python": self.base_python,
            "dlinfra_layer": self.layer,
        }
        if self.key_file:
            hv["ansible_ssh_private_key_file"] = self.key_file
        return hv


@dataclass
class LayerSpec:
    """What a provider is asked for: one layer on some inventory hosts, with its options."""

    layer: str
    hosts: list[InventoryHost]
    inventory: Path
    options: dict[str, Any] = field(default_factory=dict)
    artifacts_dir: Path | None = None
    #: For a stacked layer (ctr-vm): the targets of the layer it runs on (vm), when the campaign brought
    #: them up already; else None, and the layer brings its own up with ``below_options``.
    below: list[Target] | None = None
    below_options: dict[str, Any] = field(default_factory=dict)
    #: The campaign's wheelhouse (one build for every layer and the deploy, so all carry the same
    #: payload hash); None: the provider builds it.
    wheelhouse: Any = None
    #: Layers the campaign will stack on this one's targets (vm: ["ctr-vm"]), so it can prepare for them.
    stacked: list[str] = field(default_factory=list)


@runtime_checkable
class Provider(Protocol):
    """A layer: ``up`` makes its targets, ``down`` removes what ``up`` made."""

    layer: str

    def up(self, spec: LayerSpec) -> list[Target]: ...

    def down(self) -> None: ...
