"""The ``libvirt`` provider of the ``vm`` layer: one :class:`Hypervisor` per inventory host that carries vm.

Why a provider over :class:`Hypervisor`: a Hypervisor drives one libvirt URI;
a campaign names inventory hosts. This module maps each host to its URI
(``dlinfra_libvirt_uri``), gives every guest a name unique across hosts, builds
the guest image once (with the payload baked in from the same wheelhouse as
``bm``, so deploying to a fresh guest only verifies it, and, when ctr-vm will
run in the guests, with the payload image already in the guest's Docker store)
and tears down every
host's guests, even when one host failed to come up.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlinfra.errors import DlinfraError, SpecError
from dlinfra.images.deps_archive import build_deps_archive
from dlinfra.inventory import InventoryHost
from dlinfra.providers.base import LayerSpec, Provider, Target
from dlinfra.providers.containers.image import build_payload_image, save_image
from dlinfra.providers.containers.provider import controller_engine
from dlinfra.providers.host_prep import HostToPrepare, controller, prepare
from dlinfra.providers.libvirt.hypervisor import DEFAULT_POOL, LOCAL_URIS, Hypervisor, hypervisor_ready
from dlinfra.providers.libvirt.image import GuestImage, build_guest_image
from dlinfra.providers.libvirt.spec import GUEST_OPTIONS, PROVIDER_OPTIONS, check_provider_options, guests_from_options
from dlinfra.providers.libvirt.sweeping import discover_libvirt_runs, sweep_libvirt_run
from dlinfra.providers.options import Option
from dlinfra.runtime.progress import phase, say

if TYPE_CHECKING:
    from dlinfra.runtime.sweep_report import SweepReport


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


class LibvirtVmProvider(Provider):
    """Guests on every inventory host that carries ``vm``; ``down`` removes them all."""

    name = "libvirt"
    layers: ClassVar[Mapping[str, str | None]] = {"vm": None}
    options: ClassVar[Mapping[str, Option]] = {
        **PROVIDER_OPTIONS,
        **GUEST_OPTIONS,  # here: the default of every guest
        "guests": Option("the guests of each host (default one, vm1), each a mapping of the guest fields", "list"),
    }

    def __init__(self, layer: str = "vm") -> None:
        super().__init__(layer)
        self.hypervisors: list[Hypervisor] = []  # one per host: its libvirtd, pool and guests
        self._hosts: list[InventoryHost] = []
        self._image: Any = None

    @classmethod
    def validate(cls, layer: str, options: Mapping[str, Any], where: str) -> None:
        super().validate(layer, options, where)
        check_provider_options(options, where)
        guests_from_options(options, where)  # every value checked as a guest will use it

    @classmethod
    def targets_per_host(cls, options: Mapping[str, Any]) -> int:
        guests = options.get("guests")
        return len(guests) if isinstance(guests, list) and guests else 1

    def create_dependencies(self, spec: LayerSpec) -> None:
        """Every hypervisor answers, then the guest image is built (once, cached by its inputs)."""
        self._hosts = [h for h in spec.hosts if self.layer in h.layers]
        if not self._hosts:
            raise SpecError(f"inventory {spec.inventory} has no host that carries layer vm", "add vm to dlinfra_layers")
        default_uri = spec.options.get("uri")
        uris = {h.name: libvirt_uri(h, default_uri) for h in self._hosts}  # every host checked before any guest
        pool = {key: str(spec.options[key]) for key in ("pool",) if key in spec.options}
        hypervisors = [_hypervisor(h, uris[h.name], pool.get("pool")) for h in self._hosts]
        ready = [h for h in hypervisors if _ready(h)]
        if ready:
            names = ", ".join(sorted({h.name for h in ready}))
            say(f"vm: hypervisor {names} ready (libvirtd, virtlogd, pool): no playbook")
        prepare([h for h in hypervisors if h not in ready], artifacts_dir=spec.artifacts_dir)
        self.hypervisors = [Hypervisor(uris[h.name], physical_host=h.name, **pool) for h in self._hosts]
        for hypervisor in self.hypervisors:
            hypervisor.conn  # noqa: B018 - every hypervisor answers before minutes go into an image
        self._image = None if spec.options.get("cloud_image") else campaign_guest_image(spec)

    def create(self, spec: LayerSpec) -> list[Target]:
        options = {k: v for k, v in spec.options.items() if k not in ("uri", "provider")}
        targets: list[Target] = []
        for host, hypervisor in zip(self._hosts, self.hypervisors, strict=True):
            hypervisor.image = self._image
            host_options = {**options, "guests": _guests_for(host, options, len(self._hosts))}
            hypervisor.configure(host_options, spec.artifacts_dir)
            with phase(f"vm: guests on {host.name}", f"boot timeout {hypervisor.boot_timeout:g} s"):
                targets += hypervisor.up_guests(guests_from_options(host_options, "layer_options.vm"))
        for target in targets:
            target.groups = list(next(h.groups for h in self._hosts if h.name == target.physical_host))
        return targets

    def delete(self) -> None:
        for hypervisor in self.hypervisors:
            try:
                hypervisor.down()
            finally:
                hypervisor.close()
        self.hypervisors = []

    @classmethod
    def sweep(cls, label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
        sweep_libvirt_run(label, objects, report)

    @classmethod
    def discover(cls) -> dict[str, list[dict[str, Any]]]:
        return discover_libvirt_runs()


def _hypervisor(host: InventoryHost, uri: str, pool: str | None) -> HostToPrepare:
    """The host the libvirt_host role prepares for ``uri``: this machine for a local URI, else ``host`` over SSH."""
    settings = {"pool_name": pool} if pool else {}
    if uri in LOCAL_URIS:
        return controller("libvirt", uri=uri, **settings)
    reach = {**host.ssh.ansible_vars(), **{k: v for k, v in host.vars.items() if k.startswith("ansible_become")}}
    reach["ansible_python_interpreter"] = host.vars.get("ansible_python_interpreter", "auto_silent")
    return HostToPrepare(host.name, "libvirt", reach, settings)


def _ready(host: HostToPrepare) -> bool:
    """Whether ``host`` needs no ``libvirt_host`` playbook: this machine, already in the role's present state."""
    return host.reach.get("ansible_connection") == "local" and hypervisor_ready(
        str(host.settings.get("uri", "")), str(host.settings.get("pool_name", DEFAULT_POOL))
    )


