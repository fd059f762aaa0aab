"""The OpenStack test stack with real guests: Nova's libvirt driver (QEMU) and Neutron's ``openvswitch`` mechanism
driver, its ports plugged into an Open vSwitch bridge of the userspace datapath (:mod:`dlinfra.testbed.ovs`).

Why a second stack class: the suite's stack (:class:`~dlinfra.testbed.openstack.OpenStackServices`) runs Nova's
fake driver, whose servers have no guest. This one boots the project's guest image under libvirtd; it is what the
probe (scripts/probe-nova-libvirt.py) and the opt-in conformance case (``DLINFRA_NOVA_LIBVIRT_CONFORMANCE=1``) run.
What stands in: the Open vSwitch agent is a registered row, not a process (the real agent needs an RPC bus between
processes, RabbitMQ, and programs flows; without it the bridge forwards with its default NORMAL flow).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from dlinfra.cache import cache_root
from dlinfra.errors import DlinfraError
from dlinfra.testbed.openstack import PHYSNET, OpenStackServices, nova_venv

#: Where Nova keeps the guests' disks: QEMU's user must open them (a 0700 state folder refuses it).
INSTANCES = Path("/var/lib/libvirt/images/dlinfra-nova-probe")
#: The gateway of the stack's network (dlinfra-net, 10.77.0.0/24), held by the host's leg on the bridge.
GATEWAY = "10.77.0.1/24"


def libvirt_site() -> Path:
    """libvirt-python for the services' venv, kept apart from it (the cached venv stays as its inputs made it):
    ``pip install --target`` once into dlinfra's cache, keyed by the venv's name."""
    site = cache_root() / "nova-libvirt-site" / nova_venv().resolve().name
    if not (site / "libvirt.py").is_file():
        pip = [str(nova_venv() / "bin" / "pip"), "install", "--quiet", "--target", str(site), "libvirt-python"]
        result = subprocess.run(pip, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise DlinfraError(
                f"libvirt-python for Nova's libvirt driver: pip failed: {result.stderr.strip()[-500:]}",
                "it builds against libvirt-dev and pkg-config (scripts/install-deps.sh installs them)",
            )
    return site


class LibvirtNovaServices(OpenStackServices):
    """The test stack with Nova's libvirt driver and Neutron's openvswitch mechanism driver."""

    def __init__(self, extra_site: Path, start_timeout: float = 600.0) -> None:
        super().__init__(start_timeout=start_timeout)
        self.extra_site = extra_site

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
            # host-model, not none: QEMU's default CPU (qemu64) has no AVX2, and the payload's wheels die of SIGILL
            # on it; under TCG, libvirt's host model is EPYC with AVX2 (virsh domcapabilities --virttype qemu).
            text += (
                "[libvirt]\nvirt_type = qemu\nconnection_uri = qemu:///system\ncpu_mode = host-model\n"
                f"[nova_sys_admin]\nhelper_command = {helper}\n[vif_plug_ovs_privileged]\nhelper_command = {helper}\n"
                "[os_vif_ovs]\novsdb_connection = unix:/var/run/openvswitch/db.sock\n"
            )
            conf.write_text(text)
            env = {**(env or {}), "PYTHONPATH": str(self.extra_site)}
        super()._spawn(name, argv, env)

    def _fake_l2_agent(self) -> None:
        """An Open vSwitch agent row on the compute host, for the openvswitch mechanism driver to bind to."""
        configurations = {
            "bridge_mappings": {PHYSNET: "br-int"}, "datapath_type": "netdev", "integration_bridge": "br-int",
            "ovs_hybrid_plug": False, "tunnel_types": [],
        }  # fmt: skip
        self._register_l2_agent("Open vSwitch agent", "neutron-openvswitch-agent", configurations)
