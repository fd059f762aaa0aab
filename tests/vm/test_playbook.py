"""The guest lifecycle as Ansible: ``playbooks/providers/libvirt/up.yml`` and ``down.yml`` (role ``libvirt_guest``)
run through dlinfra's ansible-runner wrapper the way the provider runs them, against the real libvirtd.

The guest's disk is a blank 64 MiB qcow2 (no OS: the guest sits in its firmware, alive, until it is destroyed)
under QEMU TCG, in a storage pool of this test's own; the network, volumes, seed upload and domain are the
real thing. A second ``up`` changes nothing; ``down`` leaves nothing named after the run.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import need, need_binary, need_module

from dlinfra.runtime.runs_registry import RunClaim, claim

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

URI = "qemu:///system"
POOL = "dlplaybooktest"
POOL_PATH = "/var/lib/libvirt/images/dlplaybooktest"
HOST = "hv-test"


def _drop_pool(conn) -> None:
    import libvirt

    try:
        pool = conn.storagePoolLookupByName(POOL)
    except libvirt.libvirtError:
        return
    if pool.isActive():
        for vol in pool.listAllVolumes(0):
            vol.delete(0)
        pool.destroy()
    pool.undefine()
    subprocess.run(["rm", "-rf", POOL_PATH], check=True)


@pytest.fixture(scope="module")
def hypervisor(tmp_path_factory):
    need(os.geteuid() == 0, "root (libvirtd)")
    for tool in ("libvirtd", "qemu-system-x86_64", "qemu-img", "virsh", "ansible-playbook"):
        need_binary(tool)
    libvirt = need_module("libvirt")
    need_module("ansible_collections.community.libvirt")
    from dlinfra.providers.host_prep import controller, prepare

    prepare([controller("libvirt")])  # libvirtd answering, as a campaign has it
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    conn = libvirt.open(URI)
    _drop_pool(conn)  # an aborted earlier run's
    folder = tmp_path_factory.mktemp("playbook")
    disk = folder / "blank.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True)
    yield conn, folder, disk
    _drop_pool(conn)
    conn.close()


@pytest.fixture
def new_label() -> Iterator[Callable[[], RunClaim]]:
    """Run labels claimed in the run registry, as the provider claims its own before it makes anything: a user's
    plain `dlinfra sweep` (tests/orchestration/test_sweep.py runs one beside these tests) takes every labelled
    guest of a run that is not live, and without a claim this test's guest looked like a crashed run's. The
    claim also reserves the run network's /24 (:func:`up_vars`)."""
    from dlinfra.providers.libvirt.hypervisor import new_run_label

    claims: list[RunClaim] = []

    def make() -> RunClaim:
        claims.append(claim(new_run_label(), "libvirt", uri=URI, pool=POOL))
        return claims[-1]

    yield make
    for held in claims:
        held.release()


def up_vars(conn, held: RunClaim, folder: Path, disk: Path, base_id: str) -> dict:
    """What the provider gives the up playbook for one guest (see Hypervisor._provision and Hypervisor._create).

    The /24 is picked under this machine's lock and recorded in the run's claim, as the provider does: a pick
    outside it once gave this test and another worker's guest the same subnet ("Network is already in use")."""
    from dlinfra.providers.libvirt.domain import DomainPlan, domain_vars
    from dlinfra.providers.libvirt.hypervisor import ROLE_RESOLVED
    from dlinfra.providers.libvirt.network import (
        SUBNET_KIND,
        libvirt_subnets,
        local_routes,
        network_vars,
        plan_network,
        subnet_choice,
    )
    from dlinfra.providers.libvirt.spec import GuestSpec

    label = held.label
    with subnet_choice() as reserved:
        net = plan_network(label, ["g1"], libvirt_subnets(conn) + local_routes() + reserved)
        held.add(SUBNET_KIND, key="subnet", subnet=str(net.subnet), uri=URI)
    address = net.address_of("g1")
    seed = folder / f"{label}-seed.img"
    seed.write_bytes(b"dlinfra seed\n" + bytes(1 << 20))
    plan = DomainPlan(
        spec=GuestSpec("g1", vcpus=1, memory_mib=128, emulation="require"),
        domain_name=f"dlinfra-{label}-g1",
        run_label=label,
        virt_type="qemu",
        network=net.name,
        mac=address.mac,
        serial_log=f"/var/log/libvirt/qemu/dlinfra-{label}-g1-serial.log",
    )
    guest = {k: v for k, v in domain_vars(plan).items() if k not in ROLE_RESOLVED}
    return {
        "libvirt_guest_run_label": label,
        "libvirt_guest_pool": POOL,
        "libvirt_guest_pool_path": POOL_PATH,
        "libvirt_guest_network": network_vars(net),
        "libvirt_guest_base": {"id": base_id, "files": {"disk": {"path": str(disk), "format": "qcow2"}}},
        "libvirt_guest_guests": [{**guest, "ip": address.ip, "seed": str(seed)}],
    }


def up(variables: dict):
    from dlinfra.providers.libvirt.hypervisor import UP_PLAYBOOK, run_guest_playbook

    result = run_guest_playbook(UP_PLAYBOOK, URI, variables, host=HOST)
    assert result.ok, [str(f) for f in result.failures]
    return result


