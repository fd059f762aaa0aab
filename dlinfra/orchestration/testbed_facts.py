"""Testbed metadata: what every target of a campaign ran on, from Ansible facts, stored once per target.

Why: a number that moved between two campaigns means little until the reader sees what else moved: the
kernel, the microcode, the CPU governor, QEMU or the container engine. ``playbooks/facts.yml`` gathers the
machine side (kernel and its command line, CPU model, flags that matter, microcode, SMT, NUMA, memory,
governor, virtualisation); the providers add what only they know (engine, libvirt and QEMU versions, the
accelerator) to each target's ``details``. ``dlinfra compare`` diffs it. Best effort: a target that cannot be
described is said and left out; the campaign goes on. Nothing secret is kept (values are redacted).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from dlinfra.runtime.ansible import run_playbook
from dlinfra.runtime.progress import phase, say
from dlinfra.runtime.wait import wait_for
from dlinfra.target import Target

FACTS_PLAYBOOK = "facts.yml"
#: Keys of a target's ``details`` and ``identity`` that describe its software (not the run).
DETAIL_KEYS = ("engine", "engine_version", "runtime", "libvirt_version", "qemu_version", "virt_type", "emulated")
IDENTITY_KEYS = ("tf_version", "python_version", "payload_hash")


def metadata_of(target: Target, facts: dict[str, Any]) -> dict[str, Any]:
    """One target's metadata: the facts gathered there, then what its provider and payload said."""
    found = dict(facts)
    found.update({k: target.details[k] for k in DETAIL_KEYS if k in target.details})
    found.update({k: (target.identity or {})[k] for k in IDENTITY_KEYS if k in (target.identity or {})})
    if target.devices:
        found["devices"] = list(target.devices)
    return found


def gather_facts(layer: str, targets: list[Target], artifacts: Path) -> dict[str, dict[str, Any]]:
    """What ``playbooks/facts.yml`` read on each of one layer's targets, by target name (the targets on machines
    no other layer has read: :class:`FactsPerMachine` decides).

    Why on the layer's thread, and beside its deploy: the campaign reads it on the layer's bring-up thread while
    the payload deploys there and the other layers still come up (a guest boots), so it costs the campaign
    no wall time of its own; gathered for every layer at once before the first cell, it was 10.5 s of the
    demo's critical path, and after a guest's deploy (both run Ansible modules under emulation) 12-15 s more.
    """
    if not targets:
        return {}
    with phase(f"{layer}: testbed metadata", f"Ansible facts of {len(targets)} target(s)"):
        result = run_playbook(
            FACTS_PLAYBOOK, targets=targets, artifacts_dir=artifacts / "ansible" / f"{layer}-facts", quiet=True
        )
    for failure in result.failures:
        say(f"  [yellow]metadata:[/yellow] {failure} (that target is left out of the metadata)")
    return {t.name: result.reports[t.name]["metadata"] for t in targets if "metadata" in result.reports.get(t.name, {})}


#: One machine as Ansible reaches it: SSH address, port, and the interpreter its modules run on (the ``python``
#: fact is that interpreter's).
Machine = tuple[str, int, str]
#: Reads one layer's targets' facts, by target name (:func:`gather_facts` with the campaign's artifacts folder).
Gather = Callable[[str, list[Target]], dict[str, dict[str, Any]]]


def machine_of(target: Target) -> Machine:
    """The machine a target's facts are read on: a container's is its host's (its SSH goes there)."""
    return (target.address, target.port, target.ansible_python)


class FactsPerMachine:
    """Each machine's facts, read once per campaign however many layers run on it.

    Why: the layers of one machine (``bm`` and ``ctr`` on a host, ``vm`` and ``ctr-vm`` in a guest) read the
    same facts, a container's being its host's; each layer read them again, one more playbook per host, and in
    an emulated guest 35 s of its CPU while the payload deployed beside it. The layers come up on their own
    threads: the first to ask for a machine reads it, a later one waits for that read (and stops waiting when
    its campaign stops). A machine whose read failed is left out for every layer, as it is for the first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: dict[Machine, Future[dict[str, Any] | None]] = {}

    def read(self, layer: str, targets: list[Target], gather: Gather) -> dict[str, dict[str, Any]]:
        """The targets' facts by target name: read here for the machines no other layer has asked for."""
        mine: dict[Machine, Target] = {}
        with self._lock:
            for target in targets:
                machine = machine_of(target)
                if machine not in self._reads:
                    self._reads[machine] = Future()
                    mine[machine] = target
        if len(mine) < len({machine_of(t) for t in targets}):
            say(f"  {layer}: testbed metadata of the machines it shares with another layer: read once")
        found: dict[str, dict[str, Any]] = {}
        try:
            if mine:
                found = gather(layer, list(mine.values()))
        finally:  # whatever happened, no layer waits for this read any longer
            for machine, target in mine.items():
                self._reads[machine].set_result(found.get(target.name))
        return {t.name: facts for t in targets if (facts := self._wait(self._reads[machine_of(t)])) is not None}

    @staticmethod
    def _wait(read: Future[dict[str, Any] | None]) -> dict[str, Any] | None:
        """Another layer's read of a machine: as long as that read takes (its playbook's own bounds), or until
        this layer's campaign stops (:func:`wait_for` raises :class:`Cancelled` then)."""
        wait_for("another layer's read of the testbed facts", read.done, timeout=math.inf, interval=0.2)
        return read.result()


def metadata_rows(targets: list[Target], facts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The described targets' metadata, as rows for :meth:`ResultsStore.store_targets`; after the deploy,
    which gives each target the payload identity the rows carry."""
    return [
        {
            "layer": t.layer,
            "target": t.name,
            "provider": t.provider,
            "physical_host": t.physical_host,
            "target_address": t.address,
            "metadata": metadata_of(t, facts[t.name]),
        }
        for t in targets
        if t.name in facts
    ]
