"""Testbed metadata: one module reads what setup's subsets read, and each machine is read once per campaign.

The module runs as Ansible runs it on this machine (its own process, arguments as JSON); setup runs through
the real ``ansible`` command with a local connection, so the two reports are compared value for value. The
sharing between layers is dlinfra's own scheduling: its reads are stand-ins that count what they were asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import REPO

from dlinfra import cancel
from dlinfra.orchestration.testbed_facts import FactsPerMachine
from dlinfra.target import Target

MODULE = REPO / "playbooks" / "library" / "dlinfra_target_facts.py"


def test_the_module_reports_the_os_cmdline_and_virtualisation_setup_reports(tmp_path: Path) -> None:
    args = json.dumps({"ANSIBLE_MODULE_ARGS": {"flags": []}})
    proc = subprocess.run([sys.executable, str(MODULE), args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    mine = json.loads(proc.stdout)
    setup = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", "ansible.builtin.setup",
         "-a", "gather_subset=!all,!min,distribution,cmdline,virtual"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    facts = json.loads(setup.stdout.split("=>", 1)[1])["ansible_facts"]
    assert mine["os"] == f"{facts['ansible_distribution']} {facts['ansible_distribution_version']}"
    assert mine["kernel_cmdline"] == facts["ansible_proc_cmdline"]
    role, kind = facts["ansible_virtualization_role"], facts["ansible_virtualization_type"]
    assert mine["virtualization"] == f"{role}/{kind}"


def _target(layer: str, address: str) -> Target:
    return Target(layer, f"{layer}@{address}", address, address)


def test_two_layers_on_one_machine_read_its_facts_once_on_whichever_thread_asks_first() -> None:
    facts = FactsPerMachine()
    asked: list[tuple[str, list[str]]] = []
    first_reading, may_finish = threading.Event(), threading.Event()

    def gather(layer: str, targets: list[Target]) -> dict[str, dict]:
        asked.append((layer, [t.address for t in targets]))
        first_reading.set()
        assert may_finish.wait(10)
        return {t.name: {"kernel": f"k-{t.address}"} for t in targets}

    got: dict[str, dict] = {}
    bm = threading.Thread(target=lambda: got.update(facts.read("bm", [_target("bm", "10.0.0.1")], gather)))
    bm.start()
    assert first_reading.wait(10)
    ctr: dict[str, dict] = {}
    reader = threading.Thread(
        target=lambda: ctr.update(facts.read("ctr", [_target("ctr", "10.0.0.1"), _target("ctr", "10.0.0.2")], gather))
    )
    reader.start()
    time.sleep(0.3)
    may_finish.set()
    bm.join(10)
    reader.join(10)
    # ctr read only the machine bm was not reading, and got both: the shared one from bm's read.
    assert asked == [("bm", ["10.0.0.1"]), ("ctr", ["10.0.0.2"])]
    assert got == {"bm@10.0.0.1": {"kernel": "k-10.0.0.1"}}
    assert ctr == {"ctr@10.0.0.1": {"kernel": "k-10.0.0.1"}, "ctr@10.0.0.2": {"kernel": "k-10.0.0.2"}}


def test_a_failed_read_leaves_the_machine_out_for_every_layer_and_nobody_waits_for_it() -> None:
    facts = FactsPerMachine()

    def broken(layer: str, targets: list[Target]) -> dict[str, dict]:
        raise RuntimeError("unreachable")

    with pytest.raises(RuntimeError):
        facts.read("bm", [_target("bm", "10.0.0.1")], broken)
    started = time.monotonic()
    assert facts.read("ctr", [_target("ctr", "10.0.0.1")], broken) == {}
    assert time.monotonic() - started < 1


def test_a_layer_waiting_for_another_layers_read_stops_when_its_campaign_stops() -> None:
    facts = FactsPerMachine()
    reading, stop, release = threading.Event(), threading.Event(), threading.Event()

    def slow(layer: str, targets: list[Target]) -> dict[str, dict]:
        reading.set()
        release.wait(10)
        return {}

    first = threading.Thread(target=lambda: facts.read("vm", [_target("vm", "10.0.0.9")], slow))
    first.start()
    assert reading.wait(10)
    outcome: list[str] = []

    def waiter() -> None:
        with cancel.cancellable(stop):
            try:
                facts.read("ctr-vm", [_target("ctr-vm", "10.0.0.9")], slow)
            except cancel.Cancelled:
                outcome.append("stopped")

    thread = threading.Thread(target=waiter)
    thread.start()
    stop.set()
    thread.join(5)
    release.set()
    first.join(10)
    assert outcome == ["stopped"] and not thread.is_alive()
