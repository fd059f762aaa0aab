"""Domain and network XML: pinning, NUMA, hugepages, accelerator and emulated flag, all schema-valid."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support import need_binary

from dlinfra.providers.libvirt.domain import DomainPlan, domain_xml
from dlinfra.providers.libvirt.network import network_xml, pick_subnet, plan_network
from dlinfra.providers.libvirt.spec import GuestSpec


def plan(virt_type: str = "kvm", **fields) -> DomainPlan:
    spec = GuestSpec(name="g1", **fields)
    return DomainPlan(
        spec=spec,
        domain_name="dlinfra-rx-g1",
        run_label="rx",
        virt_type=virt_type,
        disk_path="/pool/o.qcow2",
        network="dlinfra-rx",
        mac="52:54:00:01:02:03",
        seed_path="/pool/s.img",
        kernel="/pool/k",
        initrd="/pool/i",
        cmdline="root=/dev/vda",
    )


def validate(tmp_path: Path, xml: str, kind: str) -> None:
    path = tmp_path / f"{kind}.xml"
    path.write_text(xml)
    result = subprocess.run([need_binary("virt-xml-validate"), str(path), kind], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + xml


def test_pinning_numa_hugepages(tmp_path: Path) -> None:
    xml = domain_xml(plan(vcpus=2, memory_mib=2048, cpuset=(2, 3), emulator_cpuset=(0,), numa_node=0, hugepages=True))
    root = ET.fromstring(xml)
    assert root.get("type") == "kvm"
    assert root.find("vcpu").text == "2" and root.find("vcpu").get("cpuset") == "2-3"
    pins = {p.get("vcpu"): p.get("cpuset") for p in root.findall("cputune/vcpupin")}
    assert pins == {"0": "2", "1": "3"}
    assert root.find("cputune/emulatorpin").get("cpuset") == "0"
    assert root.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "0"}
    assert root.find("memoryBacking/hugepages") is not None
    assert root.find("cpu").get("mode") == "host-passthrough"
    assert root.find("devices/disk/target").attrib == {"dev": "vda", "bus": "virtio"}
    assert root.find("devices/interface/model").get("type") == "virtio"
    validate(tmp_path, xml, "domain")


def test_fewer_cpus_than_vcpus_pins_all_to_the_set(tmp_path: Path) -> None:
    root = ET.fromstring(domain_xml(plan(vcpus=4, cpuset=(2, 3))))
    assert {p.get("cpuset") for p in root.findall("cputune/vcpupin")} == {"2-3"}
    assert root.find("cputune/emulatorpin").get("cpuset") == "2-3"


def test_emulated_guest_is_marked_and_gets_the_max_cpu(tmp_path: Path) -> None:
    p = plan("qemu", emulation="require")
    assert p.emulated
    xml = domain_xml(p)
    root = ET.fromstring(xml)
    assert root.get("type") == "qemu" and root.find("cpu").get("mode") == "maximum"
    assert "<dlinfra:emulated>true</dlinfra:emulated>" in xml
    assert not plan("kvm").emulated
    validate(tmp_path, xml, "domain")


def test_network_xml_validates_and_avoids_taken_subnets(tmp_path: Path) -> None:
    import ipaddress

    taken = [ipaddress.ip_network("10.214.10.0/24"), ipaddress.ip_network("10.214.0.0/20")]
    assert str(pick_subnet(taken)) == "10.214.16.0/24"
    net = plan_network("rx", ["a", "b"], taken)
    assert [g.ip for g in net.guests] == ["10.214.16.10", "10.214.16.11"]
    assert net.bridge == "dlv-rx" and net.gateway == "10.214.16.1"
    validate(tmp_path, network_xml(net), "network")


@pytest.mark.parametrize(("text", "cpus"), [("0-3,6", (0, 1, 2, 3, 6)), ("5", (5,)), ([3, 1], (1, 3)), (None, ())])
def test_guest_cpuset_forms(text, cpus) -> None:
    """A string, a number or a list; absent is no pinning (the parsing itself: tests/payload/test_cpuset.py)."""
    assert GuestSpec.from_dict({"name": "g1", "cpuset": text}).cpuset == cpus


def test_older_base_volumes_are_pruned_unless_a_run_is_live(test_conn) -> None:
    from dlinfra.providers.libvirt import storage

    pool = test_conn.storagePoolLookupByName("default-pool")
    for name in ("dlinfra-base-old1-disk", "dlinfra-base-new2-disk", "dlinfra-rabc-vm1.qcow2", "other.img"):
        pool.createXML(storage._volume_xml(name, 1024, "raw", "0644"), 0)
    assert storage.prune_bases(pool, "new2") == []  # a run's overlay may be backed by any base
    pool.storageVolLookupByName("dlinfra-rabc-vm1.qcow2").delete(0)
    assert storage.prune_bases(pool, "new2") == ["dlinfra-base-old1-disk"]
    left = sorted(v.name() for v in pool.listAllVolumes(0))
    assert "dlinfra-base-new2-disk" in left and "other.img" in left and "dlinfra-base-old1-disk" not in left
