"""One rule for a target's CPUs (dlinfra/providers/cpus.py): the inventory's dlinfra_cpus when given, else what
the host reports usable: the same for bm, a container's slice of its host and a Zun container without a cpuset."""

from __future__ import annotations

import pytest

from dlinfra.errors import TargetError
from dlinfra.inventory import InventoryHost
from dlinfra.payload.affinity import usable_cpus
from dlinfra.providers.cpus import decide, host_cpus


def test_the_inventorys_set_wins_over_the_probe() -> None:
    assert decide([3, 1], "0-7", "h1") == [1, 3]
    assert decide([], "0-2,5\n", "h1") == [0, 1, 2, 5]
    assert decide([], "", "h1") == []  # nothing known: unpinned


def test_a_probe_that_reads_junk_names_the_host() -> None:
    with pytest.raises(TargetError, match=r"^host h1: its usable CPUs read 'banana'"):
        decide([], "banana", "h1")


def test_a_host_without_dlinfra_cpus_gets_what_it_reports_usable() -> None:
    """Probed for real (here: a host of this machine), as the payload would pin itself on it."""
    bare = InventoryHost("h1", "127.0.0.1", ["all"], {})
    assert host_cpus(bare) == sorted(usable_cpus())
    given = InventoryHost("h2", "127.0.0.1", ["all"], {"dlinfra_cpus": "0"})
    assert host_cpus(given, via=["false"]) == [0]  # no probe: `false` would have failed it
    with pytest.raises(TargetError, match=r"^host h1: cannot read its usable CPUs"):
        host_cpus(bare, via=["sh", "-c", "echo unreachable >&2; exit 255", "ssh"])
