"""The ``vm`` layer as the run engine sees it: one :class:`LibvirtProvider` per inventory host that carries vm.

Why a layer over the provider: the provider drives one hypervisor (one libvirt
URI); a campaign names inventory hosts. This module maps each host to its URI
(``dlinfra_libvirt_uri``), gives every guest a name unique across hosts, builds
the guest image once (with the payload baked in from the same wheelhouse as
``bm``, so deploying to a fresh guest only verifies it, and, when ctr-vm will
run in the guests, with the payload image already in the guest's Docker store)
and tears down every
host's guests, even when one host failed to come up.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from dlinfra.errors import SpecError
from dlinfra.inventory import InventoryHost
from dlinfra.orchestration.progress import phase
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.libvirt.provider import LibvirtProvider


def libvirt_uri(host: InventoryHost, default: str | None = None) -> str:
    """The hypervisor URI of an inventory host (its ``dlinfra_libvirt_uri``, else ``layer_options.vm.uri``);
    local hosts default to ``qemu:///system``."""
    uri = host.vars.get("dlinfra_libvirt_uri") or default
    if uri:
        return str(uri)
    try:
        local = ipaddress.ip_address(host.address).is_loopback
    except ValueError:
        local = host.address == "localhost"
    if local or host.vars.get("dlinfra_netns"):
        return "qemu:///system"
    raise SpecError(
        f"host {host.name}: carries layer vm but has no dlinfra_libvirt_uri",
        "set it (e.g. qemu:///system when dlinfra runs on that host; guests sit on its NAT network, "
        "so the controller must be that host or route to the guest subnet)",
    )


class LibvirtLayer:
    """Guests on every inventory host that carries ``vm``; ``down`` removes them all."""

    layer = "vm"

    def __init__(self) -> None:
        self.providers: list[LibvirtProvider] = []
        self.targets: list[Target] = []

    def up(self, spec: LayerSpec) -> list[Target]:
        if self.targets:
            return self.targets
        hosts = [h for h in spec.hosts if "vm" in h.layers]
        if not hosts:
            raise SpecError(f"inventory {spec.inventory} has no host that carries layer vm", "add vm to dlinfra_layers")
        options = dict(spec.options)
        default_uri = options.pop("uri", None)
        uris = {h.name: libvirt_uri(h, default_uri) for h in hosts}  # every host checked before any guest exists
        self.providers = [LibvirtProvider(uris[h.name], physical_host=h.name) for h in hosts]
        try:
            for provider in self.providers:
                provider.conn  # noqa: B018 - every hypervisor answers before minutes go into an image
            image = None if options.get("cloud_image") else self._image(spec)
            for host, provider in zip(hosts, self.providers, strict=True):
                provider.image = image
                host_options = {**options, "guests": _guests_for(host, options, len(hosts))}
                with phase(f"vm: guests on {host.name}", f"boot timeout {options.get('boot_timeout', 300)} s"):
                    layer_spec = LayerSpec("vm", [host], spec.inventory, host_options, spec.artifacts_dir)
                    self.targets += provider.up(layer_spec)
        except BaseException:
            self.down()
            raise
        for target in self.targets:
            target.details = {k: target.facts[k] for k in _DETAILS if k in target.facts}
        return self.targets

    @staticmethod
    def _image(spec: LayerSpec) -> Any:
        """The guest image with the campaign's payload baked in (and the ctr-vm image when stacked)."""
        from dlinfra.orchestration.wheelhouse import build_wheelhouse
        from dlinfra.providers.libvirt.image import build_guest_image

        wheelhouse = spec.wheelhouse or build_wheelhouse()
        docker_image = None
        if "ctr-vm" in spec.stacked:
            with phase("vm: payload image for ctr-vm"):
                docker_image = _payload_docker_image(wheelhouse)
        with phase("vm: guest image", "built once, then cached by its inputs"):
            return build_guest_image(payload=wheelhouse, docker_image=docker_image)

    def down(self) -> None:
        for provider in self.providers:
            try:
                provider.down()
            finally:
                provider.close()
        self.providers = []
        self.targets = []


#: Target facts every vm record carries (what the guest was, and where its vCPUs ran).
_DETAILS = (
    "domain",
    "virt_type",
    "kvm_refused",  # why KVM did not start the guest, when emulation: allow fell back to TCG
    "vcpus",
    "host_cpuset",
    "emulator_cpuset",
    "numa_node",
    "hugepages",
    "pci_devices",
    "boot_to_ssh_s",
)


def _guests_for(host: InventoryHost, options: dict[str, Any], host_count: int) -> list[dict[str, Any]]:
    """The guests asked for (default one, ``vm1``), named after their host when several hosts carry vm."""
    raw = options.get("guests") or [{"name": "vm1"}]
    if not isinstance(raw, list) or not all(isinstance(g, dict) for g in raw):
        raise SpecError("layer_options.vm.guests must be a list of mappings", "e.g. guests: [{name: vm1}]")
    if host_count == 1:
        return raw
    return [{**g, "name": f"{host.name}-{g.get('name', f'vm{i + 1}')}"} for i, g in enumerate(raw)]


def _payload_docker_image(wheelhouse: Any) -> tuple[Any, str]:
    """The ctr-vm payload image, saved: the guest image then carries it in its own Docker store."""
    from dlinfra.providers.containers.image import build_payload_image, save_image
    from dlinfra.providers.containers.provider import controller_engine

    engine = controller_engine("docker")
    built = build_payload_image(engine, wheelhouse.path, wheelhouse.lock)
    return save_image(engine, built.tag), built.tag
