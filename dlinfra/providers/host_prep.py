"""Host preparation: the engines and hypervisors a provider uses, made to answer by the ``*_host`` roles.

Why a playbook and not Python: starting and checking a daemon, a storage pool or a runtime's defaults is
host configuration, which the roles ``docker_host``, ``podman_host`` and ``libvirt_host`` own, documented
and idempotent. dlinfra runs ``playbooks/prepare.yml`` before a provider makes anything (so a fresh host
just works, and a broken one fails with the task that failed, naming the host), and an operator can run the
same playbook by hand. A prepared host reports changed=0. The roles run with ``*_install: false``: dlinfra
starts what is installed and says what to install; it never installs packages on a user's host by itself.

Only the local testbed's per-namespace dockerds stay Python (``testbed/dockerd.py``): they are part of the
testbed, not of a host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlinfra.errors import TargetError
from dlinfra.runtime.ansible import LOCAL_HOST, new_ident, run_playbook
from dlinfra.runtime.progress import phase

PREPARE_PLAYBOOK = "prepare.yml"
Role = Literal["docker", "podman", "libvirt"]
#: The play of ``prepare.yml`` each role's hosts go in.
GROUPS: Mapping[Role, str] = {
    "docker": "dlinfra_docker_hosts",
    "podman": "dlinfra_podman_hosts",
    "libvirt": "dlinfra_hypervisors",
}


@dataclass(frozen=True, eq=False)
class HostToPrepare:
    """One host and the role it needs; ``reach`` is how Ansible connects (empty: this machine)."""

    name: str
    role: Role
    reach: Mapping[str, Any] = field(default_factory=dict)
    #: Role variables for this host (a socket, a libvirt URI), merged over the defaults.
    settings: Mapping[str, Any] = field(default_factory=dict)


def controller(role: Role, **settings: Any) -> HostToPrepare:
    """This machine, prepared for ``role`` (it builds images and reaches the local hypervisor)."""
    return HostToPrepare("localhost", role, LOCAL_HOST, settings)


def inventory(hosts: Sequence[HostToPrepare]) -> dict[str, Any]:
    """The prepare playbook's inventory: each host in its role's group, with its reach and settings."""
    host_vars: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for host in hosts:
        values = host_vars.setdefault(host.name, {})
        values.update(host.reach or LOCAL_HOST)
        values[f"{host.role}_host_install"] = False
        values.update({f"{host.role}_host_{key}": value for key, value in host.settings.items()})
        groups.setdefault(GROUPS[host.role], {"hosts": {}})["hosts"][host.name] = None
    return {"all": {"hosts": host_vars, "children": groups}}


def prepare(hosts: Sequence[HostToPrepare], *, artifacts_dir: Path | None = None) -> int:
    """Run ``playbooks/prepare.yml`` on ``hosts``; return how many tasks changed something.

    Raises a TargetError naming the host and the task that failed (e.g. dockerd missing there).
    """
    if not hosts:
        return 0
    unique = list({(h.name, h.role): h for h in hosts}.values())  # several hosts may share one hypervisor
    described = ", ".join(sorted({f"{h.name} ({h.role})" for h in unique}))
    with phase("prepare hosts", described):
        result = run_playbook(
            PREPARE_PLAYBOOK,
            inventory=inventory(unique),
            artifacts_dir=artifacts_dir,
            ident=new_ident("prepare"),
            quiet=True,
        )
        if not result.ok:  # raised inside the phase, so its end line says it failed
            failure = result.failures[0] if result.failures else f"ended with rc {result.rc}"
            kept = f" (artifacts in {result.artifacts})" if artifacts_dir else ""
            raise TargetError(
                f"preparing hosts failed: {failure}",
                f"fix that host and run again; 'ansible-playbook -i INVENTORY playbooks/prepare.yml' shows more{kept}",
            )
    return result.changed
