"""Read any Ansible inventory into dlinfra hosts.

Why through ``ansible-inventory --list``: users keep their clusters in
Ansible inventories (YAML or INI, a file or a folder, with group_vars and
plugins); letting Ansible itself resolve them means dlinfra sees exactly the
hosts and variables a playbook would.

dlinfra reads its own host variables (``dlinfra_*``, listed in
:data:`KNOWN_VARS`) and refuses any other ``dlinfra_*`` name, so a typo such as
``dlinfra_cpu`` is an error naming the host rather than a silently ignored
setting.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dlinfra.errors import SpecError, TargetError
from dlinfra.record import LAYERS

T = TypeVar("T")

#: dlinfra host variables and what they mean (docs/orchestration.md lists them too).
KNOWN_VARS: dict[str, str] = {
    "dlinfra_cpus": "CPU set the payload may use on this host, cpuset list format ('0-3,8')",
    "dlinfra_gpus": "GPU ids on this host (list), for the vm/ctr GPU paths",
    "dlinfra_layers": "layers this host can carry (list of bm, vm, ctr, ctr-vm)",
    "dlinfra_home": "folder on the host for the payload venv, wheelhouse and run files",
    "dlinfra_python": "Python used to create the payload venv (default python3)",
    "dlinfra_known_hosts": "known_hosts file holding this host's key (default ~/.ssh/known_hosts)",
    "dlinfra_memory_bytes": "memory the payload may use (informational; default: the host's)",
    "dlinfra_netns": "network namespace of a local testbed host (set by 'dlinfra testbed')",
    "dlinfra_emulated": "true when the target is emulated (QEMU TCG): its timings are not comparable",
    "dlinfra_container_engine": "docker (default) or podman: the engine of this host's ctr targets",
    "dlinfra_libvirt_uri": "libvirt URI of this host's hypervisor for the vm layer (qemu:///system when local)",
}


@dataclass
class InventoryHost:
    """One host of an inventory, with the variables dlinfra uses already checked."""

    name: str
    address: str
    groups: list[str]
    vars: dict[str, Any] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.vars.get("ansible_port", 22))

    @property
    def user(self) -> str:
        return str(self.vars.get("ansible_user") or os.environ.get("USER") or "root")

    @property
    def cpus(self) -> list[int]:
        return parse_cpus(str(self.vars["dlinfra_cpus"])) if "dlinfra_cpus" in self.vars else []

    @property
    def layers(self) -> list[str]:
        return list(self.vars.get("dlinfra_layers", ["bm"]))

    @property
    def home(self) -> str:
        return str(self.vars.get("dlinfra_home", "~/.dlinfra"))


_SUBSCRIPT = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<a>-?\d+)(?::(?P<b>-?\d+))?\]$")


def match_pattern(pattern: str, items: list[T], names: Callable[[T], set[str]]) -> list[T]:
    """Items named by an Ansible-style pattern: a name, a group, ``all``, or ``GROUP[i]`` / ``GROUP[i:j]``.

    ``names(item)`` gives every name an item answers to (its own, its host's, its groups). Subscripts are
    inclusive, as in Ansible (``all[0:1]`` is the first two).
    """
    m = _SUBSCRIPT.match(pattern)
    name = m.group("name") if m else pattern
    matched = list(items) if name == "all" else [i for i in items if name in names(i)]
    if m and matched:
        a = int(m.group("a"))
        b = int(m.group("b")) if m.group("b") is not None else a
        a, b = (a % len(matched), b % len(matched)) if a < 0 or b < 0 else (a, b)
        matched = matched[a : b + 1]
    return matched


def parse_cpus(text: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8]; raises ValueError on anything else."""
    cpus: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            a, b = int(lo), int(hi)
            if a > b:
                raise ValueError(f"range {part} runs backwards")
            cpus.extend(range(a, b + 1))
        else:
            cpus.append(int(part))
    if not cpus or any(c < 0 for c in cpus):
        raise ValueError(f"{text!r} names no CPUs")
    return sorted(set(cpus))


def _validate_vars(host: str, hostvars: dict[str, Any], source: str) -> None:
    for key, value in hostvars.items():
        if not key.startswith("dlinfra_"):
            continue
        if key not in KNOWN_VARS:
            raise SpecError(
                f"{source}: host {host}: unknown variable {key}",
                f"dlinfra knows {', '.join(sorted(KNOWN_VARS))}",
            )
        problem = None
        if key == "dlinfra_cpus":
            try:
                parse_cpus(str(value))
            except ValueError as exc:
                problem = f"must be a CPU list like '0-3,8' ({exc})"
        elif key == "dlinfra_layers":
            if not isinstance(value, list) or any(v not in LAYERS for v in value):
                problem = f"must be a list of {', '.join(LAYERS)}"
        elif key == "dlinfra_gpus":
            if not isinstance(value, list):
                problem = "must be a list of GPU ids"
        elif key == "dlinfra_memory_bytes":
            if not isinstance(value, int) or value <= 0:
                problem = "must be a positive integer"
        elif key == "dlinfra_container_engine":
            if value not in ("docker", "podman"):
                problem = "must be docker or podman"
        elif key in ("dlinfra_home", "dlinfra_python", "dlinfra_known_hosts", "dlinfra_netns", "dlinfra_libvirt_uri"):
            if not isinstance(value, str) or not value:
                problem = "must be a non-empty string"
        if problem:
            raise SpecError(f"{source}: host {host}: {key} = {value!r} {problem}")


def load_inventory(source: str | Path) -> list[InventoryHost]:
    """All hosts of an Ansible inventory (file or folder, YAML or INI), in inventory order."""
    path = Path(source)
    if not path.exists():
        raise SpecError(f"inventory {source} does not exist", "give a path to an Ansible inventory file or folder")
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_WARNING": "True", "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_CONFIG", None)
    try:
        proc = subprocess.run(
            ["ansible-inventory", "-i", str(path), "--list"],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
    except FileNotFoundError:
        raise TargetError("ansible-inventory is not installed", "pip install 'dlinfra[controller]'") from None
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if ln.strip()), "no message")
        raise SpecError(f"inventory {source} cannot be read by Ansible: {first.strip()}")
    if "Unable to parse" in proc.stderr or "No inventory was parsed" in proc.stderr:
        first = next(ln for ln in proc.stderr.splitlines() if "parse" in ln)
        raise SpecError(f"inventory {source} cannot be parsed: {first.strip()}")
    data = json.loads(proc.stdout)
    hostvars: dict[str, dict[str, Any]] = data.get("_meta", {}).get("hostvars", {})
    groups_of: dict[str, list[str]] = {}
    order: list[str] = []

    def walk(group: str, seen: tuple[str, ...]) -> None:
        node = data.get(group, {})
        for h in node.get("hosts", []):
            groups_of.setdefault(h, [])
            if group not in groups_of[h] and group not in ("all", "ungrouped"):
                groups_of[h].append(group)
            for parent in seen:
                if parent not in groups_of[h] and parent not in ("all", "ungrouped"):
                    groups_of[h].append(parent)
            if h not in order:
                order.append(h)
        for child in node.get("children", []):
            if child not in seen:
                walk(child, (*seen, group))

    walk("all", ())
    hosts = []
    for name in order:
        hv = hostvars.get(name, {})
        _validate_vars(name, hv, str(source))
        hosts.append(
            InventoryHost(name=name, address=str(hv.get("ansible_host", name)), groups=groups_of[name], vars=hv)
        )
    if not hosts:
        raise SpecError(f"inventory {source} has no hosts")
    return hosts


