"""``--statistic trimmed``: the fastest and slowest run of a layer are dropped (>= 3 runs), and the header says so."""

from __future__ import annotations

import pandas as pd
import pytest
from support import run_cli

from dlinfra.report.build import build_report
from dlinfra.report.frame import trim_runs


def _values(layer_values: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {"workload": "w", "config_label": "-", "layer": layer, "value": v, "ok": True}
        for layer, values in layer_values.items()
        for v in values
    ]
    return pd.DataFrame(rows)


def test_trim_drops_both_ends_only_from_three_runs():
    kept, dropped = trim_runs(_values({"bm": [10.0, 1.0, 5.0, 6.0], "vm": [3.0, 4.0]}))
    assert dropped == 2
    assert sorted(kept.loc[kept["layer"] == "bm", "value"]) == [5.0, 6.0]
    assert sorted(kept.loc[kept["layer"] == "vm", "value"]) == [3.0, 4.0]


@pytest.mark.parametrize("statistic", ["mean", "trimmed"])
def test_report_uses_the_trimmed_mean(campaign, store, statistic):
    c = campaign("t")
    c.add("bm", [100.0, 1000.0, 1010.0, 1020.0, 5000.0])
    report = build_report(store, "t", statistic=statistic)
    row = report.views["overhead"].iloc[0]
    expected = 1010.0 if statistic == "trimmed" else (100 + 1000 + 1010 + 1020 + 5000) / 5
    assert row["mean"] == pytest.approx(expected)
    assert row["runs"] == (3 if statistic == "trimmed" else 5)
    assert f"statistic {statistic}" in report.subtitle


def test_cli_header_names_the_statistic(campaign, db_path):
    campaign("t").add("bm", [1000.0, 1001.0, 1002.0])
    out = run_cli("--db", str(db_path), "report", "--statistic", "trimmed", "--format", "markdown")
    assert out.returncode == 0, out.stderr
    assert "statistic trimmed" in out.stdout.splitlines()[2]
