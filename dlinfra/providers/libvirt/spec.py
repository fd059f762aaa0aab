"""What a campaign asks of one guest, parsed and checked for shape (not yet against a host).

Host checks (does CPU 7 exist, is the GPU bound to vfio-pci) live in
``provider.validate`` and ``passthrough``; this module only says whether the
request is well formed, so bad input fails before anything touches libvirt.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlinfra.errors import SpecError
from dlinfra.payload.cpuset import CpuSetError, parse_cpuset
from dlinfra.providers.options import Option, check_options
from dlinfra.text import excerpt, plain

Emulation = Literal["never", "allow", "require"]
NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
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
        """The declared fields (:data:`GUEST_OPTIONS`) of a guest made in code, as a spec's are checked."""
        scalars = {k: getattr(self, k) for k in ("name", "vcpus", "memory_mib", "numa_node", "hugepages", "emulation")}
        check_options(GUEST_OPTIONS, scalars, "guest" if not isinstance(self.name, str) else f"guest {self.name}")

    @classmethod
    def from_dict(cls, data: dict, where: str = "guest") -> GuestSpec:
        """Build from a campaign mapping (``cpuset: "2-3"``, ``devices: ["10de:1b80"]``, ``memory_mib: 2048``)."""
        known = GUEST_FIELDS
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)}", f"known: {', '.join(sorted(known))}")
        if "name" not in data:
            raise SpecError(f"{where}: name is missing")
        check_options(GUEST_OPTIONS, data, where)
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


_URI = re.compile(r"[a-z][a-z0-9+]{0,19}://[^\s'\"`$;|&<>]{0,235}", re.ASCII)
_POOL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", re.ASCII)

#: The fields of one guest, as ``layer_options.vm`` (their defaults for every guest) and each entry of its
#: ``guests`` take them; :meth:`GuestSpec.from_dict` makes the guest.
GUEST_OPTIONS: dict[str, Option] = {
    "name": Option("the guest's name (1-31 of a-z, 0-9, '-'); only in guests entries", "str", "vm1",
                   pattern=NAME_RE, shape="a guest name (1-31 of a-z, 0-9 and '-')"),
    "vcpus": Option("vCPUs", "int", 1, low=1, high=1024),
    "memory_mib": Option("memory in MiB", "int", 1024, low=128, high=16 << 20),
    "cpuset": Option("host CPUs the vCPUs are pinned to, one per vCPU in order ('2-5')", "cpuset"),
    "emulator_cpuset": Option("host CPUs of QEMU's own threads", "cpuset"),
    "numa_node": Option("host NUMA node the memory is bound to", "int", low=0, high=1023),
    "hugepages": Option("back the memory with hugepages", "bool", False),
    "devices": Option("PCI devices to pass through: addresses (0000:01:00.0) or vendor:product (10de:1b80)",
                      "list"),
    "emulation": Option("never (KVM only), allow (QEMU TCG where KVM cannot run it) or require", "choice", "never",
                        choices=("never", "allow", "require")),
}  # fmt: skip
#: The fields a campaign may set on a guest (``extra`` is for callers in code, not for specs).
GUEST_FIELDS = frozenset(GUEST_OPTIONS)

#: The provider settings of ``layer_options.vm`` (besides the guest fields).
PROVIDER_OPTIONS: dict[str, Option] = {
    "uri": Option("libvirt URI of every hypervisor (a host's dlinfra_libvirt_uri wins; default: qemu:///system "
                  "for a host of this machine, a remote host must name its own)", "str", pattern=_URI,
                  shape="a libvirt URI"),
    "pool": Option("storage pool of the guests' volumes (a name, not a path)", "str", "dlinfra", pattern=_POOL,
                   shape="a storage pool name"),
    "subnet": Option("IPv4 network of the run's guests, /16 to /29 (default: a free /24)", "str"),
    "boot_timeout": Option("how long a guest may take to answer SSH", "number", 900, low=1, high=86_400,
                           unit="seconds"),
    "cloud_image": Option("a qcow2 or raw cloud image with its own bootloader and cloud-init, instead of "
                          "dlinfra's guest image", "path"),
}  # fmt: skip


def guests_from_options(options: Mapping[str, Any], where: str) -> list[GuestSpec]:
    """The guests ``layer_options.vm`` asks for on one host: its ``guests`` (default one, ``vm1``), each with the
    guest fields given beside them as defaults. Errors name ``where.guests[i]``."""
    guests = options.get("guests")
    if guests is not None and (not isinstance(guests, list) or not all(isinstance(g, dict) for g in guests)):
        raise SpecError(f"{where}.guests: must be a list of mappings", "e.g. guests: [{name: vm1}]")
    defaults = {k: v for k, v in options.items() if k in GUEST_FIELDS and k != "name"}
    out = []
    for i, guest in enumerate(guests or [{"name": "vm1"}]):
        at = f"{where}.guests[{i}]"
        try:
            out.append(GuestSpec.from_dict({**defaults, **guest}, at))
        except SpecError as exc:
            raise SpecError(exc.message if exc.message.startswith(at) else f"{at}: {exc.message}", exc.hint) from None
    return out


def check_provider_options(options: Mapping[str, Any], where: str) -> None:
    """``uri``, ``pool``, ``subnet``, ``boot_timeout`` and ``cloud_image`` as a guest bring-up will use them: the
    one check, run by ``--dry-run`` and by the bring-up alike (a value bring-up refuses never passes a dry run)."""
    check_options(PROVIDER_OPTIONS, options, where)
    if "subnet" in options:
        try:
            net = ipaddress.ip_network(str(options["subnet"]))
        except ValueError:
            raise SpecError(
                f"{where}.subnet: {excerpt(options['subnet'], 60)} is not a network", "e.g. 10.214.7.0/24"
            ) from None
        if net.version != 4 or not 16 <= net.prefixlen <= 29:
            raise SpecError(f"{where}.subnet: {net} must be an IPv4 network of /16 to /29")
    if options.get("cloud_image") is not None:
        path = Path(str(options["cloud_image"])).expanduser()
        if not path.is_file():  # a device (/dev/urandom) or a folder is not an image
            raise SpecError(
                f"{where}.cloud_image: {plain(path, 200, tail=True)} is not a file",
                "give the path of a qcow2 or raw cloud image",
            )
