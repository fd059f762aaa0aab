"""The ``vm`` layer through libvirt: guest images, seeds, domains, PCI passthrough checks, per-run networks."""

from __future__ import annotations

from dlinfra.providers.libvirt.spec import DeviceRequest, GuestSpec, PciAddress

__all__ = ["DeviceRequest", "GuestSpec", "LibvirtVmProvider", "PciAddress"]


def __getattr__(name: str):  # the provider on first use: nova imports seed and image from here without it
    if name == "LibvirtVmProvider":
        # deferred: the provider pulls the hypervisor, host preparation and the container provider
        from dlinfra.providers.libvirt.provider import LibvirtVmProvider

        return LibvirtVmProvider
    raise AttributeError(name)
