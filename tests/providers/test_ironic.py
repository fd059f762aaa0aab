"""The ``ironic`` provider's faults, against a real standalone Ironic (nothing mocked).

The conformance suite (test_conformance.py) runs the provider's normal life: up twice, the payload on the
target, down, SIGKILL then sweep. Here: what ``up`` refuses before it changes anything (a missing node,
a node in maintenance, one not available, one no inventory host reaches and whose network_data records
no address, one with an address but two hosts to reach it as, too few nodes of a class), and a
deploy that outlives ``deploy_timeout`` (Ironic's fake deploy interface made slow), after which nothing
is left deployed or claimed.

The fake-hardware nodes have no machine behind them; the refusals below all happen before SSH, so the
inventory hosts here are never dialled. The deploy fault of a real driver (``deploy failed`` with its
``last_error``) cannot be provoked with fake-hardware, which always deploys: that branch is not run here.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ironic_support import connection, enroll, ironic_service, record_address
from support import need_module

from dlinfra.errors import TargetError
from dlinfra.inventory import InventoryHost

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def ironic() -> Any:
    need_module("openstack")
    return ironic_service()


def _spec(options: dict[str, Any], *names: str) -> Any:
    from dlinfra.providers.base import LayerSpec

    hosts = [InventoryHost(name=n, address="192.0.2.1", groups=[], vars={"dlinfra_layers": ["bm"]}) for n in names]
    return LayerSpec("bm", hosts, Path("inventory.yml"), {"poll_interval": 0.05, "config_drive": False, **options})


def _claims() -> list[Any]:
    from dlinfra.runtime.runs_registry import live_runs

    return [r for r in live_runs() if r.pid == os.getpid() and r.of_kind("ironic-node")]


def _refused(options: dict[str, Any], *hosts: str) -> str:
    from dlinfra.providers.ironic.provider import IronicProvider

    provider = IronicProvider("bm")
    with pytest.raises(TargetError) as caught:
        provider.up(_spec(options, *hosts))
    assert provider.targets == [] and not _claims(), "a refused up claims nothing"
    return str(caught.value)


def test_a_node_in_maintenance_is_refused_with_its_reason(ironic: Any) -> None:
    node = enroll("ir-maint", resource_class="dlinfra-faults")
    conn = connection()
    conn.baremetal.set_node_maintenance(node.id, reason="fan 3 failed")
    message = _refused({"nodes": ["ir-maint"]}, "ir-maint")
    assert "ir-maint" in message and "maintenance: fan 3 failed" in message
    after = conn.baremetal.get_node(node.id)
    assert after.is_maintenance and after.provision_state == "available", "nothing about the node changed"


def test_missing_unavailable_and_unreachable_nodes_are_named(ironic: Any) -> None:
    assert "no-such-node: not found" in _refused({"nodes": ["no-such-node"]}, "no-such-node")
    node = enroll("ir-managed", resource_class="dlinfra-faults")
    connection().baremetal.set_node_provision_state(node.id, "manage")
    deadline = time.monotonic() + 30
    while connection().baremetal.get_node(node.id).provision_state != "manageable":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    message = _refused({"nodes": ["ir-managed"]}, "ir-managed")
    assert "ir-managed" in message and "is manageable, not available" in message
    enroll("ir-nohost", resource_class="dlinfra-faults")
    message = _refused({"nodes": ["ir-nohost"]}, "some-other-host")
    assert "ir-nohost: no inventory host" in message and "dlinfra_ironic_node" in message
    assert "no IPv4 address in its network_data" in message and "--network-data" in message
    # With its address recorded in Ironic, the node is reached there as the layer's one host: not one of two.
    record_address(connection().baremetal.get_node("ir-nohost").id, "192.0.2.7")
    message = _refused({"nodes": ["ir-nohost"]}, "host-a", "host-b")
    assert "ir-nohost: reached at 192.0.2.7 (its network_data) as which inventory host?" in message
    message = _refused({"resource_class": "dlinfra-faults", "count": 5}, "ir-nohost")
    assert "5 available node(s) of resource class dlinfra-faults asked for" in message


@pytest.fixture(scope="module")
def slow_ironic(ironic: Any) -> Iterator[Any]:
    """A second Ironic whose fake deploy takes 2 s a step: nodes stay ``deploying`` that long."""
    from dlinfra.testbed.ironic import IronicService

    with tempfile.TemporaryDirectory(prefix="dlinfra-ironic-slow-") as folder:
        service = IronicService(cloud="dlinfra-ironic-slow", deploy_delay=2).start(Path(folder))
        with service:
            yield service


def test_a_deploy_past_deploy_timeout_names_the_node_and_leaves_nothing(
    slow_ironic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openstack

    from dlinfra.providers.ironic.provider import IronicProvider

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(slow_ironic.clouds_yaml))
    monkeypatch.setenv("OS_CLOUD", slow_ironic.cloud)
    conn = openstack.connect(cloud=slow_ironic.cloud)
    node = conn.register_machine(nics=[], name="ir-slow", driver="fake-hardware", resource_class="x", wait=False)
    deadline = time.monotonic() + 60
    while conn.baremetal.get_node(node.id).provision_state != "available":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    conn.baremetal.set_node_power_state(node.id, "power off")
    provider = IronicProvider("bm")
    with pytest.raises(TargetError, match=r"node ir-slow \(.*\) still deploying after 0.5 s"):
        provider.up(_spec({"nodes": ["ir-slow"], "deploy_timeout": 0.5}, "ir-slow"))
    # up's failure ran down: it waited for the deploy to settle, undeployed, and released the claim.
    assert conn.baremetal.get_node(node.id).provision_state == "available"
    assert not _claims() and provider.targets == []
