"""Inside the guest: turn an OpenStack config drive into the folder dlinfra's own seed disk carries.

A guest that Nova boots gets no ``cidata`` seed disk: Nova writes a config drive (label ``config-2``) with
``openstack/latest/meta_data.json`` (the keypair's public key, the server's name and UUID, its metadata) and
``network_data.json`` (the port's MAC and the fixed address Neutron allocated). The image's seed unit
(``SEED_SCRIPT`` in :mod:`dlinfra.providers.libvirt.image`) runs this file with the guest's own ``python3`` to
write what the ``cidata`` disk would have held, then installs it by the same code path. The difference that
matters: nobody made the host key beforehand, so it is made here, once per server (kept across reboots of that
server), and the seed prints its public half on the serial console between cloud-init's markers, where the
``nova`` provider reads it through Nova's console API and pins it (no trust on first use).

Standalone on purpose: it is copied into the image and runs there, so it imports the standard library only.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Server metadata key that names the login user (the ``nova`` provider sets it from its ``user`` option).
USER_KEY = "dlinfra_user"
DEFAULT_USER = "dlinfra"
#: Where the host key of the server this disk was made for is kept, so a reboot keeps the key its console printed.
KEPT_KEY = "/var/lib/dlinfra/ssh_host_ed25519_key"
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_HOSTNAME = re.compile(r"[^a-z0-9-]+")


class DriveError(Exception):
    """The config drive lacks something the guest needs; the message says what."""


def _load(drive: Path, name: str) -> dict[str, Any]:
    path = drive / "openstack" / "latest" / name
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DriveError(f"config drive: cannot read {path.relative_to(drive)}: {exc}") from None
    if not isinstance(data, dict):
        raise DriveError(f"config drive: {path.relative_to(drive)} is not a JSON object")
    return data


def hostname(meta: dict[str, Any]) -> str:
    """The server's name as a host name: its first label, lowercase, letters, digits and '-' only."""
    raw = str(meta.get("name") or meta.get("hostname") or "dlinfra-guest").split(".")[0].lower()
    return _HOSTNAME.sub("-", raw).strip("-")[:63] or "dlinfra-guest"


def login_user(meta: dict[str, Any]) -> str:
    user = str((meta.get("meta") or {}).get(USER_KEY) or DEFAULT_USER)
    if not _USER.match(user):
        raise DriveError(f"config drive: metadata {USER_KEY}={user!r} is not a user name")
    return user


def authorized_keys(meta: dict[str, Any]) -> str:
    keys = [str(k).strip() for k in (meta.get("public_keys") or {}).values() if str(k).strip()]
    if not keys:
        raise DriveError("config drive: meta_data.json has no public_keys (boot the server with a keypair)")
    return "\n".join(keys) + "\n"


def _is_default(route: dict[str, Any]) -> bool:
    return ipaddress.IPv4Network(f"{route['network']}/{route['netmask']}").prefixlen == 0


def network_unit(network: dict[str, Any]) -> tuple[str, str]:
    """systemd-networkd's unit for the first IPv4 network, and resolv.conf: static where Neutron gave a fixed
    address without DHCP (``type: ipv4``), DHCP where the subnet runs it (``ipv4_dhcp``)."""
    links = {str(link.get("id")): link for link in network.get("links") or []}
    for net in network.get("networks") or []:
        kind = net.get("type")
        if kind not in ("ipv4", "ipv4_dhcp"):
            continue
        mac = str(links.get(str(net.get("link")), {}).get("ethernet_mac_address") or "")
        if not mac:
            raise DriveError(f"config drive: network {net.get('id')} names no link with a MAC address")
        unit = f"[Match]\nMACAddress={mac}\n\n[Network]\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
        if kind == "ipv4_dhcp":
            return unit + "DHCP=ipv4\n", ""
        address = ipaddress.IPv4Interface(f"{net['ip_address']}/{net['netmask']}")
        unit += f"Address={address.with_prefixlen}\n"
        routes = net.get("routes") or []
        gateways = [r["gateway"] for r in routes if r.get("gateway") and _is_default(r)]
        servers = [s["address"] for s in network.get("services") or [] if s.get("type") == "dns" and s.get("address")]
        if gateways:
            unit += f"Gateway={gateways[0]}\n"
        resolv = "".join(f"nameserver {s}\n" for s in servers or gateways[:1])
        return unit, resolv
    raise DriveError("config drive: network_data.json has no IPv4 network")


def host_key(out: Path, server_id: str, kept: Path) -> None:
    """The server's ed25519 host key into ``out``: the one made at its first boot, else a new one (kept)."""
    marker = kept.with_name(kept.name + ".server")
    if not (kept.is_file() and marker.is_file() and marker.read_text().strip() == server_id):
        kept.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for stale in (kept, kept.with_name(kept.name + ".pub")):
            stale.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(kept)], check=True)
        marker.write_text(server_id + "\n")
    shutil.copyfile(kept, out / "ssh_host_ed25519_key")
    (out / "ssh_host_ed25519_key").chmod(0o600)
    public = kept.with_name(kept.name + ".pub").read_text().split()
    (out / "ssh_host_ed25519_key.pub").write_text(f"{public[0]} {public[1]}\n")


def convert(drive: Path, out: Path, kept: Path = Path(KEPT_KEY)) -> None:
    """Write into ``out`` the files of a ``cidata`` seed's ``dlinfra/`` folder, from the config drive at ``drive``."""
    meta = _load(drive, "meta_data.json")
    unit, resolv = network_unit(_load(drive, "network_data.json"))
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    (out / "hostname").write_text(hostname(meta) + "\n")
    (out / "user").write_text(login_user(meta) + "\n")
    (out / "authorized_keys").write_text(authorized_keys(meta))
    (out / "10-dlinfra.network").write_text(unit)
    (out / "resolv.conf").write_text(resolv)
    host_key(out, str(meta.get("uuid") or ""), kept)


def main(argv: list[str]) -> int:
    try:
        convert(Path(argv[1]), Path(argv[2]))
    except (DriveError, KeyError, ValueError) as exc:
        print(f"dlinfra-seed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
