"""Open vSwitch for guests that Nova's libvirt driver boots on this machine: an integration bridge and a physical
bridge of the userspace datapath, and a leg of the host on the physical one, so that the controller reaches the
guests at the addresses Nova reports. Neutron's Open vSwitch agent owns the integration bridge's flows and patches
it to the physical bridge (its ``bridge_mappings``), as on a compute node whose NIC is on ``br-phys``.

Why the userspace datapath: the kernel's ``openvswitch`` module cannot be loaded here ("Generic Netlink family
'ovs_datapath' does not exist"). Why ``userspace-tso-enable``: a guest's virtio NIC leaves TCP checksums to be
filled in by the device (offload); the kernel datapath would fill them, the userspace one reads the tap's packets
as they are and forwards them with the checksum unfilled, so the guest's SYN-ACK reaches the host with a wrong
checksum and SSH never connects (ARP and ping work). With userspace TSO on, Open vSwitch reads the virtio header
and fills the checksums in. It takes effect when ``ovs-vswitchd`` starts, so a running one without it is restarted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from dlinfra.errors import DlinfraError
from dlinfra.runtime.wait import wait_for

DB = Path("/etc/openvswitch/conf.db")
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
SOCKET = "/var/run/openvswitch/db.sock"
#: The bridge the ``openvswitch`` mechanism driver binds ports to (its agent's ``integration_bridge``).
BRIDGE = "br-int"
#: The flat network's bridge (the agent's ``bridge_mappings``), where the host's leg is.
PHYSICAL_BRIDGE = "br-phys"
#: The host's port on the physical bridge: an internal port that holds the network's gateway address.
HOST_PORT = "dlhost"


def _ovs(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise DlinfraError(f"{' '.join(argv[:3])} did not end in 60 s", "see the Open vSwitch logs") from None
    if check and result.returncode != 0:
        raise DlinfraError(f"{' '.join(argv[:3])} failed: {result.stderr.strip()}", "see the Open vSwitch logs")
    return result


def _answers(target: str) -> bool:
    return _ovs("ovs-appctl", "-t", target, "version", check=False).returncode == 0


def ensure_bridge(gateway: str) -> bool:
    """Start Open vSwitch unless it runs, with ``br-int`` and ``br-phys`` (userspace datapath, userspace TSO) and
    the host's port on ``br-phys`` holding ``gateway`` (``10.77.0.1/24``). Idempotent: a second call changes
    nothing. Returns whether it started a daemon that did not run (:func:`stop_daemons` stops them again)."""
    for tool in ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovsdb-tool"):
        if shutil.which(tool) is None:
            raise DlinfraError(f"{tool} is not installed", "apt-get install openvswitch-switch")
    Path(SOCKET).parent.mkdir(parents=True, exist_ok=True)
    started = not (_answers("ovsdb-server") and _answers("ovs-vswitchd"))
    if not _answers("ovsdb-server"):
        if not DB.exists():
            DB.parent.mkdir(parents=True, exist_ok=True)
            _ovs("ovsdb-tool", "create", str(DB), str(SCHEMA))
        _ovs("ovsdb-server", str(DB), f"--remote=punix:{SOCKET}", "--pidfile", "--detach", "--log-file")
        _ovs("ovs-vsctl", "--no-wait", "init")
    tso = _ovs("ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", "other_config:userspace-tso-enable").stdout
    if tso.strip().strip('"') != "true":
        _ovs("ovs-vsctl", "--no-wait", "set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true")
        if _answers("ovs-vswitchd"):
            _ovs("ovs-appctl", "-t", "ovs-vswitchd", "exit")
            wait_for("ovs-vswitchd to exit", lambda: not _answers("ovs-vswitchd"), timeout=10, interval=0.2)
    if not _answers("ovs-vswitchd"):
        _ovs("ovs-vswitchd", "--pidfile", "--detach", "--log-file")
    for bridge in (BRIDGE, PHYSICAL_BRIDGE):
        _ovs("ovs-vsctl", "--may-exist", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev")
    if _ovs("ovs-vsctl", "port-to-br", HOST_PORT, check=False).stdout.strip() == BRIDGE:  # the agent-less probe's
        _ovs("ovs-vsctl", "del-port", BRIDGE, HOST_PORT)
    _ovs("ovs-vsctl", "--may-exist", "add-port", PHYSICAL_BRIDGE, HOST_PORT, "--", "set", "interface", HOST_PORT,
         "type=internal")  # fmt: skip
    wait_for(  # the internal port's tap appears once ovs-vswitchd has it
        f"Open vSwitch's internal port {HOST_PORT}", Path(f"/sys/class/net/{HOST_PORT}").exists, timeout=10,
        interval=0.1, hint="see ovs-vswitchd's log (ovs-appctl -t ovs-vswitchd vlog/list)",
    )  # fmt: skip
    _ovs("ip", "addr", "replace", gateway, "dev", HOST_PORT)
    _ovs("ip", "link", "set", HOST_PORT, "up")
    return started


def remove_stale_ports() -> list[str]:
    """Remove from ``br-int`` the ports of Neutron ports whose device is gone (``ofport`` -1: a guest's tap or a
    container's veth that a stopped or killed stack never unplugged). The bridge outlives every stack, and such rows
    pile up in Open vSwitch's database. Nothing when Open vSwitch does not run. Returns the ports removed."""
    found = _ovs("ovs-vsctl", "--format=json", "--columns=name,external_ids", "find", "interface", "ofport=-1",
                 check=False)  # fmt: skip
    if found.returncode != 0:
        return []
    stale = [name for name, (_, ids) in json.loads(found.stdout)["data"] if any(k == "iface-id" for k, _ in ids)]
    for port in stale:
        _ovs("ovs-vsctl", "--if-exists", "del-port", BRIDGE, port, check=False)
    return stale


def stop_daemons() -> None:
    """Remove ``br-int`` and ``br-phys`` (with the host's port ``dlhost`` and any port left on them), then stop
    ``ovs-vswitchd`` and ``ovsdb-server``. Called only by whoever started them (:func:`ensure_bridge` said so): the
    machine is left as it was found, with no bridge device and no bridge row in Open vSwitch's database (the next
    :func:`ensure_bridge` makes them again in about a second). Open vSwitch's database file itself stays, as the
    Debian package installed it."""
    if _answers("ovsdb-server"):
        for bridge in (BRIDGE, PHYSICAL_BRIDGE):
            _ovs("ovs-vsctl", "--if-exists", "del-br", bridge, check=False)
    for daemon in ("ovs-vswitchd", "ovsdb-server"):
        if _answers(daemon):
            _ovs("ovs-appctl", "-t", daemon, "exit", check=False)
