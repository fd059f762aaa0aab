"""One libvirt NAT network per run: its own bridge, its own /24, fixed addresses for its guests.

A network per run keeps runs apart and makes teardown exact (the run deletes
its network and nothing else). Guests get static addresses from their seed;
the DHCP host entries give the same address to images that ask by DHCP. The
plan is made here; the ``libvirt_guest`` role defines and starts the network
(``templates/network.xml.j2``) and removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlinfra.errors import TargetError
from dlinfra.runtime.runs_registry import machine_lock, recorded_objects

if TYPE_CHECKING:
    import libvirt

# 10.214.0.0/16 is carved into /24s, one per run (the local bare-metal testbed uses 10.213.x).
POOL = ipaddress.ip_network("10.214.0.0/16")
FIRST_GUEST_HOST = 10


@dataclass(frozen=True)
class GuestAddress:
    """Where one guest sits on the run's network."""

    guest: str
    mac: str
    ip: str


@dataclass(frozen=True)
class RunNetwork:
    """The run's network: libvirt name, bridge, subnet, gateway and guest addresses."""

    name: str
    bridge: str
    subnet: ipaddress.IPv4Network
    guests: tuple[GuestAddress, ...]

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    def address_of(self, guest: str) -> GuestAddress:
        return next(g for g in self.guests if g.guest == guest)


def mac_for(run_label: str, guest: str) -> str:
    """A stable locally administered MAC in QEMU's 52:54:00 range, from the run and guest names."""
    digest = hashlib.sha256(f"{run_label}/{guest}".encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def local_routes() -> list[ipaddress.IPv4Network]:
    """Destinations this machine already routes (so a new network does not shadow them)."""
    try:
        out = subprocess.run(
            ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    routes = []
    for route in json.loads(out or "[]"):
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("type") in ("local", "broadcast"):
            continue
        try:
            routes.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
        except ValueError:
            continue
    return routes


def libvirt_subnets(conn: libvirt.virConnect) -> list[ipaddress.IPv4Network]:
    """Subnets of every libvirt network defined on the host, running or not."""
    subnets = []
    for net in conn.listAllNetworks():
        root = ET.fromstring(net.XMLDesc())  # noqa: S314 - libvirtd's own XML
        for ip in root.findall("ip"):
            address, prefix = ip.get("address"), ip.get("prefix") or ip.get("netmask")
            if address and prefix and ":" not in address:
                subnets.append(ipaddress.ip_network(f"{address}/{prefix}", strict=False))
    return subnets


def pick_subnet(taken: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first /24 of the pool that overlaps nothing already taken."""
    for subnet in POOL.subnets(new_prefix=24):
        if subnet.network_address.packed[2] < 10:
            continue  # leave the first few to hand-made setups
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    raise TargetError(
        f"no free /24 left in {POOL} for a run network",
        "tear down old runs: their networks are the dlinfra-r* ones in virsh net-list --all",
    )


#: The kind of the run-registry entry that reserves a run network's subnet from its pick until its down.
SUBNET_KIND = "libvirt-subnet"


@contextlib.contextmanager
def subnet_choice() -> Iterator[list[ipaddress.IPv4Network]]:
    """Hold this machine's lock on picking a run network's /24, and yield the subnets other runs reserved.

    Why: the network is made by the up playbook, seconds after the pick. Two campaigns (or two test workers)
    bringing up guests at once picked the same free /24 and one failed with "Network is already in use". The
    pick is now recorded in the run's state file (kind :data:`SUBNET_KIND`) under this lock, and every later
    pick treats what is recorded there as taken until the run is down (or swept)."""
    with machine_lock("libvirt-subnet"):
        reserved = []
        for entries in recorded_objects({SUBNET_KIND}).values():
            for entry in entries:
                try:
                    reserved.append(ipaddress.ip_network(str(entry.get("subnet"))))
                except ValueError:
                    continue  # not a subnet: a state file is data
        yield reserved


def plan_network(
    run_label: str, guests: list[str], taken: list[ipaddress.IPv4Network], subnet: ipaddress.IPv4Network | None = None
) -> RunNetwork:
    """Name, bridge, subnet and one address per guest for the run ``run_label``."""
    subnet = subnet or pick_subnet(taken)
    if len(guests) > subnet.num_addresses - FIRST_GUEST_HOST - 2:
        raise TargetError(f"{len(guests)} guests do not fit in {subnet}")
    addresses = tuple(
        GuestAddress(g, mac_for(run_label, g), str(subnet.network_address + FIRST_GUEST_HOST + i))
        for i, g in enumerate(guests)
    )
    return RunNetwork(f"dlinfra-{run_label}", f"dlv-{run_label}"[:15], subnet, addresses)


def network_vars(net: RunNetwork) -> dict[str, str]:
    """The network as the ``libvirt_guest`` role takes it (``libvirt_guest_network``); its guests' MACs and
    addresses travel with the guests."""
    return {
        "name": net.name,
        "bridge": net.bridge,
        "gateway": net.gateway,
        "netmask": str(net.subnet.netmask),
        "dhcp_start": str(net.subnet.network_address + FIRST_GUEST_HOST),
        "dhcp_end": str(net.subnet.broadcast_address - 1),
    }
