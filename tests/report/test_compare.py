"""``dlinfra compare``: same data twice is no difference, a shift is found with its sign, metadata diffs show."""

from __future__ import annotations

import json

from report.resultsets import Campaign, draws
from support import run_cli

from dlinfra.report.compare import build_compare
from dlinfra.report.render import render


def _fill(c: Campaign, shift: float = 1.0, **kw) -> None:
    c.add("bm", [v * shift for v in draws(1000, 2, 8, seed=1)], **kw)
    c.add("ctr", [v * shift for v in draws(950, 2, 8, seed=2)], **kw)
    c.add("ctr", draws(500, 2, 8, seed=3), extra={"batch_size": 32}, **kw)


def test_same_data_twice_is_no_difference(store, campaign):
    _fill(campaign("a"))
    _fill(campaign("b"))
    result = build_compare(store, "a", "b")
    cells = result.views["compare"]
    assert len(cells) == 3
    assert set(cells["verdict"]) == {"no difference"}
    assert (cells["change_pct"].abs() < 1e-9).all()
    assert result.views["metadata"].empty
    text = render(result, "table")
    assert "no metadata differs" in text and "A = campaign a" in text


def test_shift_is_found_with_the_right_sign(store, campaign):
    _fill(campaign("a"))
    _fill(campaign("b"), shift=0.9)  # B 10% slower on the cells it shifts
    cells = build_compare(store, "a", "b").views["compare"].set_index(["layer", "config"])
    slow = cells.loc[("bm", "batch_size=64 mode=single")]
    assert slow["verdict"] == "slower"
    assert slow["ci_high_pct"] < 0 and abs(slow["change_pct"] + 10) < 1e-6
    assert cells.loc[("ctr", "batch_size=32 mode=single"), "verdict"] == "no difference"
    back = build_compare(store, "b", "a").views["compare"]
    assert set(back.loc[back["config"] == "batch_size=64 mode=single", "verdict"]) == {"faster"}
    assert (back.loc[back["config"] == "batch_size=64 mode=single", "ci_low_pct"] > 0).all()


def test_a_threshold_makes_a_small_drift_no_difference_but_not_a_real_change(store, campaign):
    _fill(campaign("a"))
    _fill(campaign("b"), shift=0.97)  # a 3% drift: significant at 2% noise over 8 repeats
    cells = build_compare(store, "a", "b").views["compare"].set_index(["layer", "config"])
    assert cells.loc[("bm", "batch_size=64 mode=single"), "verdict"] == "slower"
    within = build_compare(store, "a", "b", threshold_pct=8)
    assert set(within.views["compare"]["verdict"]) == {"no difference"}
    assert "within +-8% (--threshold)" in within.subtitle
    _fill(campaign("c"), shift=0.8)
    far = build_compare(store, "a", "c", threshold_pct=8).views["compare"].set_index(["layer", "config"])
    assert far.loc[("bm", "batch_size=64 mode=single"), "verdict"] == "slower"


def test_lower_is_better_metric_keeps_the_verdict_on_speed(store, campaign):
    campaign("a").add("bm", draws(10, 2, 8, seed=1), metric="elapsed")
    campaign("b").add("bm", [v * 1.2 for v in draws(10, 2, 8, seed=1)], metric="elapsed")
    row = build_compare(store, "a", "b", metric="elapsed").views["compare"].iloc[0]
    assert row["verdict"] == "slower" and row["ci_low_pct"] > 0


def test_unmatched_cells_are_listed(store, campaign):
    a = campaign("a")
    a.add("bm", draws(1000, 2, 5, seed=1))
    a.add("vm", draws(900, 2, 5, seed=2))
    a.add("ctr", draws(900, 2, 5, seed=3))
    b = campaign("b")
    b.add("bm", draws(1000, 2, 5, seed=1))
    b.add("bm", draws(1000, 2, 5, seed=1), workload="cifar10-cnn")
    b.add("vm", [], failed=2)
    cells = build_compare(store, "a", "b").views["compare"]
    verdicts = dict(zip(cells["layer"] + "/" + cells["workload"], cells["verdict"], strict=True))
    assert verdicts == {
        "bm/mnist-dnn": "no difference",
        "vm/mnist-dnn": "no successful run in B",
        "ctr/mnist-dnn": "only in A",
        "bm/cifar10-cnn": "only in B",
    }


def test_changed_metadata_appears(store, campaign):
    _fill(campaign("a"))
    _fill(campaign("b"), python_version="3.13.0")
    meta = build_compare(store, "a", "b").views["metadata"]
    assert set(meta["field"]) == {"python_version"}
    assert set(meta["a"]) == {"3.12.3"} and set(meta["b"]) == {"3.13.0"}
    assert set(meta["layer"]) == {"bm", "ctr"}


def test_cli_formats_and_latest(store, campaign, db_path):
    _fill(campaign("a1"))
    _fill(campaign("b2"), shift=0.9)
    result = run_cli("--db", str(db_path), "compare", "latest~1", "latest")
    assert result.returncode == 0, result.stderr
    assert "slower" in result.stdout and "no metadata differs" in result.stdout
    result = run_cli("--db", str(db_path), "compare", "a1", "b2", "--format", "json")
    data = json.loads(result.stdout)
    assert data["compare"] == {"a": "a1", "b": "b2"}
    assert {r[-1] for r in data["views"]["compare"]["rows"]} == {"slower", "no difference"}
    for fmt in ("markdown", "csv"):
        assert run_cli("--db", str(db_path), "compare", "a1", "b2", "--format", fmt).returncode == 0
    bad = run_cli("--db", str(db_path), "compare", "a1", "latest~5")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "holds only 2" in bad.stderr


def test_noisy_and_short_sides_are_flagged_as_the_report_flags_them(store, campaign):
    """A CV of 30% and two repeats are warnings here too: "Warnings: none" must mean the numbers hold."""
    campaign("a").add("bm", [1000, 1400, 700, 1300, 650, 1250, 800, 1200])
    campaign("b").add("bm", [1000, 1010])
    result = build_compare(store, "a", "b")
    codes = {(w.code, w.message.split(":")[0]) for w in result.warnings}
    assert ("high-cv", "campaign A (a)") in codes and ("few-repeats", "campaign B (b)") in codes
    assert "high-cv" in render(result, "table")
