"""A real standalone Ironic for the ``ironic`` provider's tests, started once per test process.

The ``fake-hardware`` nodes it holds go through Ironic's real state machine but have no machine behind
them to SSH into: the tests enroll nodes named after the local testbed's hosts, and those hosts stand in
for the deployed machines (the provider reaches a node as the inventory host of the same name), or nodes
whose ``network_data`` records a testbed host's address (the provider reaches the node at that address).
"""

from __future__ import annotations

import time
from typing import Any

from support import component, need, session_service

RESOURCE_CLASS = "dlinfra-test"
_STATE: dict[str, Any] = {}


def ironic_service() -> Any:
    """The running :class:`~dlinfra.testbed.ironic.IronicService`; OS_CLIENT_CONFIG_FILE and OS_CLOUD point at it.

    Skips on a developer machine without the Ironic venv (``make openstack``); fails in CI.
    """
    from dlinfra.testbed.ironic import IronicService, ironic_available, openstack_venv

    component("a standalone Ironic")
    if "service" not in _STATE:
        need(ironic_available(), f"Ironic in {openstack_venv()} (make openstack)")
    return session_service(_STATE, "dlinfra-ironic-test-", lambda folder: IronicService().start(folder))


def connection() -> Any:
    import openstack

    service = ironic_service()
    return openstack.connect(cloud=service.cloud)


def enroll(name: str, resource_class: str = RESOURCE_CLASS, poll: float = 0.05) -> Any:
    """A fake-hardware node ``name``, ``available`` and powered off (as a real idle node); reused if there."""
    conn = connection()
    from openstack.exceptions import NotFoundException

    try:
        node = conn.baremetal.get_node(name)
    except NotFoundException:
        node = conn.register_machine(
            nics=[], name=name, driver="fake-hardware", resource_class=resource_class, wait=False
        )
    deadline = time.monotonic() + 60
    while (node := conn.baremetal.get_node(node.id)).provision_state != "available":
        assert time.monotonic() < deadline, f"node {name} stuck in {node.provision_state}: {node.last_error}"
        time.sleep(poll)
    if node.power_state != "power off":
        conn.baremetal.set_node_power_state(node.id, "power off")
    return conn.baremetal.get_node(node.id)


def record_address(node_id: str, address: str, mac: str = "52:54:00:00:00:01") -> None:
    """Record ``address`` as the node's static IPv4 network in its ``network_data`` (API 1.66), as an operator
    does for a node on a network without DHCP; the provider reaches a node there when no inventory host is named
    after it."""
    network_data = {
        "links": [{"id": "port0", "type": "phy", "ethernet_mac_address": mac}],
        "networks": [{"id": "net0", "link": "port0", "type": "ipv4", "ip_address": address,
                      "netmask": "255.255.255.0", "network_id": "dlinfra"}],
        "services": [],
    }  # fmt: skip
    connection().baremetal.patch_node(node_id, [{"op": "add", "path": "/network_data", "value": network_data}])