def _guests_for(host: InventoryHost, options: dict[str, Any], host_count: int) -> list[dict[str, Any]]:
    """The guests asked for (default one, ``vm1``), named after their host when several hosts carry vm."""
    raw = options.get("guests") or [{"name": "vm1"}]
    if not isinstance(raw, list) or not all(isinstance(g, dict) for g in raw):
        raise SpecError("layer_options.vm.guests must be a list of mappings", "e.g. guests: [{name: vm1}]")
    if host_count == 1:
        return raw
    return [{**g, "name": f"{host.name}-{g.get('name', f'vm{i + 1}')}"} for i, g in enumerate(raw)]


def campaign_guest_image(spec: LayerSpec) -> GuestImage:
    """The guest image of a campaign's vm layer, whichever provider boots it (libvirt, nova): the payload baked
    in, and the payload image's dependencies in its Docker store when ctr-vm runs in the guests."""
    if spec.wheelhouse is None:
        raise DlinfraError("layer vm: LayerSpec.wheelhouse is required (the campaign builds it once)")
    docker_image = None
    if "ctr-vm" in spec.stacked:
        with phase("vm: payload dependencies image for ctr-vm"):
            docker_image = _payload_docker_image(spec.wheelhouse)
    with phase("vm: guest image", "built once, then cached by its inputs"):
        return build_guest_image(payload=spec.wheelhouse, docker_image=docker_image)


def _payload_docker_image(wheelhouse: Any) -> Path:
    """The ctr-vm payload image's dependencies layer, saved: the guest image carries it in its own Docker store.

    Not the payload image itself: that one changes with every source edit, and the guest image keyed by it was
    rebuilt each time. The ctr-vm bring-up ships the layer above (dlinfra's own, kilobytes to megabytes)."""
    engine = controller_engine("docker")
    archive = build_deps_archive(wheelhouse)
    built = build_payload_image(engine, wheelhouse.path, wheelhouse.lock, deps_archive=archive)
    return save_image(engine, built.deps_tag)
