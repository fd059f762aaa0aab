"""Zun on the real-guest stack (:mod:`dlinfra.testbed.zun`): the stack a ``zun`` provider would be tested on.

One container through Zun's API, as a tenant would make it: Zun's scheduler places it through Placement on the
compute host, Neutron binds its port there (``vif_type`` ovs) and the Open vSwitch agent wires it (ACTIVE), the
server in the container answers at the address Neutron gave it, and the delete leaves no port in Neutron nor on
``br-int``.

Marked ``real_openstack``: ``make test``'s ``real`` stage runs it (``make test-real``), on the one real-guest stack
of that process (tests/nova_support.py), after the conformance cases that share it; the image is loaded into Zun's
dockerd for this test and removed after it. The stack stops at the session's end (docs/openstack.md says what it
leaves behind, and why).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from typing import Any

import pytest
from support import component, need

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _smallest_payload_image() -> str:
    """The smallest ``dlinfra-payload`` image of the machine's dockerd (any ctr campaign or test builds one)."""
    listing = subprocess.run(["docker", "images", "dlinfra-payload", "--format", "{{.Repository}}:{{.Tag}}"],
                             capture_output=True, text=True, check=False)  # fmt: skip
    refs = listing.stdout.split()
    need(bool(refs), "a dlinfra-payload image in the machine's dockerd (a ctr campaign builds one)")

    def size(ref: str) -> int:
        inspect = ["docker", "image", "inspect", "--format", "{{.Size}}", ref]
        return int(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)

    return min(refs, key=size)


def _until(what: str, ready: Any, timeout: float) -> Any:
    """The project's one wait (:func:`~dlinfra.runtime.wait.wait_for`), polling each second."""
    from dlinfra.runtime.wait import wait_for

    return wait_for(what, ready, timeout=timeout, interval=1.0, cancellable=False)


@pytest.mark.real_openstack
def test_a_container_zun_places_gets_a_wired_port_and_answers_at_its_address() -> None:
    from nova_support import zun_services

    from dlinfra.testbed.openstack import COMPUTE_HOST, NETWORK
    from dlinfra.testbed.zun import API_VERSION

    component("Zun on the OpenStack services with Nova's libvirt driver")
    image = _smallest_payload_image()
    stack = zun_services()  # the real stage's one stack (tests/nova_support.py)
    started = time.monotonic()
    stack.load_image(image)
    print(f"\n{image} loaded into Zun's dockerd in {time.monotonic() - started:.1f} s; the stack: {stack.timings}")
    conn = stack.connection()
    try:
        _one_container(conn, f"{stack.url('zun')}/v1", image, NETWORK, COMPUTE_HOST, API_VERSION)
    finally:
        conn.close()
        engine = ["docker", "--host", f"unix://{stack.docker_socket}"]
        subprocess.run([*engine, "rmi", "--force", image], capture_output=True, check=False)


def _one_container(conn: Any, endpoint: str, image: str, network: str, host: str, version: dict) -> None:
    net = conn.network.find_network(network)
    body = {"name": "dlinfra-zun-test", "image": image, "image_driver": "docker",
            "image_pull_policy": "ifnotpresent", "command": ["python3", "-m", "http.server", "8080"],
            "nets": [{"network": net.id}], "cpu": 1, "memory": "256",
            "labels": {"dlinfra_run": "zuntest"}}  # fmt: skip
    started = time.monotonic()
    reply = conn.session.post(f"{endpoint}/containers", json=body, headers=version, raise_exc=False)
    assert reply.status_code == 202, reply.text[:1500]
    uuid = reply.json()["uuid"]

    def settled(*states: str) -> Any:
        """The container's status once it is one of ``states`` (or Error), else None."""
        now = conn.session.get(f"{endpoint}/containers/{uuid}", headers=version).json()["status"]
        return now if now in (*states, "Error") else None

    assert _until("created", lambda: settled("Created"), 120) == "Created"
    conn.session.post(f"{endpoint}/containers/{uuid}/start", headers=version)
    assert _until("running", lambda: settled("Running", "Stopped"), 120) == "Running"
    container = conn.session.get(f"{endpoint}/containers/{uuid}", headers=version).json()
    running_s = time.monotonic() - started
    assert container["host"] == host
    [[address]] = container["addresses"].values()

    def wired() -> Any:
        ports = list(conn.network.ports(device_id=uuid))
        return ports[0] if ports and ports[0].status == "ACTIVE" else None

    port = _until("the port ACTIVE", wired, 60)
    assert (port.binding_vif_type, port.binding_host_id) == ("ovs", host)
    assert [ip["ip_address"] for ip in port.fixed_ips] == [address["addr"]]
    with urllib.request.urlopen(f"http://{address['addr']}:8080/", timeout=10) as page:
        assert page.status == 200  # from this machine's leg on the network's bridge

    started = time.monotonic()
    conn.session.delete(f"{endpoint}/containers/{uuid}?force=true", headers=version)
    gone = f"{endpoint}/containers/{uuid}"
    _until("deleted", lambda: conn.session.get(gone, headers=version, raise_exc=False).status_code == 404, 120)
    deleted_s = time.monotonic() - started
    assert not list(conn.network.ports(device_id=uuid)), "Neutron still holds the container's port"
    find = ["ovs-vsctl", "--no-heading", "--columns=name", "find", "interface", f"external_ids:iface-id={port.id}"]
    assert not subprocess.run(find, capture_output=True, text=True, check=True).stdout.strip(), "veth on br-int"
    print("zun container:", json.dumps({"running_s": round(running_s, 1), "deleted_s": round(deleted_s, 1),
                                        "address": address["addr"], "port": port.id}))  # fmt: skip
