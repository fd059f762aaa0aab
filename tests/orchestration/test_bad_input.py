"""Bad specs and inventories: one clear line naming file, line, field or host; exit non-zero; no traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support import run_cli

GOOD = """\
name: t
inventory: {inventory}
steps: 5
workloads:
  - name: mnist-dnn
    matrix: {{mode: [single]}}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    node1:\n      ansible_host: 127.0.0.1\n")
    return inv


def _run(tmp_path: Path, spec_text: str, *extra: str) -> tuple[int, str]:
    spec = tmp_path / "spec.yml"
    spec.write_text(spec_text)
    proc = run_cli("--db", str(tmp_path / "r.db"), "run", str(spec), *extra, timeout=120)
    assert "Traceback" not in proc.stderr
    return proc.returncode, proc.stderr.strip()


def test_spec_typo_names_file_line_and_field(tmp_path: Path, inventory: Path) -> None:
    text = GOOD.format(inventory=inventory).replace("steps: 5", "step: 5")
    code, err = _run(tmp_path, text)
    assert code == 2
    assert err.count("\n") == 0
    assert "spec.yml:3:" in err and "unknown field 'step'" in err and "did you mean 'steps'" in err


def test_matrix_typo_and_bad_value(tmp_path: Path, inventory: Path) -> None:
    code, err = _run(tmp_path, GOOD.format(inventory=inventory).replace("{mode: [single]}", "{mdoe: [single]}"))
    assert code == 2 and "spec.yml:6:" in err and "unknown field 'mdoe'" in err and "'mode'" in err
    code, err = _run(tmp_path, GOOD.format(inventory=inventory).replace("steps: 5", "steps: -1"))
    assert code == 2 and "spec.yml:3: steps: must be an integer >= 1" in err


def test_a_bad_interference_policy_names_its_field_or_variable(tmp_path: Path, inventory: Path) -> None:
    good = GOOD.format(inventory=inventory)
    code, err = _run(tmp_path, good + "interference: {max_foreign_share: 2}\n")
    assert code == 2 and "spec.yml:7: interference.max_foreign_share: must be a number > 0 and <= 1" in err, err
    code, err = _run(tmp_path, good + "interference: {rerun: 2}\n")
    assert code == 2 and "unknown field 'rerun'" in err and "did you mean 'reruns'" in err, err
    code, err = _run(tmp_path, good.replace("steps: 5", "steps: 5\nrepeats: {min: 5, max: 3, ci_pct: 2}"))
    assert code == 2 and "repeats.max: must be >= min (5), got 3" in err, err
    code, err = _run(tmp_path, good.replace("steps: 5", "steps: 5\nrepeats: {min: 3, max: 5}"))
    assert code == 2 and "repeats: needs ci_pct too" in err, err
    code, err = _run(tmp_path, good + "shield: {turbo: on}\n")
    assert code == 2 and "shield.turbo: True is not one of off, keep" in err, err
    spec = tmp_path / "ok.yml"
    spec.write_text(good)
    proc = run_cli("run", str(spec), "--dry-run", env={"DLINFRA_MAX_FOREIGN_SHARE": "lots"}, timeout=120)
    assert proc.returncode == 2 and "$DLINFRA_MAX_FOREIGN_SHARE is 'lots'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_workload(tmp_path: Path, inventory: Path) -> None:
    code, err = _run(tmp_path, GOOD.format(inventory=inventory).replace("mnist-dnn", "mnist-cnn"))
    assert code == 2 and "spec.yml:5:" in err and "unknown workload 'mnist-cnn'" in err and "mnist-dnn" in err


def test_unresolvable_host_is_named(tmp_path: Path) -> None:
    inv = tmp_path / "bad.yml"
    inv.write_text("all:\n  hosts:\n    ghost:\n      ansible_host: ghost.invalid\n")
    code, err = _run(tmp_path, GOOD.format(inventory=inv))
    assert code == 2 and "host ghost" in err and "does not resolve" in err and "bad.yml" in err
    assert not (tmp_path / "r.db").exists()  # refused before the store is created


def test_unknown_dlinfra_host_variable(tmp_path: Path) -> None:
    inv = tmp_path / "vars.ini"
    inv.write_text("[gpu]\nnode7 ansible_host=127.0.0.1 dlinfra_cpu=0-3\n")
    code, err = _run(tmp_path, GOOD.format(inventory=inv))
    assert code == 2 and "host node7" in err and "unknown variable dlinfra_cpu" in err


def test_unreachable_host_fails_its_layer_by_name(tmp_path: Path) -> None:
    """A host that does not answer is a layer failure (its cells stored as failed), not a crash."""
    inv = tmp_path / "down.yml"
    inv.write_text("all:\n  hosts:\n    sleeper:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n")
    code, err = _run(tmp_path, GOOD.format(inventory=inv))
    assert code == 1 and "host sleeper" in err and "unreachable" in err
    conn = sqlite3.connect(tmp_path / "r.db")
    try:
        ((status, reason),) = conn.execute("SELECT status, failure_reason FROM cells").fetchall()
    finally:
        conn.close()
    assert status == "failed" and "layer bm failed at bring-up" in reason and "sleeper" in reason


def test_missing_spec_and_inventory(tmp_path: Path) -> None:
    proc = run_cli("--db", str(tmp_path / "r.db"), "run", str(tmp_path / "nope.yml"))
    assert proc.returncode == 2 and "nope.yml does not exist" in proc.stderr
    code, err = _run(tmp_path, GOOD.format(inventory=tmp_path / "none.yml"))
    assert code == 2 and "none.yml does not exist" in err
    code, err = _run(tmp_path, GOOD.format(inventory="testbed:nosuchbed"))
    assert code == 2 and "testbed 'nosuchbed' is not up" in err
