"""``dlinfra run --set KEY=VALUE`` and ``--dry-run``, as a user runs them (the real CLI, a real inventory file).

--set is applied before validation, so a bad value fails as in the file but names the ``--set`` that gave it;
--dry-run lists exactly the cells a run would run and leaves no trace: no store, no artifacts, no build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from dlinfra.errors import SpecError
from dlinfra.orchestration.spec import load_spec

DEMO = REPO / "campaigns" / "demo.yml"
INVENTORY = REPO / "inventory" / "local-testbed.example.yml"


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlinfra", "run", str(DEMO), "--inventory", str(INVENTORY), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "250"},
    )


def test_set_overrides_fields_before_validation() -> None:
    spec = load_spec(
        DEMO, ["steps=10000", "repeats=10", "layer_options.vm.vcpus=4", "workloads.0.matrix.batch_size=[16, 32]"]
    )
    assert spec.steps == 10000 and spec.repeats == 10
    assert spec.layer_options["vm"]["vcpus"] == 4
    assert spec.workloads[0].matrix["batch_size"] == [16, 32]
    assert spec.raw["steps"] == 10000  # what is stored with the campaign is what ran
    assert load_spec(DEMO).steps == 300  # the file itself is unchanged


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("steps=-1", "demo.yml --set steps=-1: steps: must be an integer >= 1"),
        ("colour=red", "demo.yml --set colour=red: colour: unknown field 'colour'"),
        (
            "layer_options.vm.vcpus=0",
            "--set layer_options.vm.vcpus=0: layer_options.vm.vcpus: 0 must be a positive integer",
        ),
        ("layer_options.ctr.placement=everywhere", "--set layer_options.ctr.placement=everywhere: layer_options.ctr"),
        ("steps", "--set 'steps': must be KEY=VALUE"),
        ("workloads.9.matrix.batch_size=1", "workloads.9 is not a field that can be set"),
        ("steps=[1", "--set steps"),
        ("a..b=1", "must be KEY=VALUE"),
    ],
)
def test_a_bad_override_names_the_set_that_gave_it(given: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(DEMO, [given])
    assert message in caught.value.message


def test_dry_run_lists_the_cells_and_touches_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, "--dry-run", "--set", "repeats=3", "--set", "workloads.0.matrix.batch_size=[16, 32]")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    first = [r for r in rows if r.split("│")[1].strip()]  # a wrapped row continues with an empty '#' column
    assert len(first) == 8  # mnist-dnn single x 2 batch sizes on bm and ctr; sysbench on bm, ctr, vm; ps-async
    assert any("│ ctr " in r and "│ docker " in r and "batch_size=32" in r for r in rows)
    assert any("│ vm " in r and "│ libvirt " in r and "sysbench-cpu" in r for r in rows)
    assert "8 cell(s) x 3 repeat(s) = 24 run(s)" in result.stdout
    assert "nothing was built, provisioned or stored" in result.stdout
    assert list(tmp_path.iterdir()) == []  # no store, no artifacts folder


def test_dry_run_refuses_bad_input_like_a_run(tmp_path: Path) -> None:
    result = _run(tmp_path, "--dry-run", "--set", "steps=0")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--set steps=0: steps: must be an integer" in result.stderr
    assert list(tmp_path.iterdir()) == []
