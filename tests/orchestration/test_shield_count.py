"""The shield is counted (issue 57): campaigns that shield the same CPUs of a host hold it together, and only the
last one out restores the host; another campaign's settings are refused while it is held.

The role's real module, run as Ansible runs it (a process, arguments in JSON), on a state file of its own: a
shield already held (as a first campaign's ``present`` leaves it) that asks nothing of the machine to restore,
so the test changes no task, IRQ or knob of this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import REPO, need

MODULE = REPO / "roles" / "measurement_shield" / "library" / "dlinfra_shield.py"
SETTINGS = {"cpus": [1], "governor": "performance", "turbo": "off", "thp": ""}


def _module(state_file: Path, **args: str) -> dict[str, Any]:
    """One call of the module, as Ansible makes it; its JSON answer."""
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": {"state_file": str(state_file), **args}})
    proc = subprocess.run([sys.executable, str(MODULE), payload], capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout)


def test_overlapping_campaigns_hold_the_shield_together_and_the_last_one_out_restores(tmp_path: Path) -> None:
    need(len(os.sched_getaffinity(0)) >= 2, "two CPUs (a shield leaves one to the others)")
    state = tmp_path / "shield.json"
    # Campaign a's shield, as its present left it (nothing recorded to give back: this machine stays as it is).
    held = {"settings": SETTINGS, "holders": ["a"], "others": [], "tasks": {}, "irqs": {}, "missing": [], "knobs": {}}
    state.write_text(json.dumps(held))
    present = {"state": "present", "cpus": "1"}

    joined = _module(state, holder="b", **present)
    assert joined["changed"] and joined["holders"] == 2, joined
    again = _module(state, holder="b", **present)
    assert not again["changed"] and again["holders"] == 2, again
    other = _module(state, holder="c", state="present", cpus="0")
    assert other.get("failed") and "other settings" in other["msg"], other
    assert json.loads(state.read_text())["holders"] == ["a", "b"]

    b_leaves = _module(state, holder="b", state="absent")  # the second campaign ends first
    assert b_leaves["changed"] and b_leaves["holders"] == 1, b_leaves
    assert json.loads(state.read_text())["holders"] == ["a"], "a's CPUs stay shielded until a ends"
    twice = _module(state, holder="b", state="absent")
    assert not twice["changed"] and state.exists(), twice

    a_leaves = _module(state, holder="a", state="absent")
    assert a_leaves["changed"] and a_leaves["holders"] == 0 and not state.exists(), a_leaves


def test_an_absent_without_holder_restores_whoever_holds_it(tmp_path: Path) -> None:
    """By hand (the role's README) or a sweep of a run recorded before holders: the host is restored."""
    state = tmp_path / "shield.json"
    held = {"settings": SETTINGS, "holders": ["a", "b"], "others": [], "tasks": {}, "irqs": {}, "missing": [],
            "knobs": {}}  # fmt: skip
    state.write_text(json.dumps(held))
    restored = _module(state, state="absent")
    assert restored["changed"] and restored["holders"] == 0 and not state.exists(), restored
