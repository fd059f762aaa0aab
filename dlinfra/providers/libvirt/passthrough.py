"""Host checks for PCI passthrough, read from sysfs (a root that tests point at recorded trees).

libvirt reports passthrough problems late and obscurely (at domain start, as a
QEMU error about VFIO). Checking first, on the host's own sysfs, turns them into
one message naming the host, the device and the fix:

* the IOMMU is on: ``/sys/kernel/iommu_groups`` has groups;
* the device exists: ``/sys/bus/pci/devices/0000:bb:dd.f``;
* ``vendor:product`` resolves to device addresses;
* every other endpoint in the device's IOMMU group is passed too, or bound to
  ``vfio-pci`` (or to no driver); PCI bridges in the group are fine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dlinfra.errors import TargetError
from dlinfra.providers.libvirt.spec import DeviceRequest, PciAddress

VFIO_SAFE_DRIVERS = {"vfio-pci", "pci-stub"}
BRIDGE_CLASS_PREFIX = "0x0604"  # PCI-to-PCI bridge / PCIe root port: may stay with the host
HINT_IOMMU = "enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on iommu=pt (see docs/gpu-passthrough.md)"


@dataclass(frozen=True)
class PciDevice:
    """What sysfs says about one PCI function."""

    address: PciAddress
    vendor: str
    product: str
    pci_class: str
    driver: str | None
    iommu_group: str | None


class SysfsHost:
    """PCI and IOMMU facts of one host, read under ``root`` (``/`` on the host itself)."""

    def __init__(self, host: str, root: str | Path = "/") -> None:
        self.host = host
        self.root = Path(root)
        self.devices_dir = self.root / "sys/bus/pci/devices"
        self.groups_dir = self.root / "sys/kernel/iommu_groups"

    def _read(self, path: Path) -> str:
        try:
            return path.read_text().strip().lower()
        except OSError:
            return ""

    def iommu_enabled(self) -> bool:
        """True when the kernel has IOMMU groups (IOMMU on in firmware and on the kernel command line)."""
        return self.groups_dir.is_dir() and any(self.groups_dir.iterdir())

    def device(self, address: PciAddress) -> PciDevice | None:
        """The device at ``address``, or None when the host has none there."""
        path = self.devices_dir / str(address)
        if not path.exists():
            return None
        driver_link = path / "driver"
        group_link = path / "iommu_group"
        return PciDevice(
            address=address,
            vendor=self._read(path / "vendor").removeprefix("0x"),
            product=self._read(path / "device").removeprefix("0x"),
            pci_class=self._read(path / "class"),
            driver=os.path.basename(os.readlink(driver_link)) if driver_link.is_symlink() else None,
            iommu_group=os.path.basename(os.readlink(group_link)) if group_link.is_symlink() else None,
        )

    def all_devices(self) -> list[PciDevice]:
        if not self.devices_dir.is_dir():
            return []
        found = [self.device(PciAddress.parse(name)) for name in sorted(os.listdir(self.devices_dir))]
        return [d for d in found if d is not None]

    def group_members(self, group: str) -> list[PciAddress]:
        path = self.groups_dir / group / "devices"
        if not path.is_dir():
            return []
        return [PciAddress.parse(name) for name in sorted(os.listdir(path))]

    def resolve(self, request: DeviceRequest) -> list[PciAddress]:
        """The addresses a request names: itself, or every function with that ``vendor:product``."""
        if request.address is not None:
            return [request.address]
        matches = [d.address for d in self.all_devices() if (d.vendor, d.product) == (request.vendor, request.product)]
        if not matches:
            raise TargetError(
                f"{self.host}: no PCI device {request} found",
                "check the vendor:product with 'lspci -nn' on that host",
            )
        return matches


def check_passthrough(host: SysfsHost, requests: tuple[DeviceRequest, ...] | list[DeviceRequest]) -> list[PciDevice]:
    """Resolve and check every requested device on ``host``; raise one clear TargetError at the first problem."""
    if not requests:
        return []
    if not host.iommu_enabled():
        raise TargetError(f"{host.host}: the IOMMU is off, so {requests[0]} cannot be passed through", HINT_IOMMU)
    addresses: list[PciAddress] = []
    for request in requests:
        for address in host.resolve(request):
            if address not in addresses:
                addresses.append(address)
    devices: list[PciDevice] = []
    for address in addresses:
        device = host.device(address)
        if device is None:
            raise TargetError(
                f"{host.host}: PCI device {address} does not exist",
                "list the host's devices with 'lspci -D' and fix the address in the campaign",
            )
        if device.iommu_group is None:
            raise TargetError(f"{host.host}: PCI device {address} is in no IOMMU group", HINT_IOMMU)
        devices.append(device)
    passed = set(addresses)
    for device in devices:
        for member in host.group_members(device.iommu_group or ""):
            if member in passed:
                continue
            other = host.device(member)
            if other is None or other.pci_class.startswith(BRIDGE_CLASS_PREFIX):
                continue
            if other.driver is None or other.driver in VFIO_SAFE_DRIVERS:
                continue
            raise TargetError(
                f"{host.host}: PCI device {device.address} shares IOMMU group {device.iommu_group} with "
                f"{member} (driver {other.driver}), which is neither passed through nor bound to vfio-pci",
                f"pass {member} to the same guest too, or bind it to vfio-pci (see docs/gpu-passthrough.md)",
            )
    return devices
