"""Real OpenStack services for the ``nova`` provider's tests, started once per test process.

Keystone, Placement, Glance, a Neutron API server (MariaDB) and Nova in one process with its fake virt
driver (see dlinfra/testbed/openstack.py). The fake driver's servers reach ACTIVE through Nova's real
API, scheduler, placement and compute manager, but **no guest runs behind them**: there is nothing to
SSH into. That is the one stand-in: the tests name servers after the local testbed's hosts, and those
hosts stand in for the guests (the provider reaches a server as the inventory host of the same name).
"""

from __future__ import annotations

from typing import Any

from support import SESSION_STOPS, component, need, session_service

#: A Glance image the conformance case boots (a few bytes: the fake driver never reads it).
TEST_IMAGE = "dlinfra-test-image"
_STATE: dict[str, Any] = {}


def nova_services() -> Any:
    """The running :class:`~dlinfra.testbed.openstack.OpenStackServices`; OS_CLIENT_CONFIG_FILE and OS_CLOUD
    point at it. Skips on a developer machine without the services' venv (``make openstack``); fails in CI."""
    from dlinfra.testbed.openstack import OpenStackServices, nova_available, nova_venv

    component("the OpenStack services")
    if "service" not in _STATE:
        need(nova_available(), f"the OpenStack services in {nova_venv()} and mariadbd (make openstack)")
    return session_service(_STATE, "dlinfra-nova-test-", lambda folder: OpenStackServices().start(folder))


def start_seconds() -> float:
    return float(_STATE.get("start_s", 0.0))


def connection() -> Any:
    return nova_services().connection()


def test_image() -> str:
    """The ID of :data:`TEST_IMAGE` in Glance, uploaded the first time."""
    conn = connection()
    image = conn.image.find_image(TEST_IMAGE, ignore_missing=True)
    if image is None:
        image = conn.image.create_image(
            name=TEST_IMAGE, data=b"dlinfra fake-driver image\n", disk_format="raw", container_format="bare"
        )
    return str(image.id)


def hypervisor_vcpus() -> int:
    """How many vCPUs the fake hypervisor reports to Placement (what the scheduler can give)."""
    conn = connection()
    provider = next(iter(conn.placement.resource_providers()))
    inventory = {i.resource_class: i for i in conn.placement.resource_provider_inventories(provider)}
    vcpu = inventory["VCPU"]
    return int((vcpu.total - vcpu.reserved) * vcpu.allocation_ratio)


_LIBVIRT_STATE: dict[str, Any] = {}


def libvirt_nova_services() -> Any:
    """The stack with Nova's libvirt driver and Open vSwitch (:mod:`dlinfra.testbed.nova_libvirt`), started once per
    test process: real guests under libvirtd, reached at the addresses Nova reports. It takes the same fixed ports
    as :func:`nova_services`' stack, so one process runs one of the two."""
    from dlinfra.testbed.nova_libvirt import LibvirtNovaServices, libvirt_site

    component("the OpenStack services with Nova's libvirt driver")
    _before_a_real_guest_stack(_LIBVIRT_STATE)
    return session_service(
        _LIBVIRT_STATE, "dlinfra-nova-libvirt-test-", lambda folder: LibvirtNovaServices(libvirt_site()).start(folder)
    )


_ZUN_STATE: dict[str, Any] = {}


def zun_services() -> Any:
    """That stack with Zun, kuryr-libnetwork and Zun's own dockerd (:mod:`dlinfra.testbed.zun`), started once per
    test process in place of :func:`libvirt_nova_services`' (the same ports): containers Zun places on its compute
    host, whose ports Neutron binds and the Open vSwitch agent wires. Its dockerd starts empty: the ``zun``
    provider loads the payload image over the compute host's SSH."""
    from dlinfra.testbed.nova_libvirt import libvirt_site
    from dlinfra.testbed.zun import ZunServices, zun_available, zun_venv

    component("Zun on the OpenStack services with Nova's libvirt driver")
    if "service" not in _ZUN_STATE:
        need(zun_available(), f"Zun and kuryr-libnetwork in {zun_venv()} (DLINFRA_OPENSTACK_ZUN=1 make openstack)")
    _before_a_real_guest_stack(_ZUN_STATE)
    return session_service(_ZUN_STATE, "dlinfra-zun-test-", lambda folder: ZunServices(libvirt_site()).start(folder))


def _before_a_real_guest_stack(state: dict[str, Any]) -> None:
    """What a real-guest stack needs before its first start in this process: the services' venv, no other stack
    on the same fixed ports, and Open vSwitch (stopped with the session when this started it)."""
    from dlinfra.testbed.nova_libvirt import GATEWAY
    from dlinfra.testbed.openstack import nova_available, nova_venv
    from dlinfra.testbed.ovs import ensure_bridge, stop_daemons

    if "service" in state:
        return
    need(nova_available(), f"the OpenStack services in {nova_venv()} and mariadbd (make openstack)")
    others = [s for s in (_STATE, _LIBVIRT_STATE, _ZUN_STATE) if s is not state and "service" in s]
    assert not others, "another stack on the same ports runs in this process: select this case alone"
    if ensure_bridge(GATEWAY):  # Open vSwitch did not run before: it stops with the session, also when the
        SESSION_STOPS.append(stop_daemons)  # stack fails to start
