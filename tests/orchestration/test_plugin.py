"""A provider from another package, registered through the ``dlinfra.providers`` entry point, runs a cell.

The package (``tests/plugin_package``) is installed with pip into a folder of its own (no change to the
environment, none to ``dlinfra/``); the real ``dlinfra run`` then finds it through the entry point.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(REPO / "tests" / "plugin_package")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert list(site.glob("dlinfra_pinned_hosts-*.dist-info/entry_points.txt"))
    return site


def test_a_plugin_provider_runs_a_cell_without_any_change_to_dlinfra(
    deployed, plugin_site: Path, tmp_path: Path
) -> None:
    group = next(iter(deployed.bed.state.hosts)).name
    spec = tmp_path / "plugin.yml"
    spec.write_text(
        "name: plugin\n"
        f"inventory: {deployed.bed.inventory}\n"
        "layers: [bm]\n"
        f"layer_options:\n  bm: {{provider: pinned-hosts, group: {group}}}\n"
        "warmup_steps: 1\nsteps: 3\n"
        "workloads:\n  - name: sysbench-cpu\n    matrix: {time: [1]}\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(plugin_site), os.environ.get("PYTHONPATH", "")])}
    db = tmp_path / "plugin.db"
    proc = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "plugin-it", "--artifacts",
                   str(tmp_path / "art"), env=env, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with sqlite3.connect(db) as conn:
        cells = conn.execute("SELECT provider, status, config_json FROM cells").fetchall()
        runs = conn.execute("SELECT provider, physical_host, record_json FROM runs").fetchall()
    assert [(c[0], c[1]) for c in cells] == [("pinned-hosts", "ok")]
    assert '"provider": "pinned-hosts"' in cells[0][2]
    assert [(r[0], r[1]) for r in runs] == [("pinned-hosts", group)]
    assert '"plugin": "dlinfra-pinned-hosts"' in runs[0][2]

    # Without the plug-in on the path the same spec is refused when it is loaded, naming the provider.
    refused = run_cli("--db", str(tmp_path / "x.db"), "run", str(spec), "--campaign-id", "x")
    assert refused.returncode == 2 and "no provider named 'pinned-hosts'" in refused.stderr
    assert not (tmp_path / "x.db").exists()
    # A bad option of the plug-in is refused by its own validate, with file and key.
    spec.write_text(spec.read_text().replace(f"group: {group}", "group: [1]"))
    bad = run_cli("--db", str(tmp_path / "y.db"), "run", str(spec), env=env)
    assert bad.returncode == 2 and "plugin.yml:" in bad.stderr and "layer_options.bm.group" in bad.stderr
