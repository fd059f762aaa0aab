"""Probe (issue 36, not part of the suite): Nova's libvirt driver (QEMU TCG) boots the project's guest image,
its port bound by Neutron's ``openvswitch`` mechanism driver and plugged into an Open vSwitch bridge of the
userspace datapath. docs/openstack.md says what it printed and where it stops.

Usage, as root, from the repository with the dlinfra venv active::

    DLINFRA_NOVA_VENV=<the services' venv> python scripts/probe-nova-libvirt.py STATE_DIR

The stack is :class:`dlinfra.testbed.nova_libvirt.LibvirtNovaServices` (libvirt-python for the services' venv
is installed apart from it, once, into dlinfra's cache). Open vSwitch (Debian's ``openvswitch-switch``) is started
on its default socket if it does not run, with ``br-int`` and ``br-phys`` of the userspace datapath and the host's
leg on ``br-phys`` holding the network's gateway (:mod:`dlinfra.testbed.ovs`). The conformance suite runs on the
same stack (with Zun on it) in ``make test``'s ``real`` stage (``make test-real``; tests/providers/test_conformance.py).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dlinfra.testbed.nova_libvirt import GATEWAY, LibvirtNovaServices, libvirt_site
from dlinfra.testbed.openstack import NETWORK
from dlinfra.testbed.ovs import ensure_bridge, stop_daemons


def _show(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def main() -> None:
    """The ``nova`` provider's own up and down against Nova's libvirt driver: it uploads dlinfra's guest image
    (disk, kernel, initrd), boots a server with a config drive, reads the host key from its console, and reaches
    it over SSH at the address Nova reports (no inventory host stands in)."""
    from dlinfra.images.wheelhouse import build_wheelhouse
    from dlinfra.providers.base import LayerSpec
    from dlinfra.providers.nova.provider import NovaProvider

    state, artifacts = Path(sys.argv[1]), Path(sys.argv[1]) / "artifacts"
    if ensure_bridge(GATEWAY):  # Open vSwitch did not run: stopped again at the end
        atexit.register(stop_daemons)
    started = time.monotonic()
    with LibvirtNovaServices(libvirt_site()).start(state) as stack:
        print(f"stack up in {time.monotonic() - started:.1f} s", flush=True)
        os.environ.update(stack.env())
        conn = stack.connection()
        print("hypervisors:", [(h.name, h.hypervisor_type) for h in conn.compute.hypervisors()], flush=True)
        options = {"network": NETWORK, "ram_mb": 1024, "disk_gb": 8, "name_prefix": "pv", "boot_timeout": 900}
        spec = LayerSpec("vm", [], Path("inventory.yml"), options, artifacts, wheelhouse=build_wheelhouse())
        provider = NovaProvider("vm")
        started = time.monotonic()
        if os.environ.get("PROBE_CAMPAIGN_ONLY"):
            _campaign(state)
            return
        try:
            [target] = provider.up(spec)
            print(
                f"provider up in {time.monotonic() - started:.1f} s: {target.name} at {target.address} "
                f"as {target.user}, known_hosts {Path(target.known_hosts or '').read_text().strip()!r}",
                flush=True,
            )
            server = conn.compute.get_server(target.details["nova_server"])
            print("Nova reports:", server.addresses, flush=True)
            print("target details (read_facts over SSH):", json.dumps(target.details, default=str), flush=True)
            ssh = [
                "ssh",
                "-i",
                str(target.key_file),
                "-o",
                f"UserKnownHostsFile={target.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"{target.user}@{target.address}",
                "hostname; ip -4 -br addr show eth0; systemctl is-active dlinfra-seed ssh",
            ]
            print("ssh:", _show(*ssh), flush=True)
            console = conn.compute.get_server_console_output(server.id).get("output", "")
            print("console, seed lines:", [x for x in console.splitlines() if "dlinfra-seed" in x or "HOST KEY" in x])
        finally:
            started = time.monotonic()
            provider.down()
            print(f"provider down in {time.monotonic() - started:.1f} s", _show("virsh", "list", "--all"), flush=True)
        _campaign(state)


def _campaign(state: Path) -> None:
    """``dlinfra run`` with a vm and a ctr-vm cell on one server Nova boots from the guest image (the payload
    baked in, the payload image's dependencies in its Docker store): ctr-vm stacks on it as on a libvirt guest."""
    # A campaign's layers are planned per inventory host: one host carries vm and ctr-vm and stands for the cloud.
    # The server (pr1) is not named after it, so the provider reaches it at its address on the network.
    (state / "hosts.yml").write_text("all:\n  hosts:\n    cloud:\n      ansible_host: 127.0.0.1\n"
                                     "      dlinfra_layers: [vm, ctr-vm]\n")  # fmt: skip
    (state / "nova.yml").write_text(
        f"name: nova-real\ninventory: {state / 'hosts.yml'}\nlayers: [vm, ctr-vm]\nrepeats: 1\n"
        "layer_options:\n  vm: {provider: nova, network: dlinfra-net, ram_mb: 2048, disk_gb: 8, name_prefix: pr, "
        "boot_timeout: 900}\n  ctr-vm: {provider: docker, run_id: pnova}\n"
        "workloads:\n  - name: sysbench-cpu\n    matrix: {mode: [single], time: [2]}\n"
    )
    started = time.monotonic()
    db = state / "r.db"
    argv = [sys.executable, "-m", "dlinfra", "--db", str(db), "run", str(state / "nova.yml"), "--artifacts",
            str(state / "campaign")]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    print(f"dlinfra run: rc {run.returncode} in {time.monotonic() - started:.1f} s\n{run.stdout[-8000:]}"
          f"{run.stderr[-2500:]}", flush=True)  # fmt: skip
    rows = subprocess.run(["sqlite3", str(db), "SELECT layer, workload, status, physical_host, emulated, "
                           "examples_per_sec, json_extract(record_json, '$.provenance.target_details') FROM runs"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    print("rows:", rows.stdout, rows.stderr, _show("virsh", "list", "--all"), flush=True)


if __name__ == "__main__":
    main()
