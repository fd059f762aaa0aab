"""What a campaign asks of one guest, parsed and checked for shape (not yet against a host).

Host checks (does CPU 7 exist, is the GPU bound to vfio-pci) live in
``provider.validate`` and ``passthrough``; this module only says whether the
request is well formed, so bad input fails before anything touches libvirt.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from dlinfra.errors import SpecError
from dlinfra.payload.cpuset import CpuSetError, parse_cpuset
from dlinfra.text import excerpt, plain

Emulation = Literal["never", "allow", "require"]
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
PCI_ADDRESS_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])$"
)
VENDOR_PRODUCT_RE = re.compile(r"^(?P<vendor>[0-9a-fA-F]{4}):(?P<product>[0-9a-fA-F]{4})$")


def _cpuset(value: object, where: str) -> tuple[int, ...]:
    """An optional CPU set field (``"0-3,6"`` or a list of ints; absent or empty is none), its error naming it."""
    if value is None or value == "":
        return ()
    try:
        return parse_cpuset(value)
    except CpuSetError as exc:
        raise SpecError(f"{where}: {exc}", "write it like 0-3,6") from None


@dataclass(frozen=True)
class PciAddress:
    """A PCI function, ``0000:01:00.0``."""

    domain: int
    bus: int
    slot: int
    function: int

    @classmethod
    def parse(cls, text: str, where: str = "pci address") -> PciAddress:
        match = PCI_ADDRESS_RE.match(text.strip())
        if not match:
            raise SpecError(f"{where}: {text!r} is not a PCI address", "write it like 0000:01:00.0 (see lspci -D)")
        return cls(
            int(match.group("domain") or "0", 16),
            int(match.group("bus"), 16),
            int(match.group("slot"), 16),
            int(match.group("function")),
        )

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"


@dataclass(frozen=True)
class DeviceRequest:
    """A PCI device to pass through: by address, or by ``vendor:product`` (resolved on the host)."""

    address: PciAddress | None = None
    vendor: str | None = None
    product: str | None = None

    @classmethod
    def parse(cls, text: str, where: str = "devices") -> DeviceRequest:
        text = str(text).strip()
        vp = VENDOR_PRODUCT_RE.match(text)
        if vp and not PCI_ADDRESS_RE.match(text):
            return cls(vendor=vp.group("vendor").lower(), product=vp.group("product").lower())
        if PCI_ADDRESS_RE.match(text):
            return cls(address=PciAddress.parse(text, where))
        raise SpecError(
            f"{where}: {text!r} is neither a PCI address nor vendor:product",
            "write 0000:01:00.0 or 10de:1b80 (see lspci -Dnn)",
        )

    def __str__(self) -> str:
        return str(self.address) if self.address else f"{self.vendor}:{self.product}"


@dataclass(frozen=True)
class GuestSpec:
    """One guest: size, placement on host CPUs and NUMA, devices, and whether emulation is acceptable.

    ``emulation``: ``never`` (default, KVM only), ``allow`` (KVM when the host
    offers it, else software emulation), ``require`` (always emulate: hosts where
    /dev/kvm exists but cannot run guests). An emulated guest's results are
    marked ``emulated`` so no report compares them silently with KVM.
    """

    name: str
    vcpus: int = 1
    memory_mib: int = 1024
    cpuset: tuple[int, ...] = ()
    emulator_cpuset: tuple[int, ...] = ()
    numa_node: int | None = None
    hugepages: bool = False
    devices: tuple[DeviceRequest, ...] = ()
    emulation: Emulation = "never"
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"guest {self.name!r}"
        if not NAME_RE.match(self.name):
            raise SpecError(f"guest name {self.name!r} is invalid", "use 1-31 of a-z, 0-9 and '-'")
        if not isinstance(self.vcpus, int) or self.vcpus < 1:
            raise SpecError(f"{where}: vcpus must be an integer >= 1, not {self.vcpus!r}")
        if not isinstance(self.memory_mib, int) or self.memory_mib < 128:
            raise SpecError(f"{where}: memory_mib must be an integer >= 128, not {self.memory_mib!r}")
        if self.emulation not in ("never", "allow", "require"):
            raise SpecError(f"{where}: emulation must be never, allow or require, not {self.emulation!r}")
        if self.numa_node is not None and (not isinstance(self.numa_node, int) or self.numa_node < 0):
            raise SpecError(f"{where}: numa_node must be an integer >= 0, not {self.numa_node!r}")

    @classmethod
    def from_dict(cls, data: dict, where: str = "guest") -> GuestSpec:
        """Build from a campaign mapping (``cpuset: "2-3"``, ``devices: ["10de:1b80"]``, ``memory_mib: 2048``)."""
        known = GUEST_FIELDS
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)}", f"known: {', '.join(sorted(known))}")
        if "name" not in data:
            raise SpecError(f"{where}: name is missing")
        return cls(
            name=str(data["name"]),
            vcpus=data.get("vcpus", 1),
            memory_mib=data.get("memory_mib", 1024),
            cpuset=_cpuset(data.get("cpuset"), f"{where}.cpuset"),
            emulator_cpuset=_cpuset(data.get("emulator_cpuset"), f"{where}.emulator_cpuset"),
            numa_node=data.get("numa_node"),
            hugepages=bool(data.get("hugepages", False)),
            devices=tuple(DeviceRequest.parse(d, f"{where}.devices") for d in data.get("devices", ())),
            emulation=data.get("emulation", "never"),
        )


#: The fields a campaign may set on a guest (the dataclass is the single source of truth;
#: ``extra`` is for callers in code, not for specs).
GUEST_FIELDS = frozenset(f.name for f in fields(GuestSpec)) - {"extra"}


#: The provider settings of ``layer_options.vm`` (besides the guest fields), each with what it must be.
PROVIDER_OPTIONS = frozenset({"uri", "pool", "subnet", "boot_timeout", "cloud_image"})
_URI = re.compile(r"[a-z][a-z0-9+]{0,19}://[^\s'\"`$;|&<>]{0,235}", re.ASCII)
_POOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", re.ASCII)


def check_provider_options(options: Mapping[str, Any], where: str) -> None:
    """``uri``, ``pool``, ``subnet``, ``boot_timeout`` and ``cloud_image`` as a guest bring-up will use them: the
    one check, run by ``--dry-run`` and by the bring-up alike (a value bring-up refuses never passes a dry run)."""
    if "uri" in options and not (isinstance(options["uri"], str) and _URI.fullmatch(options["uri"])):
        raise SpecError(f"{where}.uri: {excerpt(options['uri'], 60)} is not a libvirt URI", "e.g. qemu:///system")
    if "pool" in options and not (isinstance(options["pool"], str) and _POOL.fullmatch(options["pool"])):
        raise SpecError(
            f"{where}.pool: {excerpt(options['pool'], 60)} is not a storage pool name",
            "letters, digits, '.', '_', '-' (a name, not a path)",
        )
    if "subnet" in options:
        try:
            net = ipaddress.ip_network(str(options["subnet"]))
        except ValueError:
            raise SpecError(
                f"{where}.subnet: {excerpt(options['subnet'], 60)} is not a network", "e.g. 10.214.7.0/24"
            ) from None
        if net.version != 4 or not 16 <= net.prefixlen <= 29:
            raise SpecError(f"{where}.subnet: {net} must be an IPv4 network of /16 to /29")
    if "boot_timeout" in options:
        value = options["boot_timeout"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 86_400:
            raise SpecError(f"{where}.boot_timeout: {excerpt(value, 40)} must be 1 to 86400 seconds")
    if options.get("cloud_image") is not None:
        path = Path(str(options["cloud_image"])).expanduser()
        if not path.is_file():  # a device (/dev/urandom) or a folder is not an image
            raise SpecError(
                f"{where}.cloud_image: {plain(path, 200, tail=True)} is not a file",
                "give the path of a qcow2 or raw cloud image",
            )
