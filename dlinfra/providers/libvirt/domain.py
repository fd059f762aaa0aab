"""One guest's domain as a plan, and the variables ``roles/libvirt_guest/templates/domain.xml.j2`` renders from it.

The domain XML is the ``libvirt_guest`` role's template; what it depends on is
decided here, in Python, where the host was checked: vCPU and emulator
pinning (vCPU i on the i-th host CPU when there are enough, else on the whole
set), NUMA memory placement, hugepages, the accelerator (``kvm``; ``qemu`` only
for guests whose spec allows emulation) and PCI hostdevs. The role escapes
every value it writes into the XML.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from dlinfra.payload.cpuset import format_cpuset
from dlinfra.providers.libvirt.spec import GuestSpec, PciAddress

METADATA_NS = "urn:dlinfra:run:1"
_METADATA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class DomainPlan:
    """A guest with everything resolved on the host: names, address, accelerator, devices.

    The volume paths (``disk_path``, ``seed_path``) are the pool's, which the
    ``libvirt_guest`` role fills in when it makes the volumes; the provider
    leaves them empty. ``kernel`` and ``initrd`` say the guest boots that kernel
    directly (the provider's plan names the controller's copy; the role boots
    the one it uploaded into the pool).
    """

    spec: GuestSpec
    domain_name: str
    run_label: str
    virt_type: str  # "kvm" or "qemu" (or "test" for libvirt's test driver)
    network: str
    mac: str
    disk_path: str | None = None
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


def vcpu_pins(spec: GuestSpec) -> list[str]:
    """Host cpuset of each vCPU: the i-th CPU of ``cpuset`` when there are enough, else the whole set."""
    if not spec.cpuset:
        return []
    if len(spec.cpuset) >= spec.vcpus:
        return [format_cpuset((spec.cpuset[vcpu],)) for vcpu in range(spec.vcpus)]
    return [format_cpuset(spec.cpuset)] * spec.vcpus


def domain_vars(plan: DomainPlan) -> dict[str, Any]:
    """The guest as the role's template takes it (``libvirt_guest_domain``; README.md of the role)."""
    spec = plan.spec
    bad = sorted(k for k in plan.extra_metadata if not _METADATA_KEY.match(k))
    if bad:
        raise ValueError(f"domain metadata keys must be XML names: {', '.join(bad)}")
    return {
        "name": spec.name,
        "domain": plan.domain_name,
        "run_label": plan.run_label,
        "virt_type": plan.virt_type,
        "emulation": spec.emulation,
        "vcpus": spec.vcpus,
        "memory_mib": spec.memory_mib,
        "cpuset": format_cpuset(spec.cpuset),
        "vcpupin": vcpu_pins(spec),
        "emulatorpin": format_cpuset(spec.emulator_cpuset or spec.cpuset),
        "numa_node": spec.numa_node,
        "hugepages": spec.hugepages,
        "machine": plan.machine or "",
        "network": plan.network,
        "mac": plan.mac,
        "disk_path": plan.disk_path or "",
        "seed_path": plan.seed_path or "",
        "kernel": plan.kernel or "",
        "initrd": plan.initrd or "",
        "cmdline": plan.cmdline or "",
        "host_devices": [str(address) for address in plan.host_devices],
        "serial_log": plan.serial_log or "",
        "metadata": dict(plan.extra_metadata),
        "kvm_refused": plan.kvm_refused or "",
    }


def run_label_of(xml: str) -> str | None:
    """The dlinfra run label recorded in a domain's XML, or None for domains that are not ours."""
    try:
        root = ET.fromstring(xml)  # noqa: S314 - libvirtd's own XML
    except ET.ParseError:
        return None
    label = root.find(f"metadata/{{{METADATA_NS}}}run/{{{METADATA_NS}}}label")
    return label.text if label is not None else None
