"""The bounds that keep hostile input cheap also let every real spec and inventory through, and bound Ansible."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support import REPO

from dlinfra.errors import SpecError, TargetError
from dlinfra.inventory import MAX_HOSTS, _run_bounded, check_inventory_files
from dlinfra.orchestration.spec import load_spec
from dlinfra.safe_yaml import Limits, load
from dlinfra.text import bounded, excerpt, printable


@pytest.mark.parametrize("path", sorted((REPO / "campaigns").glob("*.yml")), ids=lambda p: p.name)
def test_shipped_campaigns_load(path: Path) -> None:
    assert load_spec(path).workloads


@pytest.mark.parametrize("path", sorted((REPO / "inventory").glob("*.yml")), ids=lambda p: p.name)
def test_shipped_inventories_pass_the_checks(path: Path) -> None:
    check_inventory_files(path)


def test_inventory_anchors_and_merge_keys_are_fine_and_their_secrets_known(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n"
        "  vars: &common\n"
        "    ansible_user: bench\n"
        "    ansible_become_password: 'PW-from-anchor'\n"
        "  hosts:\n"
        "    node1: {<<: *common, ansible_host: 10.0.0.1, dlinfra_cpus: '0-3'}\n"
        "    node2: *common\n"
        "    'web[01:20].example.com':\n"
    )
    assert check_inventory_files(inv) == {"PW-from-anchor"}


def test_a_folder_inventory_checks_group_vars_and_refuses_scripts_unless_allowed(tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text("[gpu]\nnode1 ansible_host=10.0.0.1 ansible_password=PW-in-ini\n")
    script = tmp_path / "cloud.py"
    script.write_text("#!/usr/bin/env python3\nprint('{}')  # a dynamic inventory: Ansible runs it\n")
    script.chmod(0o755)
    (tmp_path / "README.md").write_text("Ansible skips this ; |\n")
    with pytest.raises(SpecError, match=r"cloud\.py is executable.*--allow-inventory-code"):
        check_inventory_files(tmp_path)
    assert check_inventory_files(tmp_path, allow_code=True) == {"PW-in-ini"}
    script.unlink()
    assert check_inventory_files(tmp_path) == {"PW-in-ini"}
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("dlinfra_cpus: '0-3'\ndlinfra_cpus: '4-7'\n")
    with pytest.raises(SpecError, match=r"group_vars/gpu\.yml:2: dlinfra_cpus: duplicate key 'dlinfra_cpus'"):
        check_inventory_files(tmp_path, allow_code=True)


def test_a_large_real_inventory_is_checked_quickly(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    lines = [
        f"    n{i}: {{ansible_host: 10.0.{i // 250}.{i % 250 + 1}, dlinfra_cpus: '0-7'}}" for i in range(MAX_HOSTS)
    ]
    inv.write_text("all:\n  hosts:\n" + "\n".join(lines) + "\n")
    started = time.monotonic()
    check_inventory_files(inv)
    # Bounded, not a speed goal (those are make bench's): 0.9 s here while the suite ran, over 1 s in one run of
    # the whole suite; a check quadratic in the hosts would take minutes for 10,000 of them.
    assert time.monotonic() - started < 15.0


def test_excerpt_is_short_and_one_line() -> None:
    text = excerpt("a\n" * 10_000)
    assert len(text) <= 85 and "\n" not in text and text.endswith("…")
    assert excerpt("steps") == "'steps'"
    assert len(excerpt(list(range(10_000)))) <= 85


def test_limits_apply_to_any_yaml(tmp_path: Path) -> None:
    path = tmp_path / "x.yml"
    path.write_text("a: &a [1, 2]\nb: *a\n")
    assert load(path, "file", Limits()).data == {"a": [1, 2], "b": [1, 2]}
    with pytest.raises(SpecError, match=r"x\.yml:1: a: anchors and aliases"):
        load(path, "file", Limits(aliases=False))
    with pytest.raises(SpecError, match="more than 3 values"):
        load(path, "file", Limits(max_nodes=3))


def test_ansible_inventory_is_bounded_in_time_and_output() -> None:
    env = dict(os.environ)
    started = time.monotonic()
    with pytest.raises(TargetError, match=r"took longer than 0\.5 s and was stopped"):
        _run_bounded(["sleep", "30"], env, 0.5, 1 << 20)
    assert time.monotonic() - started < 3
    with pytest.raises(TargetError, match="wrote more than 1 MiB and was stopped"):
        _run_bounded(["yes"], env, 10, 1 << 20)
    assert _run_bounded(["echo", "ok"], env, 10, 1 << 20) == (0, b"ok\n", b"")


def test_printable_makes_terminal_controls_visible_and_keeps_json_valid() -> None:
    hostile = "demo\x1b]0;owned\x07\x1b[2J\u202egnp.exe\x9b"
    shown = printable(hostile)
    assert not any(c in shown for c in "\x1b\x07\u202e\x9b")
    assert "\\u001b]0;owned\\u0007" in shown and "\\u202e" in shown
    assert json.loads(f'"{printable(json.dumps(hostile, ensure_ascii=False)[1:-1])}"') == hostile
    assert printable("line one\nline two\ttab") == "line one\nline two\ttab"


def test_bounded_keeps_a_message_short_its_start_and_its_hint() -> None:
    line = bounded("spec.yml:3: field: " + "x" * 100_000 + " (the hint)")
    assert len(line) <= 501 and line.startswith("spec.yml:3: field:") and line.endswith("(the hint)")
    assert bounded("a\nb") == "a b"
