"""Mitogen's ``mitogen_linear`` strategy without Mitogen's CPU pinning: the strategy every dlinfra playbook runs.

Why: ansible_mitogen pins the playbook's processes to fixed CPUs and every process they start to the rest
(``ansible_mitogen.affinity``): on a machine of two or three cores, all of it to CPU 1. A daemon that a local task
starts (``docker_host`` and ``libvirt_host`` start dockerd, libvirtd and virtlogd where no init system does)
keeps that mask for good, and so does everything it starts: every container and guest of that machine then ran
on CPU 1 alone, whatever its cpuset said (a container given CPUs 0-1 saw [1]). A benchmark's daemons must see the
machine's CPUs as they are; Ansible's own processes are the kernel's to place. Mitogen's base ``Policy`` pins
nothing.
"""

from __future__ import annotations

import ansible_mitogen.affinity
import ansible_mitogen.loaders
import ansible_mitogen.strategy

ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):  # type: ignore[misc,valid-type]
    """``mitogen_linear``, unpinned."""