def down(label: str):
    from dlinfra.providers.libvirt.hypervisor import DOWN_PLAYBOOK, run_guest_playbook

    result = run_guest_playbook(
        DOWN_PLAYBOOK, URI, {"libvirt_guest_run_label": label, "libvirt_guest_pool": POOL}, host=HOST
    )
    assert result.ok, [str(f) for f in result.failures]
    return result


def left_of(conn, label: str) -> list[str]:
    """Every domain, network and volume of the test's pool whose name carries ``label``."""
    names = [d.name() for d in conn.listAllDomains(0)] + [n.name() for n in conn.listAllNetworks(0)]
    pool = conn.storagePoolLookupByName(POOL)
    pool.refresh(0)
    names += [v.name() for v in pool.listAllVolumes(0)]
    return [name for name in names if label in name]


def test_up_twice_changes_nothing_and_down_leaves_nothing(hypervisor, new_label) -> None:
    from dlinfra.providers.libvirt.domain import run_label_of

    conn, folder, disk = hypervisor
    held = new_label()
    label = held.label
    domain = f"dlinfra-{label}-g1"
    variables = up_vars(conn, held, folder, disk, "pbt1")
    try:
        first = up(variables)
        assert first.changed > 0
        made = first.reports[HOST]["guests"]["g1"]
        assert made["domain"] == domain and made["virt_type"] == "qemu" and not made["error"]
        assert made["disk"] == f"{POOL_PATH}/{domain}.qcow2" and made["seed"] == f"{POOL_PATH}/{domain}-seed.img"
        dom = conn.lookupByName(domain)
        assert dom.isActive() and run_label_of(dom.XMLDesc(0)) == label
        assert "<dlinfra:emulated>true</dlinfra:emulated>" in dom.XMLDesc(0)
        assert conn.networkLookupByName(f"dlinfra-{label}").isActive()
        pool = conn.storagePoolLookupByName(POOL)
        assert pool.isActive() and pool.autostart()
        overlay = pool.storageVolLookupByName(f"{domain}.qcow2")
        assert "<backingStore>" in overlay.XMLDesc(0) and "dlinfra-base-pbt1-disk" in overlay.XMLDesc(0)
        assert overlay.info()[1] == 64 * 2**20  # the base disk's virtual size, not its file's
        seed = Path(made["seed"]).read_bytes()
        assert seed.startswith(b"dlinfra seed\n")  # uploaded through libvirt

        second = up(variables)
        assert second.changed == 0, second.hosts
        assert second.reports[HOST]["guests"]["g1"] == made
    finally:
        removed = down(label)
    got = removed.reports[HOST]["removed"]
    assert got["domains"] == [domain]
    assert sorted(got["volumes"]) == [f"{domain}-seed.img", f"{domain}.qcow2"]
    assert got["networks"] == [f"dlinfra-{label}"]
    assert f"/var/log/libvirt/qemu/{domain}.log" in got["logs"]
    assert left_of(conn, label) == []
    assert not list(Path("/var/log/libvirt/qemu").glob(f"{domain}*"))
    assert "dlinfra-base-pbt1-disk" in [v.name() for v in conn.storagePoolLookupByName(POOL).listAllVolumes(0)]
    again = down(label)
    assert again.changed == 0 and again.reports[HOST]["removed"] == {
        "domains": [], "volumes": [], "networks": [], "logs": []
    }  # fmt: skip


def test_a_new_image_prunes_older_base_volumes_unless_a_run_may_use_them(hypervisor, new_label) -> None:

    conn, folder, disk = hypervisor
    pool_xml = f"<pool type='dir'><name>{POOL}</name><target><path>{POOL_PATH}</path></target></pool>"
    try:
        pool = conn.storagePoolLookupByName(POOL)
    except Exception:  # noqa: BLE001 - run alone: no pool yet
        pool = conn.storagePoolDefineXML(pool_xml, 0)
        pool.build(0)
        pool.create(0)
    for name in ("dlinfra-base-old1-disk", "other.img", "dlinfra-r0000000f-stray.qcow2"):
        pool.createXML(
            f"<volume><name>{name}</name><capacity>1024</capacity><target><format type='raw'/></target></volume>", 0
        )

    def volumes() -> set[str]:
        pool.refresh(0)
        return {v.name() for v in pool.listAllVolumes(0)}

    held = new_label()
    label = held.label
    try:
        up(up_vars(conn, held, folder, disk, "pbt2"))
        assert {"dlinfra-base-old1-disk", "other.img", "dlinfra-base-pbt2-disk"} <= volumes()  # a run may use old1
    finally:
        down(label)
    pool.storageVolLookupByName("dlinfra-r0000000f-stray.qcow2").delete(0)
    held = new_label()
    label = held.label
    try:
        up(up_vars(conn, held, folder, disk, "pbt3"))
        left = volumes()
        assert "dlinfra-base-pbt3-disk" in left and "other.img" in left
        assert not [name for name in left if name.startswith(("dlinfra-base-old1", "dlinfra-base-pbt2"))], left
    finally:
        down(label)
