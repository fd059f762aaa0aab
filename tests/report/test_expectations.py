"""Expectations of a spec held against stored runs: the report shows them, ``dlinfra check`` exits on them."""

from __future__ import annotations

from report.resultsets import Campaign, draws
from support import run_cli

from dlinfra.cli.app import main
from dlinfra.report.build import build_report
from dlinfra.report.drift import mann_kendall
from dlinfra.report.expectations import FAIL, NO_DATA, PASS, evaluate


def _campaign(store, expect: list[dict], cid: str = "e1") -> Campaign:
    store.add_campaign(cid, cid, {"name": cid, "expect": expect})
    c = Campaign(store, cid)
    c.add("bm", draws(1000, 1, 8, seed=1))
    c.add("ctr", draws(950, 1, 8, seed=2))  # 5% overhead
    c.add("vm", [800.0])  # one run: no interval
    return c


def test_overhead_and_value_expectations(store):
    expect = [
        {"layer": "ctr", "overhead_pct": {"max": 10}},
        {"layer": "ctr", "overhead_pct": {"max": 2}},
        {"layer": "bm", "value": 1000, "tolerance": {"lower": -0.05, "upper": 0.05}},
        {"layer": "bm", "value": 1100, "tolerance": {"lower": -0.05, "upper": 0.2}},
        {"layer": "vm", "overhead_pct": {"max": 50}},
        {"workload": "cifar10-cnn", "overhead_pct": {"max": 50}},
    ]
    _campaign(store, expect)
    statuses = [o.status for o in evaluate(store, "e1", expect)]
    assert statuses == [PASS, FAIL, PASS, FAIL, NO_DATA, NO_DATA]
    report = build_report(store, "e1")
    assert list(report.views["expectations"]["status"]) == statuses
    assert {w.code for w in report.warnings} >= {"expectation-failed", "expectation-no-data"}


def test_check_exits_zero_when_all_hold(store, db_path, capsys):
    _campaign(store, [{"layer": "ctr", "overhead_pct": {"max": 10}}])
    assert main(["--db", str(db_path), "check", "e1"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "1 pass, 0 fail, 0 insufficient data" in captured.err


def test_check_names_each_failure_on_one_line(store, db_path):
    expect = [
        {"workload": "mnist-dnn", "layer": "ctr", "overhead_pct": {"max": 2}},
        {"layer": "bm", "value": 1100, "tolerance": {"lower": -0.05, "upper": 0.2}},
        {"layer": "ctr", "overhead_pct": {"max": 10}},
    ]
    _campaign(store, expect)
    result = run_cli("--db", str(db_path), "check", "e1")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("FAIL: expect[0] layer=ctr workload=mnist-dnn [mnist-dnn / batch_size=64 mode=single")
    assert "overhead 5.1" in lines[0] and "% CI [4." in lines[0] and "bound [-inf, 2]% overhead" in lines[0]
    assert lines[1].startswith("FAIL: expect[1] layer=bm [mnist-dnn / batch_size=64 mode=single / bm]: mean 100")
    assert "bound [1045, 1320] examples/s" in lines[1]
    assert "2 fail" in result.stderr


def test_insufficient_data_is_distinct_and_non_zero(store, db_path):
    _campaign(store, [{"layer": "vm", "overhead_pct": {"max": 50}}])
    result = run_cli("--db", str(db_path), "check")
    assert result.returncode == 3
    assert result.stdout.startswith("INSUFFICIENT DATA: expect[0] layer=vm")
    assert "1 run(s): no interval" in result.stdout


def test_check_without_expectations_is_a_clear_error(store, db_path):
    Campaign(store, "plain").add("bm", [1.0, 2.0])
    result = run_cli("--db", str(db_path), "check", "plain")
    assert result.returncode == 2 and "has no expectations" in result.stderr and "Traceback" not in result.stderr


def test_drift_is_flagged_only_for_a_trend(store):
    assert mann_kendall([1, 2, 3, 4, 5, 6], seed=0)[1] < 0.01
    assert mann_kendall([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], seed=0)[1] > 0.05
    c = Campaign(store, "d1")
    c.add("bm", [1000.0, 990.0, 975.0, 960.0, 950.0, 940.0])  # falling: a machine heating up
    c.add("ctr", draws(1000, 1, 6, seed=4))
    report = build_report(store, "d1")
    trends = dict(zip(report.views["drift"]["layer"], report.views["drift"]["trend"], strict=True))
    assert trends == {"bm": "falling", "ctr": "none"}
    assert [w.layer for w in report.warnings if w.code == "drift"] == ["bm"]
