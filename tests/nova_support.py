"""Real OpenStack services for the ``nova`` provider's tests, started once per test process.

Keystone, Placement, Glance, a Neutron API server (MariaDB) and Nova in one process with its fake virt
driver (see dlinfra/testbed/openstack.py). The fake driver's servers reach ACTIVE through Nova's real
API, scheduler, placement and compute manager, but **no guest runs behind them**: there is nothing to
SSH into. That is the one stand-in: the tests name servers after the local testbed's hosts, and those
hosts stand in for the guests (the provider reaches a server as the inventory host of the same name).
"""

from __future__ import annotations

from typing import Any

from support import SESSION_STOPS, component, need, need_program, session_service

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


_REAL_STATE: dict[str, Any] = {}


def real_guest_stack() -> Any:
    """The one real-guest stack of this test process, shared by every real-machine case (marker
    ``real_openstack``): Nova's libvirt driver on Open vSwitch with Neutron's agent
    (:mod:`dlinfra.testbed.nova_libvirt`), and Zun, kuryr-libnetwork and Zun's own dockerd on it
    (:mod:`dlinfra.testbed.zun`). One stack, not one per case: its start costs a minute and more of the 2 cores, and
    the Nova and the Zun cases use disjoint parts of it (servers; containers on Zun's own resource provider). It
    takes the same fixed ports as :func:`nova_services`' stack, so one process runs one of the two. Zun's dockerd
    starts empty: the ``zun`` provider loads the payload image over the compute host's SSH."""
    from dlinfra.testbed.nova_libvirt import libvirt_site
    from dlinfra.testbed.zun import ZunServices, zun_available, zun_venv

    component("the OpenStack services with Nova's libvirt driver and Zun")
    if "service" not in _REAL_STATE:
        need(zun_available(), f"Zun and kuryr-libnetwork in {zun_venv()} (make openstack)")
    _before_a_real_guest_stack(_REAL_STATE)
    return session_service(_REAL_STATE, "dlinfra-real-stack-", lambda folder: ZunServices(libvirt_site()).start(folder))


#: The real-guest stack's two faces, one stack: what the Nova cases use, and what the Zun cases use.
libvirt_nova_services = real_guest_stack
zun_services = real_guest_stack


def _before_a_real_guest_stack(state: dict[str, Any]) -> None:
    """What a real-guest stack needs before its first start in this process: the services' venv, no other stack
    on the same fixed ports, and Open vSwitch (stopped with the session when this started it)."""
    from dlinfra.testbed.nova_libvirt import GATEWAY
    from dlinfra.testbed.openstack import nova_available, nova_venv
    from dlinfra.testbed.ovs import ensure_bridge, stop_daemons

    if "service" in state:
        return
    need(nova_available(), f"the OpenStack services in {nova_venv()} and mariadbd (make openstack)")
    for package, program in (("openvswitch-switch", "ovs-vswitchd"), ("rabbitmq-server", "rabbitmq-server"),
                             ("genisoimage", "genisoimage"), ("pciutils", "lspci")):  # fmt: skip
        need(
            need_program(program) is not None,
            f"the program {program} (apt-get install {package}: scripts/install-deps.sh test)",
        )
    others = [s for s in (_STATE, _REAL_STATE) if s is not state and "service" in s]
    assert not others, "another stack on the same ports runs in this process: select this case alone"
    if ensure_bridge(GATEWAY):  # Open vSwitch did not run before: it stops with the session, also when the
        SESSION_STOPS.append(stop_daemons)  # stack fails to start
