"""``dlinfra report`` as a user runs it: clear one-line errors, files written, every format."""

from __future__ import annotations

import json

import pytest
from report.resultsets import draws, ten_percent_slower
from support import run_cli

from dlinfra.results.store import open_store


def _one_clear_error(result, *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_empty_store(db_path):
    _one_clear_error(run_cli("--db", str(db_path), "report"), "does not exist", "dlinfra run")
    assert not db_path.exists(), "a report never creates a store"
    with open_store(str(db_path)):
        pass  # a writer made it, with no campaign yet
    _one_clear_error(run_cli("--db", str(db_path), "report"), "holds no campaigns", "dlinfra run")


def test_unknown_campaign(store, db_path):
    ten_percent_slower(store)
    _one_clear_error(run_cli("--db", str(db_path), "report", "--campaign", "nope"), "no campaign 'nope'")


def test_baseline_with_no_rows(store, db_path):
    ten_percent_slower(store)
    _one_clear_error(
        run_cli("--db", str(db_path), "report", "--baseline", "ctr-vm"),
        "baseline layer 'ctr-vm' has no runs",
        "bm, ctr, vm",
        "--baseline",
    )


def test_metric_nobody_recorded(store, db_path):
    ten_percent_slower(store)
    _one_clear_error(run_cli("--db", str(db_path), "report", "--metric", "time-to-accuracy"), "time_to_accuracy_s")


def test_table_and_files(store, db_path, tmp_path):
    ten_percent_slower(store)
    result = run_cli("--db", str(db_path), "report", "--campaign", "ten-percent")
    assert result.returncode == 0, result.stderr
    assert "Overhead against the baseline" in result.stdout
    assert "slower" in result.stdout and "no difference" in result.stdout
    out = tmp_path / "r.json"
    result = run_cli("--db", str(db_path), "report", "--format", "json", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"to {out}" in result.stderr
    data = json.loads(out.read_text())
    verdicts = {r[2]: r[11] for r in data["views"]["overhead"]["rows"]}
    assert verdicts == {"bm": "baseline", "vm": "slower", "ctr": "no difference"}


@pytest.mark.parametrize("fmt", ["markdown", "csv"])
def test_other_formats_to_stdout_carry_warnings(campaign, db_path, fmt):
    c = campaign("few")
    c.add("bm", draws(1000, 1, 2, seed=1))
    c.add("vm", draws(900, 1, 2, seed=2))
    result = run_cli("--db", str(db_path), "report", "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert "few-repeats" in result.stdout


def test_help_has_examples():
    result = run_cli("report", "--help")
    assert result.returncode == 0
    assert "Examples:" in result.stdout and "--compare-seed" in result.stdout


def test_report_does_not_import_tensorflow(tmp_path):
    code = (
        "import sys, dlinfra.cli.report_cmd, dlinfra.report.build, dlinfra.report.html, dlinfra.report.seeds;"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')], 'TF imported'"
    )
    import subprocess
    import sys

    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
