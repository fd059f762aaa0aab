"""The ``vm`` layer through libvirt: guest images, seeds, domains, PCI passthrough checks, per-run networks."""

from __future__ import annotations

from dlinfra.providers.libvirt.spec import DeviceRequest, GuestSpec, PciAddress

__all__ = ["DeviceRequest", "GuestSpec", "LibvirtVmProvider", "PciAddress"]


def __getattr__(name: str):  # the provider imports libvirt lazily: keep the package importable without it
    if name == "LibvirtVmProvider":
        from dlinfra.providers.libvirt.provider import LibvirtVmProvider

        return LibvirtVmProvider
    raise AttributeError(name)
