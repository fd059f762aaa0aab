"""Probe (issue 36, not part of the suite): Nova's libvirt driver (QEMU TCG) boots the project's guest image,
its port bound by Neutron's ``openvswitch`` mechanism driver and plugged into an Open vSwitch bridge of the
userspace datapath. docs/openstack.md says what it printed and where it stops.

Usage, as root, from the repository with the dlinfra venv active::

    DLINFRA_NOVA_VENV=<the services' venv> python scripts/probe-nova-libvirt.py STATE_DIR GUEST_DIR EXTRA_SITE

GUEST_DIR: a guest image folder of the libvirt provider's cache (``base.qcow2``, ``vmlinuz``, ``initrd.img``,
``manifest.json``). EXTRA_SITE: libvirt-python for the services' venv, put aside so that the cached venv is not
changed (``<venv>/bin/pip install --target EXTRA_SITE libvirt-python``). Open vSwitch must run on its default
socket (libvirt adds the guest's tap to the bridge with ``ovs-vsctl``), with ``br-int`` of ``datapath_type
netdev`` (the kernel datapath cannot load here); docs/openstack.md gives the commands.

What stands in: the Open vSwitch agent is a registered row, not a process (the real agent needs an RPC bus
between processes, RabbitMQ, and programs flows; without it the bridge forwards with its default NORMAL flow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dlinfra.testbed.openstack import NETWORK, PHYSNET, OpenStackServices

#: Where Nova keeps the guests' disks: QEMU's user must open them (a 0700 state folder refuses it).
INSTANCES = Path("/var/lib/libvirt/images/dlinfra-nova-probe")


class LibvirtNova(OpenStackServices):
    """The test stack with Nova's libvirt driver and Neutron's openvswitch mechanism driver."""

    extra_site = ""

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        assert self.state_dir is not None
        if name == "neutron":
            conf = self.state_dir / "neutron" / "neutron.conf"
            conf.write_text(
                conf.read_text().replace("mechanism_drivers = fake_agent", "mechanism_drivers = openvswitch")
            )
        if name == "nova":
            conf = self.state_dir / "nova" / "nova.conf"
            helper = f"{self._bin('privsep-helper')} --config-file {conf}"  # as root: no sudo, no rootwrap
            INSTANCES.mkdir(parents=True, exist_ok=True)
            text = conf.read_text().replace(
                f"instances_path = {self.state_dir}/nova/instances", f"instances_path = {INSTANCES}"
            )
            text = text.replace(
                "compute_driver = fake.FakeDriverWithoutFakeNodes",
                "compute_driver = libvirt.LibvirtDriver\nforce_config_drive = true\nforce_raw_images = false\n"
                "vif_plugging_is_fatal = false\nvif_plugging_timeout = 0",  # no agent sends network-vif-plugged
            )
            text += (
                "[libvirt]\nvirt_type = qemu\nconnection_uri = qemu:///system\ncpu_mode = none\n"
                f"[nova_sys_admin]\nhelper_command = {helper}\n[vif_plug_ovs_privileged]\nhelper_command = {helper}\n"
                "[os_vif_ovs]\novsdb_connection = unix:/var/run/openvswitch/db.sock\n"
            )
            conf.write_text(text)
            env = {**(env or {}), "PYTHONPATH": self.extra_site}
        super()._spawn(name, argv, env)

    def _fake_l2_agent(self) -> None:
        """An Open vSwitch agent row on the compute host, for the openvswitch mechanism driver to bind to."""
        configurations = {
            "bridge_mappings": {PHYSNET: "br-int"}, "datapath_type": "netdev", "integration_bridge": "br-int",
            "ovs_hybrid_plug": False, "tunnel_types": [],
        }  # fmt: skip
        self._register_l2_agent("Open vSwitch agent", "neutron-openvswitch-agent", configurations)


def _show(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def _upload(conn: Any, guest: Path) -> Any:
    """The guest's disk with its kernel and initrd (the image boots by direct kernel boot, as the provider's)."""
    cmdline = json.loads((guest / "manifest.json").read_text())["cmdline"]
    kernel = conn.image.create_image(name="probe-kernel", filename=str(guest / "vmlinuz"), disk_format="aki",
                                     container_format="aki", wait=True, allow_duplicates=True)  # fmt: skip
    ramdisk = conn.image.create_image(name="probe-ramdisk", filename=str(guest / "initrd.img"), disk_format="ari",
                                      container_format="ari", wait=True, allow_duplicates=True)  # fmt: skip
    meta = {"kernel_id": kernel.id, "ramdisk_id": ramdisk.id, "os_command_line": cmdline}
    return conn.image.create_image(name="probe-disk", filename=str(guest / "base.qcow2"), disk_format="qcow2",
                                   container_format="bare", wait=True, allow_duplicates=True, meta=meta)  # fmt: skip


def main() -> None:
    state, guest = Path(sys.argv[1]), Path(sys.argv[2])
    LibvirtNova.extra_site = sys.argv[3]
    wait_s = float(os.environ.get("PROBE_WAIT", "150"))
    started = time.monotonic()
    with LibvirtNova(start_timeout=600).start(state) as stack:
        print(f"stack up in {time.monotonic() - started:.1f} s", flush=True)
        conn = stack.connection()
        print("hypervisors:", [(h.name, h.hypervisor_type) for h in conn.compute.hypervisors()], flush=True)
        image = _upload(conn, guest)
        flavor = conn.compute.create_flavor(name="probe", ram=768, vcpus=1, disk=8)
        network = conn.network.find_network(NETWORK)
        started = time.monotonic()
        server = conn.compute.create_server(name="probe-1", image_id=image.id, flavor_id=flavor.id,
                                            networks=[{"uuid": network.id}], config_drive=True)  # fmt: skip
        while server.status not in ("ACTIVE", "ERROR"):
            time.sleep(0.5)
            server = conn.compute.get_server(server.id)
        print(f"server {server.status} in {time.monotonic() - started:.1f} s; fault: {server.fault}", flush=True)
        print("addresses:", server.addresses, flush=True)
        port = next(iter(conn.network.ports(device_id=server.id)), None)
        if port is not None:
            print("port binding:", port.binding_vif_type, port.binding_vif_details, flush=True)
        print(_show("virsh", "list", "--all"), _show("ovs-vsctl", "show"), flush=True)
        console = ""
        while server.status == "ACTIVE" and "login:" not in console and time.monotonic() - started < wait_s:
            time.sleep(5)
            console = conn.compute.get_server_console_output(server.id).get("output", "")
        print(f"console after {time.monotonic() - started:.0f} s, last 1500 characters:\n{console[-1500:]}", flush=True)
        started = time.monotonic()
        conn.compute.delete_server(server.id)
        while list(conn.compute.servers(name="probe-1")):
            time.sleep(0.5)
        print(f"server deleted in {time.monotonic() - started:.1f} s", _show("virsh", "list", "--all"), flush=True)


if __name__ == "__main__":
    main()
