"""A layer that cannot come up fails its own cells, not the campaign; ``--resume`` retries only those.

The vm layer's host points at a hypervisor that does not answer (a libvirt URI
on a closed local port), so it fails in seconds at bring-up, as a guest that never
boots would after its timeout. The bm and ctr cells on the same real testbed
must still run and be stored; the vm cell is stored as failed with the layer,
step and reason; the exit status is non-zero; the summary, ``results show``
and the report name the failure; ``--resume`` runs the vm cell again and
nothing else, and both attempts stay in the store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml
from support import need_binary, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEAD_HYPERVISOR = "qemu+tcp://127.0.0.1:9/system"  # the discard port: nothing answers libvirt there


def _cells(db: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT * FROM cells ORDER BY layer, attempt").fetchall()
    finally:
        conn.close()


def _inventory_with_dead_hypervisor(bed, tmp_path: Path) -> Path:
    """The testbed's inventory, its hosts' libvirt URI pointing where nothing answers."""
    inventory = yaml.safe_load(Path(bed.inventory).read_text())
    hypervisors = [
        host
        for group in inventory["all"]["children"].values()
        for host in group["hosts"].values()
        if "dlinfra_libvirt_uri" in host
    ]
    assert hypervisors, inventory
    for host in hypervisors:
        host["dlinfra_libvirt_uri"] = DEAD_HYPERVISOR
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_a_layer_that_cannot_come_up_fails_only_its_cells(bed, tmp_path: Path) -> None:
    need_binary("dockerd")
    inventory = _inventory_with_dead_hypervisor(bed, tmp_path)
    spec = tmp_path / "three-layers.yml"
    spec.write_text(
        f"name: three-layers\ninventory: {inventory}\nlayers: [bm, ctr, vm]\n"
        "warmup_steps: 2\nsteps: 10\ncell_timeout: 300\n"
        "layer_options:\n"
        "  ctr: {provider: docker, hosts: ['all[0]'], run_id: itfail}\n"
        "  vm: {emulation: allow}\n"
        "workloads:\n"
        "  - name: mnist-dnn\n    hosts: ['all[0]']\n    matrix: {mode: [single], batch_size: [32]}\n"
    )
    db = tmp_path / "r.db"
    first = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "fail-it", "--artifacts", str(tmp_path / "a"))
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert "Traceback" not in out
    assert "✗ vm: bring up failed" in out
    assert "layer vm failed at bring-up" in out and "cannot connect to libvirt" in out
    assert "2 ok, 1 failed" in out and "--resume" in out
    by_layer = {c["layer"]: c for c in _cells(db)}
    assert set(by_layer) == {"bm", "ctr", "vm"}
    assert by_layer["bm"]["status"] == "ok" and by_layer["ctr"]["status"] == "ok"
    assert by_layer["vm"]["status"] == "failed"
    assert "layer vm failed at bring-up" in by_layer["vm"]["failure_reason"]
    assert DEAD_HYPERVISOR.split("//")[1].split("/")[0] in by_layer["vm"]["failure_reason"]

    shown = run_cli("--db", str(db), "results", "show", "fail-it")
    assert shown.returncode == 0, shown.stderr
    assert "attempt 1" in shown.stdout and "layer vm failed at bring-up" in shown.stdout

    again = run_cli("--db", str(db), "run", str(spec), "--resume", "--artifacts", str(tmp_path / "b"))
    out = again.stdout + again.stderr
    assert again.returncode == 1, out
    assert "3 cell runs, 2 already stored, 1 to run" in out
    assert "bm: every cell is stored already, not brought up" in out
    assert "ctr: every cell is stored already, not brought up" in out
    cells = _cells(db)
    attempts = {(c["layer"], c["attempt"]): c["status"] for c in cells}
    assert attempts == {("bm", 1): "ok", ("ctr", 1): "ok", ("vm", 1): "failed", ("vm", 2): "failed"}

    report = run_cli("--db", str(db), "report", "--campaign", "fail-it")
    assert report.returncode == 0, report.stderr
    assert "failed" in report.stdout and "vm" in report.stdout
