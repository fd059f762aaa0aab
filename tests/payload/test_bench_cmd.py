"""``dlinfra bench``: runs the payload here as layer bm and stores one cell per repeat."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support import run_cli

from dlinfra.results.store import open_store


@pytest.mark.slow
def test_bench_stores_one_cell_per_repeat_as_bare_metal(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    done = run_cli("--db", str(db), "bench", "logreg", "--steps", "5", "--warmup-steps", "2", "--repeats", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "examples/s" in done.stdout and "stored in campaign bench-" in done.stdout
    with open_store(str(db)) as store:
        (campaign,) = store.campaigns()
        assert campaign["campaign_id"].startswith("bench-") and campaign["cells"] == 2 and campaign["runs"] == 2
        records = store.records(campaign["campaign_id"])
    assert sorted(r.provenance.repeat for r in records) == [0, 1]
    for r in records:
        p = r.provenance
        assert (p.layer, p.physical_host, p.status, p.workload) == ("bm", socket.gethostname(), "ok", "logreg")
        assert r.metrics.measured_steps == 5 and r.metrics.examples_per_sec > 0
    assert len({r.provenance.cell_hash for r in records}) == 1


def test_bench_rejects_an_unknown_workload_in_one_line(tmp_path: Path) -> None:
    done = run_cli("--db", str(tmp_path / "r.db"), "bench", "vgg99")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "unknown workload 'vgg99'" in done.stderr


def test_bench_names_a_missing_data_path(tmp_path: Path) -> None:
    done = run_cli("--db", str(tmp_path / "r.db"), "bench", "mnist-dnn", "--data", str(tmp_path / "nope"))
    assert done.returncode != 0 and f"--data {tmp_path / 'nope'}: no such file or folder" in done.stderr


def test_bench_help_has_examples() -> None:
    done = run_cli("bench", "--help")
    assert done.returncode == 0 and "Examples:" in done.stdout and "dlinfra bench mnist-dnn" in done.stdout


@pytest.mark.slow
def test_a_failed_payload_run_is_stored_and_reported(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    done = run_cli("--db", str(db), "bench", "conv", "--size", "1x2x3")
    assert done.returncode != 0 and "1 of 1 run(s) failed" in done.stderr and "--size '1x2x3'" in done.stderr
    with open_store(str(db)) as store:
        (cell,) = store.cells()
        assert cell["status"] == "failed" and "--size" in cell["failure_reason"]
