"""Bad requests fail with one clear message naming host, guest and field, before anything is defined.

Runs the real provider against libvirt's test driver (a host with 8 CPUs of
which 0, 2 and 4 are online, 3 GiB of memory) and a recorded GPU host's sysfs.
"""

from __future__ import annotations

import pytest
from support import need_module

from dlinfra.errors import DlinfraError, SpecError, TargetError
from dlinfra.providers.libvirt.hypervisor import Hypervisor
from dlinfra.providers.libvirt.spec import DeviceRequest, GuestSpec


@pytest.fixture
def provider(sysfs_tree, tmp_path):
    need_module("libvirt")
    prov = Hypervisor("test:///default", sysfs_root=sysfs_tree("gpu-host"), state_dir=tmp_path / "state")
    yield prov
    prov.close()


def snapshot(prov: Hypervisor) -> tuple[set[str], set[str], set[str]]:
    conn = prov.conn
    volumes = {v.name() for p in conn.listAllStoragePools(0) if p.isActive() for v in p.listAllVolumes(0)}
    return {d.name() for d in conn.listAllDomains(0)}, {n.name() for n in conn.listAllNetworks(0)}, volumes


def fails_before_defining(prov: Hypervisor, guest: GuestSpec, kind: type[DlinfraError]) -> str:
    before = snapshot(prov)
    with pytest.raises(kind) as err:
        prov.up_guests([guest])
    assert snapshot(prov) == before, "a bad request must not leave anything defined"
    assert not (prov.state_dir / "known_hosts").exists()
    return str(err.value)


def test_cpuset_outside_the_host(provider) -> None:
    text = fails_before_defining(provider, GuestSpec("g1", vcpus=2, cpuset=(0, 64)), SpecError)
    host = provider.host
    assert f"{host}: guest g1: cpuset 0,64 names CPU(s) 64 that the host does not have online" in text
    assert "online CPUs are 0,2,4" in text


def test_cpuset_on_an_offline_cpu(provider) -> None:
    text = fails_before_defining(provider, GuestSpec("g1", cpuset=(1,)), SpecError)
    assert "CPU(s) 1 that the host does not have online" in text


def test_more_memory_than_the_host_has(provider) -> None:
    text = fails_before_defining(provider, GuestSpec("g1", memory_mib=1_000_000), SpecError)
    assert f"{provider.host}: guests ask for 1000000 MiB of memory but the host has" in text
    assert "lower memory_mib" in text


def test_pci_address_that_does_not_exist(provider) -> None:
    guest = GuestSpec("g1", devices=(DeviceRequest.parse("0000:42:00.0"),))
    text = fails_before_defining(provider, guest, TargetError)
    assert f"{provider.host}: PCI device 0000:42:00.0 does not exist" in text
    assert "lspci -D" in text


def test_numa_node_that_does_not_exist(provider) -> None:
    text = fails_before_defining(provider, GuestSpec("g1", numa_node=7), SpecError)
    assert "numa_node 7 does not exist" in text


def test_passthrough_with_required_emulation(provider) -> None:
    guest = GuestSpec("g1", devices=(DeviceRequest.parse("0000:01:00.0"),), emulation="require")
    assert "PCI passthrough needs KVM" in fails_before_defining(provider, guest, SpecError)


def test_same_device_for_two_guests(provider) -> None:
    gpu = (DeviceRequest.parse("10de:1b80"),)
    with pytest.raises(SpecError, match=r"0000:01:00\.0 is asked for by guests a and b"):
        provider.up_guests([GuestSpec("a", devices=gpu), GuestSpec("b", devices=gpu)])


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "g1", "cpuset": "3-1"}, "guest.cpuset: '3-1' must be a CPU list like '0-3,8' (range '3-1' runs"),
        ({"name": "g1", "cpuset": "two"}, "guest.cpuset: 'two' must be a CPU list like '0-3,8' ('two' is not a CPU"),
        ({"name": "g1", "devices": ["01:00"]}, "guest.devices: '01:00' is neither a PCI address nor vendor:product"),
        ({"name": "G_1"}, "guest.name: 'G_1' is not a guest name (1-31 of a-z, 0-9 and '-')"),
        ({"name": "g1", "memory": 4}, "guest: unknown field(s) memory"),
        ({"name": "g1", "emulation": "yes"}, "guest.emulation: 'yes' is not one of never, allow, require"),
        ({"name": "g1", "vcpus": 0}, "guest.vcpus: 0 must be a positive integer (at most 1024)"),
    ],
)
def test_malformed_spec(raw: dict, message: str) -> None:
    with pytest.raises(SpecError) as err:
        GuestSpec.from_dict(raw)
    assert message in str(err.value)


def test_good_request_validates(provider) -> None:
    checks = provider.validate([GuestSpec("g1", vcpus=2, cpuset=(0, 2), devices=(DeviceRequest.parse("10de:1b80"),))])
    assert [str(d.address) for d in checks.devices["g1"]] == ["0000:01:00.0"]
    assert checks.virt_type["g1"] == "kvm"


def test_layer_options_from_a_campaign(provider) -> None:
    from dlinfra.providers.libvirt.provider import LibvirtVmProvider
    from dlinfra.providers.libvirt.spec import guests_from_options

    with pytest.raises(SpecError, match=r"layer_options\.vm: unknown option\(s\) vcpu"):
        LibvirtVmProvider.validate("vm", {"vcpu": 2}, "layer_options.vm")
    before = snapshot(provider)
    with pytest.raises(SpecError, match="guest vm1: cpuset 0,64 names CPU"):
        provider.up_guests(guests_from_options({"vcpus": 2, "cpuset": "0,64"}, "layer_options.vm"))
    with pytest.raises(SpecError, match=r"guest b: cpuset 9 names CPU"):
        provider.up_guests(guests_from_options({"guests": [{"name": "a"}, {"name": "b", "cpuset": 9}]}, "x"))
    assert snapshot(provider) == before
