"""Rules for every test folder: what a test uses decides its markers, and what it shares decides its worker.

Markers: ``integration`` when a test uses a real component (a daemon, a local testbed, a guest, PostgreSQL, an
OpenStack service); ``slow`` when it trains TensorFlow or takes more than a few seconds. ``make check`` runs the
rest (the fast tier) with ``DLINFRA_TEST_TIER=fast``, where :func:`support.component` fails a test that reaches for
a real component without its marker, so the markers cannot drift from what the tests do.

Workers: ``make test`` runs the fast tier on two pytest-xdist workers (``-n 2``: it computes) and the rest on three
(``-n 3``): most of that part keeps one core busy at a time (one emulated guest, one Ansible run, one TensorFlow
process) and waits in between (SSH round trips, daemons, playbooks), so a third worker fills the machine's two
cores where two left one idle. Each worker has its own local testbed (:data:`support.TESTBED`). A test file is a
unit of work, so that its module fixtures (a booted guest, a testbed) are made once, on one worker; :data:`UNITS`
joins files that must not run beside each other: the ``openstack`` unit holds the tests that start the OpenStack
services (fixed ports; a second stack would cost a minute), the ``hypervisor`` unit the guests whose boot times the
tests assert. Other guests run beside each other: two runs take their network's /24 and their pool's base volume
under this machine's locks (``network.subnet_choice``, ``Hypervisor._provision``). The boot-reset tests'
firewall rule drops their own /24 only. What
needs the machine to itself (marker ``alone``: it compares measured speeds, or stops libvirtd) runs after the
parallel part, one test after another. The grouping is this file's scheduler (:func:`pytest_xdist_make_scheduler`),
by test path: xdist's own ``xdist_group`` marker does not group under pytest 9.2, whose node ids it can no longer
rewrite.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import support

#: The units of work that run on one worker, one test after another: (unit, test path prefixes, parameter ids).
#: A test matches a unit when its node id starts with one of the prefixes and, where ids are given, holds one.
UNITS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # Keystone, Placement, Glance, Neutron, Nova and Ironic: one stack per worker process, on fixed ports.
    (
        "openstack",
        ("tests/providers/test_ironic.py", "tests/providers/test_ironic_redfish.py", "tests/providers/test_nova.py"),
        (),
    ),
    ("openstack", ("tests/providers/test_conformance.py",), ("[ironic-", "[nova-")),
    # The guests whose boot the tests time (a reset after a silent SSH, a kernel that hangs on purpose) and the
    # pool pruning of the libvirt role, one at a time. Every other guest test is its own unit: runs at once are
    # safe (the run network's /24 and the pool's base volumes are taken under this machine's locks).
    ("hypervisor", ("tests/vm/test_boot_reset.py", "tests/vm/test_kvm_stall.py", "tests/vm/test_playbook.py"), ()),
)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to (:data:`UNITS`), else its file's."""
    for unit, prefixes, ids in UNITS:
        if nodeid.startswith(prefixes) and (not ids or any(i in nodeid for i in ids)):
            return unit
    return nodeid.split("::", 1)[0]


#: Seconds each unit of work took in a full run (``make test`` writes ``artifacts/test-durations.json``; copy it
#: here when units change much): the scheduler hands out the longest first, so that no long unit starts last
#: and leaves one worker idle at the end. A unit not listed counts 5 s per test.
DURATIONS = Path(__file__).with_name("durations.json")
#: Where a run writes what each unit took (the file above's next version).
MEASURED = support.REPO / "artifacts" / "test-durations.json"


def _expected_seconds(units: dict[str, list[str]]) -> dict[str, float]:
    try:
        known = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        known = {}
    return {unit: float(known.get(unit, 5.0 * len(tests))) for unit, tests in units.items()}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduler with :func:`work_unit` as the scope, the longest unit (:data:`DURATIONS`) first."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def schedule(self) -> None:
            """xdist's own, but for the order of the work queue: the longest unit first. (Reordering the
            collection instead would not do: the workers run tests by their index in their own collection.)"""
            if self.collection is not None or not self.collection_is_completed:
                return super().schedule()
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return None
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return None
            units: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            seconds = _expected_seconds({unit: list(tests) for unit, tests in units.items()})
            for unit in sorted(units, key=lambda unit: -seconds[unit]):
                self.workqueue[unit] = units[unit]
            for _ in range(max(0, len(self.nodes) - len(self.workqueue))):  # more workers than work
                unused, _assigned = self.assigned_work.popitem()
                unused.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()
            return None

    return ByUnit(config, log)


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's setup, call and teardown time, by unit (the controller process sees every worker's)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        unit = work_unit(report.nodeid)
        _DURATIONS[unit] = _DURATIONS.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    # The services this process started (on a worker too: see support.py), last started first: Open vSwitch stops
    # after the stack that runs on it.
    for stop in reversed(support.SESSION_STOPS):
        stop()
    if _DURATIONS and not os.environ.get("PYTEST_XDIST_WORKER") and len(_DURATIONS) > 20:  # a full run, not one file
        MEASURED.parent.mkdir(parents=True, exist_ok=True)
        previous = json.loads(MEASURED.read_text()) if MEASURED.is_file() else {}
        MEASURED.write_text(json.dumps({**previous, **{k: round(v, 1) for k, v in _DURATIONS.items()}}, indent=1))


def pytest_configure(config: pytest.Config) -> None:
    # The suite is a busy host by design (three workers, guests, daemons): a campaign here judges interference only
    # where its spec asks (tests of it set interference.max_foreign_share), so that plumbing tests do not rerun.
    os.environ.setdefault("DLINFRA_MAX_FOREIGN_SHARE", "1")
    # As dlinfra's CLI does (cli/app.py): the interpreter's own bin folder first on PATH, so that a bare
    # ``.venv/bin/pytest`` finds ansible-playbook and the rest beside it instead of skipping for want of them.
    here = str(Path(sys.executable).parent)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PATH", "")]))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker's readline exports an 80x24 terminal it does not have: the CLI's output, read through a pipe
        # as a user's script reads it, must keep the width dlinfra gives a pipe, as in a run without workers.
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    support.current_test = item
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        support.current_test = None
