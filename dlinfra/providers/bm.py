"""The ``bm`` layer: existing SSH hosts from an Ansible inventory, one target per host.

Nothing is created, so ``down`` has nothing to remove. ``up`` checks each host
(address resolves, SSH answers with a known host key) and reads the facts the
records need (CPU count, memory, login home), all hosts in parallel.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dlinfra.errors import TargetError
from dlinfra.inventory import InventoryHost, check_resolvable
from dlinfra.providers.base import LayerSpec, Target

#: One constant script (no inventory value is ever put in it): home, CPUs, memory, hostname.
_FACTS = 'echo "$HOME"; getconf _NPROCESSORS_ONLN; grep MemTotal /proc/meminfo; uname -n'


def target_from_host(host: InventoryHost) -> Target:
    """The bm target of an inventory host, before facts are read."""
    hv = host.vars
    target = Target(
        layer="bm",
        name=host.name,
        physical_host=host.name,
        address=host.address,
        port=host.port,
        user=host.user,
        key_file=hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file"),
        known_hosts=hv.get("dlinfra_known_hosts"),
        cpu_set=host.cpus,
        memory_bytes=hv.get("dlinfra_memory_bytes"),
        devices=[f"gpu:{g}" for g in hv.get("dlinfra_gpus", [])],
        emulated=bool(hv.get("dlinfra_emulated", False)),
        home=host.home,
        base_python=str(hv.get("dlinfra_python", "python3")),
    )
    if "ansible_python_interpreter" in hv:
        target.facts["ansible_python_interpreter"] = hv["ansible_python_interpreter"]
    return target


def read_facts(target: Target) -> Target:
    """Fill home (absolute), CPU set and memory from the host itself over SSH."""
    from dlinfra.orchestration.ssh import connect, remote_command

    conn = connect(target)
    try:
        result = conn.run(remote_command(["sh", "-c", _FACTS]), hide=True, warn=True, in_stream=False)
    finally:
        conn.close()
    if result.exited != 0:
        raise TargetError(f"host {target.name}: cannot read facts: {result.stderr.strip()[:200]}")
    lines = result.stdout.splitlines()
    home, nproc, mem, hostname = ([*lines, "", "", "", ""])[:4]
    if target.home.startswith("~"):
        target.home = home + target.home[1:]
    elif not target.home.startswith("/"):
        target.home = f"{home}/{target.home}"
    if not target.cpu_set and nproc.strip().isdigit():
        target.cpu_set = list(range(int(nproc)))
    if target.memory_bytes is None and mem.split()[1:2]:
        target.memory_bytes = int(mem.split()[1]) * 1024
    target.facts["hostname"] = hostname.strip()
    return target


class BareMetalProvider:
    """Existing hosts as targets; ``down`` leaves them as they were."""

    layer = "bm"

    def __init__(self) -> None:
        self.targets: list[Target] = []

    def up(self, spec: LayerSpec) -> list[Target]:
        hosts = [h for h in spec.hosts if "bm" in h.layers]
        if not hosts:
            raise TargetError(f"inventory {spec.inventory} has no host that carries layer bm", "check dlinfra_layers")
        check_resolvable(hosts, str(spec.inventory))
        targets = [target_from_host(h) for h in hosts]
        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            self.targets = list(pool.map(read_facts, targets))
        return self.targets

    def down(self) -> None:
        self.targets = []

    def describe(self) -> dict[str, Any]:
        return {"layer": self.layer, "targets": [t.name for t in self.targets]}
