"""Libvirt domain XML for one guest, built with ElementTree (spec values are never pasted into markup).

Everything the benchmark depends on is explicit here: vCPU and emulator
pinning, NUMA memory placement, hugepages, virtio disk and network, the
accelerator (``kvm``; ``qemu`` only for guests whose spec allows emulation) and
PCI hostdevs with ``managed='yes'`` so libvirt rebinds them to vfio-pci.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from dlinfra.payload.cpuset import format_cpuset
from dlinfra.providers.libvirt.spec import GuestSpec, PciAddress

METADATA_NS = "urn:dlinfra:run:1"
METADATA_KEY = "dlinfra"
ET.register_namespace(METADATA_KEY, METADATA_NS)


@dataclass(frozen=True)
class DomainPlan:
    """A guest with everything resolved on the host: paths, addresses, accelerator."""

    spec: GuestSpec
    domain_name: str
    run_label: str
    virt_type: str  # "kvm" or "qemu" (or "test" for libvirt's test driver)
    disk_path: str
    network: str
    mac: str
    seed_path: str | None = None
    kernel: str | None = None
    initrd: str | None = None
    cmdline: str | None = None
    host_devices: tuple[PciAddress, ...] = ()
    machine: str | None = "q35"
    serial_log: str | None = None
    extra_metadata: dict[str, str] = field(default_factory=dict)
    kvm_refused: str | None = None  # QEMU's error when KVM would not start it and emulation: allow chose TCG

    @property
    def emulated(self) -> bool:
        """True when the guest runs under software emulation (its results must say so)."""
        return self.virt_type == "qemu"


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, {k.rstrip("_"): v for k, v in attrs.items()})
    if text is not None:
        element.text = text
    return element


def _cputune(root: ET.Element, spec: GuestSpec) -> None:
    """Pin vCPU i to the i-th host CPU when there are enough, else every vCPU to the whole set."""
    if not spec.cpuset and not spec.emulator_cpuset:
        return
    tune = _sub(root, "cputune")
    if spec.cpuset:
        one_each = len(spec.cpuset) >= spec.vcpus
        for vcpu in range(spec.vcpus):
            cpus = format_cpuset((spec.cpuset[vcpu],)) if one_each else format_cpuset(spec.cpuset)
            _sub(tune, "vcpupin", vcpu=str(vcpu), cpuset=cpus)
    emulator = spec.emulator_cpuset or spec.cpuset
    _sub(tune, "emulatorpin", cpuset=format_cpuset(emulator))


def _hostdev(devices: ET.Element, address: PciAddress) -> None:
    hostdev = _sub(devices, "hostdev", mode="subsystem", type_="pci", managed="yes")
    source = _sub(hostdev, "source")
    _sub(
        source,
        "address",
        domain=f"0x{address.domain:04x}",
        bus=f"0x{address.bus:02x}",
        slot=f"0x{address.slot:02x}",
        function=f"0x{address.function:x}",
    )


def domain_xml(plan: DomainPlan) -> str:
    """The ``<domain>`` document for ``plan``."""
    spec = plan.spec
    root = ET.Element("domain", {"type": plan.virt_type})
    _sub(root, "name", plan.domain_name)
    _sub(root, "title", f"dlinfra guest {spec.name} of run {plan.run_label}")
    metadata = _sub(root, "metadata")
    meta = ET.SubElement(metadata, f"{{{METADATA_NS}}}run")
    _sub(meta, f"{{{METADATA_NS}}}label", plan.run_label)
    _sub(meta, f"{{{METADATA_NS}}}guest", spec.name)
    _sub(meta, f"{{{METADATA_NS}}}emulated", "true" if plan.emulated else "false")
    for key, value in sorted(plan.extra_metadata.items()):
        _sub(meta, f"{{{METADATA_NS}}}{key}", value)

    _sub(root, "memory", str(spec.memory_mib), unit="MiB")
    _sub(root, "currentMemory", str(spec.memory_mib), unit="MiB")
    if spec.hugepages:
        backing = _sub(root, "memoryBacking")
        _sub(backing, "hugepages")
    vcpu_attrs = {"placement": "static"}
    if spec.cpuset:
        vcpu_attrs["cpuset"] = format_cpuset(spec.cpuset)
    _sub(root, "vcpu", str(spec.vcpus), **vcpu_attrs)
    _cputune(root, spec)
    if spec.numa_node is not None:
        numatune = _sub(root, "numatune")
        _sub(numatune, "memory", mode="strict", nodeset=str(spec.numa_node))

    os_el = _sub(root, "os")
    type_attrs = {"arch": "x86_64"}
    if plan.machine:
        type_attrs["machine"] = plan.machine
    _sub(os_el, "type", "hvm", **type_attrs)
    if plan.kernel:
        _sub(os_el, "kernel", plan.kernel)
        if plan.initrd:
            _sub(os_el, "initrd", plan.initrd)
        if plan.cmdline:
            _sub(os_el, "cmdline", plan.cmdline)
    else:
        _sub(os_el, "boot", dev="hd")
    features = _sub(root, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    if plan.virt_type == "qemu":
        # TCG: the richest CPU model QEMU can emulate (AVX/AVX2/FMA, which the TensorFlow wheel needs).
        _sub(root, "cpu", mode="maximum", check="none")
    else:
        _sub(root, "cpu", mode="host-passthrough", check="none", migratable="off")
    _sub(root, "clock", offset="utc")
    _sub(root, "on_poweroff", "destroy")
    _sub(root, "on_reboot", "restart")
    _sub(root, "on_crash", "destroy")

    devices = _sub(root, "devices")
    disk = _sub(devices, "disk", type_="file", device="disk")
    _sub(disk, "driver", name="qemu", type_="qcow2", cache="none" if plan.virt_type == "kvm" else "writeback")
    _sub(disk, "source", file=plan.disk_path)
    _sub(disk, "target", dev="vda", bus="virtio")
    if plan.seed_path:
        seed = _sub(devices, "disk", type_="file", device="disk")
        _sub(seed, "driver", name="qemu", type_="raw")
        _sub(seed, "source", file=plan.seed_path)
        _sub(seed, "target", dev="vdb", bus="virtio")
        _sub(seed, "readonly")
    iface = _sub(devices, "interface", type_="network")
    _sub(iface, "mac", address=plan.mac)
    _sub(iface, "source", network=plan.network)
    _sub(iface, "model", type_="virtio")
    for address in plan.host_devices:
        _hostdev(devices, address)
    serial = _sub(devices, "serial", type_="pty")
    _sub(serial, "target", port="0")
    if plan.serial_log:
        _sub(serial, "log", file=plan.serial_log, append="off")
    console = _sub(devices, "console", type_="pty")
    _sub(console, "target", type_="serial", port="0")
    rng = _sub(devices, "rng", model="virtio")
    _sub(rng, "backend", "/dev/urandom", model="random")
    _sub(devices, "memballoon", model="none")  # no balloon: a benchmark's memory must not move under it

    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def run_label_of(xml: str) -> str | None:
    """The dlinfra run label recorded in a domain's XML, or None for domains that are not ours."""
    try:
        root = ET.fromstring(xml)  # noqa: S314 - libvirtd's own XML
    except ET.ParseError:
        return None
    label = root.find(f"metadata/{{{METADATA_NS}}}run/{{{METADATA_NS}}}label")
    return label.text if label is not None else None
