"""--compare-seed: the transcribed figures, and the campaign's counterparts beside them."""

from __future__ import annotations

import math

import pytest
from report.resultsets import draws
from support import run_cli

from dlinfra.report.build import build_report
from dlinfra.report.seeds import SEEDS, load_figures, published_value


def test_every_seed_figure_is_cited_and_computable():
    data = load_figures()
    for seed in SEEDS:
        assert data[seed]["hardware"] and data[seed]["differences"]
        for fig in data[seed]["figures"]:
            assert any(word in fig["source"] for word in ("Table", "Figure", "Fig.", "slide", "Section")), fig
            assert math.isfinite(published_value(fig))
    by_id = {f["id"]: f for f in data["000"]["figures"]}
    assert math.isclose(published_value(by_id["fig1-cpu"]), (3.433 - 3.390) / 3.390 * 100)
    assert math.isclose(published_value(by_id["fig10-over-fig8-mx01"]), 7.07 / 46.50)
    assert published_value(by_id["fig9-mx01-best"]) == 10.11


def test_seed_000_beside_a_campaign(campaign, store):
    c = campaign("s000")
    c.add("bm", [3.0, 3.0, 3.0], workload="sysbench-cpu", metric="elapsed")
    c.add("ctr", [3.3, 3.3, 3.3], workload="sysbench-cpu", metric="elapsed")
    c.add("ctr", [40.0] * 3, metric="elapsed")
    for workers, t in ((1, 30.0), (4, 10.0)):
        c.add("ctr", [t] * 3, metric="elapsed", mode="ps-async", workers=workers, ps=1, extra={"placement": "pack"})
    report = build_report(store, "s000", metric="elapsed", compare_seed="000")
    table = report.views["seed"].set_index("figure")
    cpu = table.loc["000:fig1-cpu"]
    assert math.isclose(cpu["campaign_value"], 10.0)
    assert math.isclose(cpu["ratio"], 10.0 / cpu["seed_value"])
    assert math.isclose(table.loc["000:fig8-mx01", "campaign_value"], 40.0)
    assert math.isclose(table.loc["000:fig10-mx01-best", "campaign_value"], 10.0)
    assert "workers=4" in table.loc["000:fig10-mx01-best", "matched"]
    assert math.isclose(table.loc["000:fig10-over-fig8-mx01", "campaign_value"], 10.0 / 40.0)
    assert table.loc["000:fig4-fileio", "matched"] == "no matching runs"
    assert math.isnan(table.loc["000:fig4-fileio", "campaign_value"])
    assert any("hardware" in n and "E5-2650" in n for n in report.notes)
    assert any(n.startswith("this campaign:") for n in report.notes)


def test_seed_004_sync_async_and_system(campaign, store):
    c = campaign("s004")
    c.add("bm", [300.0] * 3, workload="logreg", metric="elapsed", mode="sync", workers=2, ps=1, tta=[400.0] * 3)
    c.add("bm", [12.0] * 3, workload="logreg", metric="elapsed", mode="ps-async", workers=2, ps=1, tta=[10.0] * 3)
    report = build_report(store, "s004", metric="elapsed", compare_seed="004")
    table = report.views["seed"].set_index("figure")
    assert math.isclose(table.loc["004:s3.5.4-tta", "campaign_value"], 40.0)
    assert math.isclose(table.loc["004:s3.5.4-tta", "seed_value"], 1600 / 37)
    assert "approximate" in table.loc["004:s3.5.4-tta", "note"]
    assert math.isclose(table.loc["004:t3-async-cluster-time", "campaign_value"], 12.0)
    assert math.isclose(table.loc["004:t3-async-cluster-mem", "campaign_value"], 205.0)
    assert math.isclose(table.loc["004:t3-async-cluster-rx", "campaign_value"], 2.0)


@pytest.mark.parametrize("seed", ["002", "003"])
def test_unmatched_seed_warns(campaign, store, seed):
    c = campaign("other")
    c.add("bm", draws(1000, 1, 3, seed=1))
    report = build_report(store, "other", compare_seed=seed)
    assert any(w.code == "seed-unmatched" for w in report.warnings)
    assert report.views["seed"]["matched"].eq("no matching runs").all()


def test_seed_003_scaling_from_the_cli(campaign, store, db_path):
    c = campaign("s003")
    for workers, rate in ((1, 100.0), (4, 380.0), (8, 720.0)):
        c.add("bm", [rate] * 3, workload="cifar10-cnn", mode="ps-async", workers=workers, ps=1)
    c.add("bm", [700.0] * 3, workload="cifar10-cnn", mode="ps-async", workers=8, ps=2)
    result = run_cli("--db", str(db_path), "report", "--compare-seed", "003", "--format", "csv", "--view", "seed")
    assert result.returncode == 0, result.stderr
    assert "003:fig11-linear," in result.stdout and ",90.0," in result.stdout
    assert "# note: seed 003 hardware: Table 1" in result.stdout