def select_hosts(hosts: list[InventoryHost], patterns: list[str] | None, where: str) -> list[InventoryHost]:
    """Hosts named by ``patterns`` (host names or group names), in inventory order."""
    if not patterns:
        return list(hosts)
    chosen: list[InventoryHost] = []
    for pattern in patterns:
        matched = [h for h in hosts if h.name == pattern or pattern in h.groups or pattern == "all"]
        if not matched:
            raise SpecError(f"{where}: {pattern!r} is neither a host nor a group of the inventory")
        chosen.extend(h for h in matched if h not in chosen)
    return chosen


def check_resolvable(hosts: list[InventoryHost], source: str) -> None:
    """Every host's address must resolve; a typo'd name is an error naming the host, before any SSH."""
    for h in hosts:
        try:
            socket.getaddrinfo(h.address, h.port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise TargetError(
                f"{source}: host {h.name}: address {h.address!r} does not resolve ({exc.strerror or exc})",
                "fix ansible_host or the name in the inventory",
            ) from None


def check_reachable(hosts: list[InventoryHost], source: str, timeout: float = 5.0) -> None:
    """Every host's SSH port must accept a TCP connection; errors name the host."""
    check_resolvable(hosts, source)
    for h in hosts:
        try:
            with socket.create_connection((h.address, h.port), timeout=timeout):
                pass
        except OSError as exc:
            raise TargetError(
                f"host {h.name} ({h.address}:{h.port}) is unreachable: {exc.strerror or exc}",
                "is the host up and its sshd running?",
            ) from None
