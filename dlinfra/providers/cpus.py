"""A target's CPU set, decided in one place for every layer and provider.

The rule: the inventory's ``dlinfra_cpus`` when the host has it, else what the host reports usable (its
cgroup's cpuset, else every online CPU: ``USABLE_CPUS_SH``, the rule the payload itself pins by). Bare metal
takes that set; a container takes a slice of it (one per container on the host, as cells split a set); a Zun
container the cpuset Zun gave it, else its host's; a guest is another kernel, whose targets use its own vCPUs.

Why one place: with a reading per provider, a ``ctr`` target on a host without ``dlinfra_cpus`` got an empty
set (unpinned) while ``bm`` on the same host got the probe's, and the two layers were measured on different CPUs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from dlinfra import cancel
from dlinfra.errors import TargetError
from dlinfra.inventory import InventoryHost
from dlinfra.payload.affinity import USABLE_CPUS_SH
from dlinfra.payload.cpuset import CpuSetError, parse_cpuset
from dlinfra.transport.ssh import through

#: The probe, as an argv: run on the host (over SSH, or here for a host of this machine).
PROBE = ["sh", "-c", USABLE_CPUS_SH]


def decide(given: Sequence[int], probed: str, host: str) -> list[int]:
    """The CPU set of a target on ``host``: ``given`` (the inventory's) if any, else what the probe printed."""
    if given:
        return sorted(given)
    text = probed.strip()
    if not text:
        return []
    try:
        return sorted(parse_cpuset(text))
    except CpuSetError:
        raise TargetError(f"host {host}: its usable CPUs read {text[:60]!r}", "set dlinfra_cpus for it") from None


def host_cpus(host: InventoryHost, via: Sequence[str] = ()) -> list[int]:
    """:func:`decide` for an inventory host; the probe runs (through ``via``, an ssh argv prefix, or here when
    empty) only when the inventory gives no set."""
    if host.cpus:
        return host.cpus
    try:  # a bring-up step: a stopped campaign ends it within a second
        done = cancel.run_process(through(via, PROBE), timeout=60)
    except subprocess.TimeoutExpired:
        raise TargetError(f"host {host.name}: reading its usable CPUs took over 60 s", "is it reachable?") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TargetError(f"host {host.name}: cannot read its usable CPUs: {last[:200]}", "set dlinfra_cpus for it")
    return decide([], done.stdout, host.name)
