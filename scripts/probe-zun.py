"""Probe (issue 36, not part of the suite): a container through Zun, OpenStack's container service, on the
real-guest stack's Neutron and Open vSwitch agent. docs/openstack.md ("Zun") says what it printed.

Usage, as root, from the repository with the dlinfra venv active (``DLINFRA_OPENSTACK_ZUN=1 make openstack`` makes
Zun's venv)::

    python scripts/probe-zun.py STATE_DIR [IMAGE]

The stack is :class:`dlinfra.testbed.zun.ZunServices`; IMAGE (default: the smallest ``dlinfra-payload`` image of
the machine's dockerd) is loaded into Zun's dockerd. The container serves HTTP on port 8080 from the image's
Python; this machine's leg on the network's bridge fetches a page from the address Neutron gave it.
"""

from __future__ import annotations

import atexit
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from dlinfra.testbed.nova_libvirt import GATEWAY, libvirt_site
from dlinfra.testbed.openstack import NETWORK
from dlinfra.testbed.ovs import ensure_bridge, stop_daemons
from dlinfra.testbed.zun import API_VERSION, ZunServices


def _show(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr).strip()


def _smallest_payload_image() -> str:
    refs = _show("docker", "images", "dlinfra-payload", "--format", "{{.Repository}}:{{.Tag}}").split()
    return min(refs, key=lambda ref: int(_show("docker", "image", "inspect", "--format", "{{.Size}}", ref)))


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill stops the stack as Ctrl-C does
    state = Path(sys.argv[1]).resolve()
    image = sys.argv[2] if len(sys.argv) > 2 else _smallest_payload_image()
    if ensure_bridge(GATEWAY):  # Open vSwitch did not run: stopped again at the end
        atexit.register(stop_daemons)
    started = time.monotonic()
    with ZunServices(libvirt_site(), image).start(state) as stack:
        print(f"stack and Zun up in {time.monotonic() - started:.1f} s: {stack.timings}", flush=True)
        conn = stack.connection()
        try:
            _container(conn, f"{stack.url('zun')}/v1", image)
        finally:
            conn.close()


def _container(conn: Any, endpoint: str, image: str) -> None:
    """Create, start, reach and delete one container through Zun's API."""
    net = conn.network.find_network(NETWORK)
    body = {"name": "dlinfra-zun-probe", "image": image, "image_driver": "docker", "image_pull_policy": "ifnotpresent",
            "command": ["python3", "-m", "http.server", "8080"], "nets": [{"network": net.id}], "cpu": 1,
            "memory": "256", "labels": {"dlinfra_run": "zunprobe"}}  # fmt: skip
    started = time.monotonic()
    reply = conn.session.post(f"{endpoint}/containers", json=body, headers=API_VERSION, raise_exc=False)
    print("create:", reply.status_code, flush=True)
    if reply.status_code >= 300:
        print(reply.text[:1500])
        return
    uuid = reply.json()["uuid"]
    container: dict[str, Any] = {}
    start_asked = False
    while time.monotonic() - started < 600:
        container = conn.session.get(f"{endpoint}/containers/{uuid}", headers=API_VERSION).json()
        if container.get("status") == "Created" and not start_asked:
            print(f"created after {time.monotonic() - started:.1f} s; starting it", flush=True)
            conn.session.post(f"{endpoint}/containers/{uuid}/start", headers=API_VERSION, raise_exc=False)
            start_asked = True
        if container.get("status") in ("Running", "Error", "Stopped"):
            break
        time.sleep(1)
    shown = {k: container.get(k) for k in ("status", "status_reason", "host", "addresses", "image")}
    print(f"after {time.monotonic() - started:.1f} s:", json.dumps(shown), flush=True)
    port = None
    for _ in range(60):  # the Open vSwitch agent wires the port, and Neutron marks it ACTIVE
        port = next(iter(conn.network.ports(device_id=uuid)), None)
        if port is None or port.status == "ACTIVE":
            break
        time.sleep(1)
    if port is not None:
        print(f"port after {time.monotonic() - started:.1f} s:", port.id, port.status, port.binding_vif_type,
              port.binding_host_id, port.fixed_ips, flush=True)  # fmt: skip
    if container.get("status") == "Running":
        address = next(iter(container["addresses"].values()))[0]["addr"]
        try:  # this machine's leg on br-phys holds the network's gateway: the container's server answers there
            with urllib.request.urlopen(f"http://{address}:8080/", timeout=10) as page:
                print(f"GET http://{address}:8080/ from the host:", page.status, flush=True)
        except OSError as exc:
            print(f"GET http://{address}:8080/ from the host failed: {exc}", flush=True)
    print("br-int's ports:", _show("ovs-vsctl", "list-ports", "br-int").split(), flush=True)
    started = time.monotonic()
    reply = conn.session.delete(f"{endpoint}/containers/{uuid}?force=true", headers=API_VERSION, raise_exc=False)
    while time.monotonic() - started < 120:
        if conn.session.get(f"{endpoint}/containers/{uuid}", headers=API_VERSION, raise_exc=False).status_code == 404:
            break
        time.sleep(1)
    print(f"delete: {reply.status_code}, gone after {time.monotonic() - started:.1f} s; Neutron ports left:",
          [p.id for p in conn.network.ports(device_id=uuid)], "; br-int's ports:",
          _show("ovs-vsctl", "list-ports", "br-int").split(), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
