"""The OpenStack test stack with real guests: Nova's libvirt driver (QEMU) and Neutron's ``openvswitch`` mechanism
driver with its real agent, the guests' ports plugged into Open vSwitch bridges of the userspace datapath
(:mod:`dlinfra.testbed.ovs`).

Why a second stack class: the suite's stack (:class:`~dlinfra.testbed.openstack.OpenStackServices`) runs Nova's
fake driver, whose servers have no guest, and a registered agent row. This one boots the project's guest image
under libvirtd and runs ``neutron-openvswitch-agent``, which programs the bridges' flows and reports the ports up;
it talks to ``neutron-rpc-server`` over a private RabbitMQ node (Debian's ``rabbitmq-server``, started here as a
process of the stack). It is what the probe (scripts/probe-nova-libvirt.py) runs, and, with Zun on it
(:mod:`dlinfra.testbed.zun`), the one stack of the real-machine cases (marker ``real_openstack``, ``make test``'s
``real`` stage).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from dlinfra.cache import cache_root
from dlinfra.errors import DlinfraError
from dlinfra.testbed.ironic import free_port
from dlinfra.testbed.local import port_open
from dlinfra.testbed.openstack import COMPUTE_HOST, PHYSNET, OpenStackServices, nova_venv
from dlinfra.testbed.ovs import BRIDGE, PHYSICAL_BRIDGE, SOCKET, remove_stale_ports

#: Where Nova keeps the guests' disks and its image cache (``_base``: a full copy of every image it booted from):
#: QEMU's user must open them (a 0700 state folder refuses it). One stack at a time uses it (Nova refuses to start
#: beside another's guests), so each stack empties it at start and removes it at stop: gigabytes per image otherwise.
INSTANCES = Path("/var/lib/libvirt/images/dlinfra-nova")
#: The gateway of the stack's network (dlinfra-net, 10.77.0.0/24), held by the host's leg on the bridge.
GATEWAY = "10.77.0.1/24"
#: Debian's RabbitMQ server script, run directly (its wrapper in /usr/sbin switches to the rabbitmq user, who cannot
#: write the stack's root-only state folder).
RABBITMQ = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
EPMD = "/usr/bin/epmd"
AGENT = "neutron-openvswitch-agent"
#: Neutron's privsep contexts (neutron/privileged/__init__.py): each starts its helper with ``sudo`` unless told.
PRIVSEP_SECTIONS = ("privsep", "privsep_dhcp_release", "privsep_ovs_vsctl", "privsep_namespace", "privsep_conntrack",
                    "privsep_link")  # fmt: skip


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
        #: The stack's RabbitMQ, once it answers (Neutron's agents' bus; Zun's too).
        self.transport_url = ""

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        assert self.state_dir is not None
        if name == "neutron":
            self.transport_url = self._rabbitmq()
            conf = self.state_dir / "neutron" / "neutron.conf"
            conf.write_text(
                conf.read_text()
                .replace("mechanism_drivers = fake_agent", "mechanism_drivers = openvswitch")
                .replace("transport_url = fake:/", f"transport_url = {self.transport_url}")
            )
            super()._spawn(name, argv, env)
            self._agents(conf)
            return
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
                # As a real cloud runs: the guest starts once the agent has plugged its port and Neutron has said so
                # (network-vif-plugged; neutron.conf's [nova] section lets Neutron call Nova's API).
                "vif_plugging_is_fatal = true\nvif_plugging_timeout = 300",
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

    def start(self, state_dir: Path) -> LibvirtNovaServices:
        # Nova's compute refuses to start as a new service on a hypervisor that holds any domain ("My hypervisor has
        # existing instances"): say which, before a minute of start-up.
        listed = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True,
                                text=True, check=False, timeout=60)  # fmt: skip
        if domains := listed.stdout.split():
            raise DlinfraError(
                f"Nova's libvirt driver will not start beside the domains libvirtd already has: {', '.join(domains)}",
                "run the real-guest OpenStack cases when libvirtd holds no other guest (not beside make test's guest "
                "tests), or remove those domains",
            )
        remove_stale_ports()  # what a killed stack left on the bridge
        shutil.rmtree(INSTANCES, ignore_errors=True)  # and on the disk
        super().start(state_dir)
        return self

    def stop(self) -> None:
        """The stack's processes, then the bridge's rows of the taps and veths they left (guests and containers
        that were not deleted before the stack stopped), then the guests' disks and Nova's image cache."""
        super().stop()
        remove_stale_ports()
        shutil.rmtree(INSTANCES, ignore_errors=True)

    def _fake_l2_agent(self) -> None:
        """Nothing: the real agent registers itself (:meth:`_agents`)."""

    def _rabbitmq(self) -> str:
        """A private RabbitMQ node on free ports, its data in the state folder; its transport URL once it answers."""
        assert self.state_dir is not None
        if not RABBITMQ.is_file():
            raise DlinfraError(
                "RabbitMQ is not installed (the Open vSwitch agent's RPC bus)", "apt-get install rabbitmq-server"
            )
        folder = self._dir("rabbitmq")
        port, epmd = free_port(), free_port()
        # Erlang's port mapper of its own, in the foreground: the one RabbitMQ would start daemonizes, leaves the
        # stack's process group and outlives the stack (and could be a user's, on the shared port 4369).
        super()._spawn("epmd", [EPMD, "-port", str(epmd)])
        env = {"ERL_EPMD_PORT": str(epmd), "RABBITMQ_NODE_PORT": str(port), "RABBITMQ_DIST_PORT": str(free_port()),
               "RABBITMQ_NODENAME": f"dlinfra{port}@localhost", "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
               "RABBITMQ_LOG_BASE": str(folder / "log"), "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1"}  # fmt: skip
        super()._spawn("rabbitmq", [str(RABBITMQ)], env)
        self._wait_until("rabbitmq", "answer on its AMQP port", lambda: port_open("127.0.0.1", port))
        return f"rabbit://guest:guest@127.0.0.1:{port}/"

    def _network(self) -> None:
        """The network, then a wait until the Open vSwitch agent has reported to Neutron (ports bind to it)."""
        super()._network()
        conn = self.connection()

        def reported() -> bool:
            return any(a.is_alive and a.host == COMPUTE_HOST for a in conn.network.agents(binary=AGENT))

        try:
            self._wait_until(AGENT, "report to Neutron", reported, interval=1.0)
        finally:
            conn.close()

    def _agents(self, conf: Path) -> None:
        """``neutron-rpc-server`` (the agents' side of Neutron) and ``neutron-openvswitch-agent`` on the compute
        host: ``br-int`` its integration bridge, the flat network on ``br-phys``, no security groups (noop)."""
        ini = conf.with_name("openvswitch_agent.ini")
        helper = f"{self._bin('privsep-helper')} --config-file {conf} --config-file {ini}"  # as root: no sudo
        ini.write_text(
            f"[DEFAULT]\nhost = {COMPUTE_HOST}\n[agent]\nroot_helper = env\ntunnel_types =\n"
            f"[ovs]\nintegration_bridge = {BRIDGE}\ndatapath_type = netdev\n"
            f"bridge_mappings = {PHYSNET}:{PHYSICAL_BRIDGE}\n"
            f"ovsdb_connection = unix:{SOCKET}\nof_listen_port = {free_port()}\n"
            "[securitygroup]\nfirewall_driver = noop\nenable_security_group = false\n"
            + "".join(f"[{section}]\nhelper_command = {helper}\n" for section in PRIVSEP_SECTIONS)
        )
        env = {"OS_NEUTRON_CONFIG_DIR": str(conf.parent)}
        super()._spawn("neutron-rpc", [self._bin("neutron-rpc-server"), "--config-file", str(conf)], env)
        agent = [self._bin("neutron-openvswitch-agent"), "--config-file", str(conf), "--config-file", str(ini)]
        super()._spawn(AGENT, agent, env)
