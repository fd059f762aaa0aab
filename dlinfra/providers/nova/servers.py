"""What Nova says of a run's servers: ACTIVE or ERROR (with its fault), the address to reach each one at, and the
host keys its console printed. Read only: creating and deleting is :mod:`dlinfra.providers.nova.cloud`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dlinfra.errors import TargetError
from dlinfra.providers.nova.cloud import run_servers
from dlinfra.runtime.wait import WaitTimedOut, wait_for

_HOST_KEY = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp256|ssh-rsa) ([A-Za-z0-9+/=]+)(?:\s|$)")


def server_address(server: Any, network: str) -> str:
    """The server's address on ``network``: a floating IPv4 first, then a fixed IPv4, then any."""
    entries = list((server.addresses or {}).get(network) or [])
    if not entries:
        raise TargetError(
            f"nova: server {server.name} has no address on network {network}",
            f"its networks: {', '.join(server.addresses or {}) or 'none'}",
        )

    def rank(entry: Mapping[str, Any]) -> tuple[int, int]:
        return (0 if entry.get("OS-EXT-IPS:type") == "floating" else 1, 0 if entry.get("version") == 4 else 1)

    return str(sorted(entries, key=rank)[0]["addr"])


def host_keys_from_console(console: str) -> list[str]:
    """``TYPE BASE64`` host keys from a console log: the block cloud-init prints between
    ``-----BEGIN SSH HOST KEY KEYS-----`` and ``-----END SSH HOST KEY KEYS-----`` (other lines are not trusted)."""
    keys: list[str] = []
    inside = False
    for raw in console.splitlines():
        line = re.sub(r"^\[[ 0-9.]+\]\s*", "", raw.strip())  # a kernel timestamp, when the console adds one
        if "BEGIN SSH HOST KEY KEYS" in line:
            inside = True
        elif "END SSH HOST KEY KEYS" in line:
            inside = False
        elif inside and (match := _HOST_KEY.match(line)):
            keys.append(f"{match.group(1)} {match.group(2)}")
    return keys


def wait_active(conn: Any, prefix: str, label: str, count: int, timeout: float, interval: float) -> dict[str, Any]:
    """Poll the run's servers until all ``count`` are ACTIVE; ERROR or the timeout is one error naming servers."""
    servers: dict[str, Any] = {}

    def all_active() -> dict[str, Any] | None:
        servers.clear()
        servers.update((s.name, s) for s in run_servers(conn, prefix, label))
        failed = [s for s in servers.values() if s.status == "ERROR"]
        if failed:
            raise TargetError(
                "nova: " + "; ".join(fault_of(conn, s) for s in failed),
                "'No valid host' means no hypervisor has room for the flavor: lower vcpus, ram_mb or disk_gb, "
                "drop cpu_policy/mem_page_size/pci_alias the hosts cannot give, or ask for fewer servers; "
                "see openstack server show",
            )
        return dict(servers) if len(servers) == count and all(s.status == "ACTIVE" for s in servers.values()) else None

    try:
        return wait_for(f"nova: servers of run {label}", all_active, timeout=timeout, interval=interval)
    except WaitTimedOut:
        states = ", ".join(f"{n} {s.status}" for n, s in sorted(servers.items())) or "none listed"
        raise TargetError(f"nova: servers of run {label} not ACTIVE after {timeout:g} s: {states}") from None


def fault_of(conn: Any, server: Any) -> str:
    fault = server.fault or {}
    if not fault:
        fault = conn.compute.get_server(server.id).fault or {}
    return f"server {server.name} ({server.id}) went to ERROR: {fault.get('message') or 'Nova gave no fault'}"
