"""The ``ssh`` provider: existing hosts of an Ansible inventory, one ``bm`` target per host.

Nothing is created, so ``down`` has nothing to remove and a crashed run leaves
nothing to sweep. ``up`` checks each host (address resolves, SSH answers with a
known host key) and reads the facts the records need (CPU count, memory, login
home), all hosts in parallel.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

from dlinfra.errors import TargetError
from dlinfra.inventory import InventoryHost, check_resolvable, match_pattern
from dlinfra.payload.affinity import USABLE_CPUS_SH
from dlinfra.providers import cpus
from dlinfra.providers.base import LayerSpec, Provider, Target
from dlinfra.providers.options import Option
from dlinfra.transport import SshTransport

#: One constant script (no inventory value is ever put in it), one line each: home; the CPUs the login may use, by
#: the payload's own rule (a cpuset list: an offline CPU is a gap, a cgroup's cpuset limits it); memory; host name.
_FACTS = f'echo "$HOME"; {USABLE_CPUS_SH}; grep MemTotal /proc/meminfo; uname -n'


def target_from_host(host: InventoryHost, layer: str = "bm") -> Target:
    """The target of an inventory host, before facts are read."""
    hv = host.vars
    return Target(
        layer=layer,
        name=host.name,
        physical_host=host.name,
        address=host.address,
        port=host.port,
        user=host.user,
        key_file=host.key_file,
        known_hosts=host.ssh.known_hosts,
        provider="ssh",
        cpu_set=host.cpus,
        memory_bytes=hv.get("dlinfra_memory_bytes"),
        devices=[f"gpu:{g}" for g in hv.get("dlinfra_gpus", [])],
        emulated=bool(hv.get("dlinfra_emulated", False)),
        home=host.home,
        base_python=str(hv.get("dlinfra_python", "python3")),
        deps_store=hv.get("dlinfra_deps_store"),
        groups=list(host.groups),
        ansible_python=str(hv.get("ansible_python_interpreter", "auto_silent")),
    )


def read_facts(target: Target) -> Target:
    """Fill home (absolute), CPU set and memory from the host itself."""
    link = SshTransport(target.ssh)
    try:
        result = link.run(["sh", "-c", _FACTS])
    finally:
        link.close()
    if not result.ok:
        raise TargetError(f"host {target.name}: cannot read facts: {result.stderr.strip()[:200]}")
    home, usable, mem, hostname = ([*result.stdout.splitlines(), "", "", "", ""])[:4]
    if target.home.startswith("~"):
        target.home = home + target.home[1:]
    elif not target.home.startswith("/"):
        target.home = f"{home}/{target.home}"
    target.cpu_set = cpus.decide(target.cpu_set, usable, target.name)  # the probe rides on the facts' round trip
    if target.memory_bytes is None and mem.split()[1:2]:
        target.memory_bytes = int(mem.split()[1]) * 1024
    target.details.setdefault("hostname", hostname.strip())
    return target


class SshProvider(Provider):
    """Existing hosts as targets; ``down`` leaves them as they were."""

    name = "ssh"
    layers: ClassVar[Mapping[str, str | None]] = {"bm": None}
    options: ClassVar[Mapping[str, Option]] = {
        "hosts": Option("host patterns (names, groups, group[i]) of the inventory hosts to use; default: all that "
                        "carry bm", "patterns"),
    }  # fmt: skip

    def create(self, spec: LayerSpec) -> list[Target]:
        hosts = [h for h in spec.hosts if self.layer in h.layers]
        patterns = spec.options.get("hosts")
        if patterns:
            picked = [h for p in patterns for h in match_pattern(p, hosts, lambda h: {h.name, *h.groups})]
            hosts = [h for h in hosts if h in picked]
        if not hosts:
            raise TargetError(
                f"inventory {spec.inventory} has no host that carries layer {self.layer}", "check dlinfra_layers"
            )
        check_resolvable(hosts, str(spec.inventory))
        return [target_from_host(h, self.layer) for h in hosts]

    def post_create(self, targets: list[Target]) -> None:
        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            list(pool.map(read_facts, targets))
