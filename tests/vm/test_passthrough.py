"""PCI passthrough: host checks over recorded sysfs trees, hostdev XML validated and run on libvirt's test driver.

This machine has no IOMMU (and KVM cannot run guests here), so a real device
cannot be passed through: the sysfs trees are recordings of a GPU host laid
out by the ``sysfs_tree`` fixture (see conftest.py), and the domain runs on
``test:///default``. Both are the closest real things available.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import need_binary

from dlinfra.errors import TargetError
from dlinfra.providers.libvirt.domain import DomainPlan, run_label_of
from dlinfra.providers.libvirt.passthrough import SysfsHost, check_passthrough
from dlinfra.providers.libvirt.spec import DeviceRequest, GuestSpec, PciAddress

GPU, AUDIO = "0000:01:00.0", "0000:01:00.1"


def devices(*texts: str) -> tuple[DeviceRequest, ...]:
    return tuple(DeviceRequest.parse(t) for t in texts)


def test_all_good_by_address(sysfs_tree) -> None:
    host = SysfsHost("gpu-host-1", sysfs_tree("gpu-host"))
    found = check_passthrough(host, devices(GPU))
    assert [str(d.address) for d in found] == [GPU]
    assert (found[0].vendor, found[0].product, found[0].driver, found[0].iommu_group) == (
        "10de",
        "1b80",
        "vfio-pci",
        "13",
    )


def test_vendor_product_resolves_to_the_address(sysfs_tree) -> None:
    host = SysfsHost("gpu-host-1", sysfs_tree("gpu-host"))
    assert [str(d.address) for d in check_passthrough(host, devices("10de:1b80"))] == [GPU]
    assert [str(d.address) for d in check_passthrough(host, devices("10DE:1B80", "10de:10f0"))] == [GPU, AUDIO]


def test_iommu_off_names_host_and_device(sysfs_tree) -> None:
    host = SysfsHost("gpu-host-1", sysfs_tree("iommu-off"))
    with pytest.raises(TargetError) as err:
        check_passthrough(host, devices(GPU))
    text = str(err.value)
    assert "gpu-host-1" in text and GPU in text and "IOMMU is off" in text
    assert "intel_iommu=on" in text


def test_group_not_wholly_bound(sysfs_tree) -> None:
    host = SysfsHost("gpu-host-1", sysfs_tree("gpu-audio-on-host"))
    with pytest.raises(TargetError) as err:
        check_passthrough(host, devices(GPU))
    text = str(err.value)
    assert "gpu-host-1" in text and GPU in text and AUDIO in text
    assert "IOMMU group 13" in text and "snd_hda_intel" in text and "vfio-pci" in text


def test_group_passed_whole_is_fine_even_if_a_function_is_still_on_the_host(sysfs_tree) -> None:
    # managed='yes': libvirt detaches every passed function from its host driver itself.
    host = SysfsHost("gpu-host-1", sysfs_tree("gpu-audio-on-host"))
    assert len(check_passthrough(host, devices(GPU, AUDIO))) == 2


def test_device_missing(sysfs_tree) -> None:
    host = SysfsHost("gpu-host-1", sysfs_tree("gpu-host"))
    with pytest.raises(TargetError) as err:
        check_passthrough(host, devices("0000:02:00.0"))
    assert "gpu-host-1" in str(err.value) and "0000:02:00.0 does not exist" in str(err.value)


def test_vendor_product_not_on_host(sysfs_tree) -> None:
    host = SysfsHost("gpu-host-1", sysfs_tree("gpu-host"))
    with pytest.raises(TargetError, match=r"gpu-host-1: no PCI device 10de:2204 found"):
        check_passthrough(host, devices("10de:2204"))


def _plan(**spec_fields) -> DomainPlan:
    spec = GuestSpec(name="gpu0", vcpus=2, memory_mib=256, cpuset=(0, 2), **spec_fields)
    return DomainPlan(
        spec=spec,
        domain_name="dlinfra-rtest-gpu0",
        run_label="rtest",
        virt_type="kvm",
        disk_path="/var/lib/libvirt/images/dlinfra/dlinfra-rtest-gpu0.qcow2",
        network="default",
        mac="52:54:00:aa:bb:cc",
        host_devices=(PciAddress.parse(GPU), PciAddress.parse(AUDIO)),
    )


def test_hostdev_xml_validates(tmp_path: Path, render_domain) -> None:
    validate = need_binary("virt-xml-validate")
    xml = render_domain(_plan())
    assert xml.count("<hostdev ") == 2 and "managed='yes'" in xml
    assert "bus='0x01' slot='0x00' function='0x1'" in xml
    path = tmp_path / "gpu0.xml"
    path.write_text(xml)
    result = subprocess.run([validate, str(path), "domain"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_hostdev_domain_defines_and_starts_on_test_driver(test_conn, render_domain) -> None:
    xml = render_domain(_plan())
    dom = test_conn.defineXML(xml)
    try:
        dom.create()
        assert dom.isActive()
        live = dom.XMLDesc(0)
        assert live.count("<hostdev mode='subsystem' type='pci' managed='yes'>") == 2
        assert "<address domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>" in live
        assert run_label_of(live) == "rtest"
        dom.destroy()
    finally:
        dom.undefine()
