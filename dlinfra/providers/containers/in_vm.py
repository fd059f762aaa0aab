"""The ``ctr-vm`` layer: the container provider, run with the ``vm`` layer's guests as its hosts.

The guests come from ``LayerSpec.below`` when the campaign also measures
``vm`` (same guests, so vm and ctr-vm differ only by the container), otherwise
this layer brings up its own guests with ``layer_options.vm``. Each guest is
handed to :class:`ContainerProvider` as an inventory host reached over the
guest's own SSH (its seeded host key, its login user, who may use the guest's
socket-activated dockerd); the payload image is the same one ``ctr`` ships.
"""

from __future__ import annotations

from typing import Any

from dlinfra.inventory import InventoryHost
from dlinfra.payload.cpuset import format_cpuset
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.containers.provider import ContainerProvider


def guest_as_host(guest: Target) -> InventoryHost:
    """An inventory host that reaches ``guest`` exactly as the run engine does."""
    hv: dict[str, Any] = {
        "ansible_user": guest.user,
        "ansible_port": guest.port,
        "dlinfra_known_hosts": guest.known_hosts,
        "dlinfra_layers": ["ctr-vm"],
        "dlinfra_home": guest.home,
        "dlinfra_container_engine": "docker",
    }
    if guest.key_file:
        hv["ansible_ssh_private_key_file"] = guest.key_file
    if guest.cpu_set:
        hv["dlinfra_cpus"] = format_cpuset(guest.cpu_set)
    return InventoryHost(name=guest.name, address=guest.address, groups=[], vars=hv)


class ContainersInVmProvider:
    """Payload containers inside guests; ``down`` removes the containers, then any guests it made itself."""

    layer = "ctr-vm"

    def __init__(self) -> None:
        self.containers = ContainerProvider(layer="ctr-vm")
        self.own_vms: Any = None
        self.targets: list[Target] = []

    def up(self, spec: LayerSpec) -> list[Target]:
        if self.targets:
            return self.targets
        guests = spec.below
        if guests is None:
            from dlinfra.providers.libvirt.layer import LibvirtLayer

            self.own_vms = LibvirtLayer()
            guests = self.own_vms.up(
                LayerSpec(
                    "vm",
                    spec.hosts,
                    spec.inventory,
                    spec.below_options,
                    spec.artifacts_dir,
                    wheelhouse=spec.wheelhouse,
                    stacked=["ctr-vm"],
                )
            )
        by_name = {g.name: g for g in guests}
        options = {"engine": "docker", **spec.options}
        hosts = [guest_as_host(g) for g in guests]
        self.targets = self.containers.up(
            LayerSpec("ctr-vm", hosts, spec.inventory, options, spec.artifacts_dir, wheelhouse=spec.wheelhouse)
        )
        for target in self.targets:  # results are grouped by the real machine, and inherit the guest's emulation
            guest = by_name[target.physical_host]
            target.physical_host = guest.physical_host
            target.emulated = guest.emulated
            target.details["guest"] = {"name": guest.name, **guest.details}
            target.facts["guest"] = guest.name
        return self.targets

    def down(self) -> None:
        try:
            self.containers.down()
        finally:
            if self.own_vms is not None:
                self.own_vms.down()
                self.own_vms = None
            self.targets = []
