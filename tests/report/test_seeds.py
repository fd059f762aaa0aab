"""--compare-seed: the transcribed figures, and the campaign's counterparts beside them."""

from __future__ import annotations

import math

import pytest
from report.resultsets import draws
from support import run_cli

from dlinfra.report import SEEDS
from dlinfra.report.build import build_report
from dlinfra.report.seeds import VERDICTS, load_figures, published_value


def test_every_seed_figure_is_cited_and_computable():
    data = load_figures()
    assert set(data) - {"_about"} == set(SEEDS)
    for seed in SEEDS:
        assert data[seed]["hardware"] and data[seed]["differences"]
        for fig in data[seed]["figures"]:
            assert any(word in fig["source"] for word in ("Table", "Figure", "Fig.", "slide", "Section")), fig
            if fig["kind"] == "verdict":  # a chart without numbers: the study's words, quoted
                assert fig["verdict"] in VERDICTS and '"' in fig["source"] and math.isnan(published_value(fig))
            else:
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
    assert table.loc["000:fig4-fileio", "note"] == ""  # the local run makes it: this dash is the campaign's
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
    # The ps node's series: chief, 2 workers and the ps all ran on host1 (RSS summed, 205 MB each at its
    # peak); the host's network counter is counted once, not once per process.
    assert math.isclose(table.loc["004:t3-async-cluster-mem", "campaign_value"], 4 * 205.0)
    assert math.isclose(table.loc["004:t3-async-cluster-rx", "campaign_value"], 2.0)
    assert "3 ps node series" in table.loc["004:t3-async-cluster-mem", "matched"]
    assert table.loc["004:t6-single-64-cpu", "matched"] == "no matching runs"
    # A dash says why, where the figures file knows: no run can make it, or not the local one.
    c = campaign("s004-allreduce")
    c.add("bm", [300.0] * 3, workload="logreg", metric="elapsed", mode="sync", workers=2)
    table = build_report(store, "s004-allreduce", metric="elapsed", compare_seed="004").views["seed"]
    mem = table.set_index("figure").loc["004:t4-sync-cluster-mem"]
    assert math.isnan(mem["campaign_value"]) and mem["matched"] == "no matching runs"
    assert mem["note"].startswith("no counterpart: dlinfra's sync is MultiWorkerMirroredStrategy")


def test_seed_001_verdicts_beside_the_campaigns(campaign, store):
    c = campaign("s001")
    rnn = {"workload": "rnn"}
    c.add("bm", draws(1000, 1, 5, seed=1), **rnn, extra={"cell": "gru"})
    c.add("ctr", draws(800, 1, 5, seed=2), **rnn, extra={"cell": "gru"})  # 20% slower, as the study says
    c.add("bm", draws(1000, 1, 5, seed=3), workload="conv")
    c.add("ctr", draws(700, 1, 5, seed=4), workload="conv")  # the study: the same time
    c.add("bm", [1000.0], **rnn, extra={"cell": "lstm"})
    c.add("ctr", [1000.0], **rnn, extra={"cell": "lstm"})  # one repeat: no interval, no verdict
    for size, ctr_rate in (("64x64x64", 1000.0), ("128x128x128", 900.0)):
        c.add("bm", draws(1000, 1, 5, seed=5), workload="gemm", extra={"size": size})
        c.add("ctr", draws(ctr_rate, 1, 5, seed=6), workload="gemm", extra={"size": size})
    report = build_report(store, "s001", compare_seed="001")
    table = report.views["seed"].set_index("figure")
    assert "seed_value" not in table and "ratio" not in table  # charts only: no published numbers
    gru = table.loc["001:fig9-rnn-gru"]
    assert (gru["seed_verdict"], gru["campaign_verdict"], gru["agrees"]) == ("slower", "slower", "yes")
    assert math.isclose(gru["campaign_value"], 20.0, abs_tol=2.0) and gru["unit"] == "%"
    conv = table.loc["001:fig5-conv"]
    assert (conv["seed_verdict"], conv["campaign_verdict"], conv["agrees"]) == ("no difference", "slower", "no")
    lstm = table.loc["001:fig8-rnn-lstm"]
    assert lstm["campaign_verdict"] == "insufficient data" and lstm["agrees"] == ""
    gemm = table.loc["001:fig6-gemm"]
    assert gemm["campaign_verdict"] == "mixed: 1 slower, 1 no difference" and gemm["agrees"] == "partly"
    for fid in ("001:fig10-bandwidth", "001:fig7-rnn-vanilla", "001:fathom-residual"):  # no counterpart: dashes
        assert table.loc[fid, "matched"] == "no matching runs" and table.loc[fid, "campaign_verdict"] == ""
    assert len(table) == len(load_figures()["001"]["figures"])
    assert not any(w.code == "seed-unmatched" for w in report.warnings)


def test_seed_001_from_the_cli_shows_dashes_and_verdicts(campaign, store, db_path):
    c = campaign("s001")
    c.add("bm", draws(1000, 1, 3, seed=1), workload="rnn", extra={"cell": "gru"})
    c.add("ctr", draws(800, 1, 3, seed=2), workload="rnn", extra={"cell": "gru"})
    result = run_cli("--db", str(db_path), "report", "--compare-seed", "001", "--format", "markdown")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("| 001:")]
    assert len(lines) == len(load_figures()["001"]["figures"])
    gru = next(line for line in lines if "fig9-rnn-gru" in line)
    assert "| slower | " in gru and "| yes |" in gru
    bandwidth = next(line for line in lines if "fig10-bandwidth" in line)
    assert "| slower | - | - | - |" in bandwidth and "no matching runs" in bandwidth
    assert "no counterpart: the host-device bandwidth test is a GPU measurement" in bandwidth  # the dash's reason


def test_series_per_node_and_second(campaign, store, db_path):
    c = campaign("s-series")
    c.add("bm", [12.0] * 2, workload="logreg", metric="elapsed", mode="ps-async", workers=2, ps=1)
    report = build_report(store, "s-series", metric="elapsed", series=True)
    series = report.views["series"]
    assert set(series["repeat"]) == {0, 1} and set(series["node"]) == {"host1"}
    assert set(series["roles"]) == {"chief0 ps0 worker0 worker1"} and (series["processes"] == 4).all()
    last = series[(series["repeat"] == 0) & (series["t_s"] == 5)].iloc[0]
    assert math.isclose(last["cpu_pct"], 4 * 100.0) and math.isclose(last["rss_mb"], 4 * 205.0)
    assert math.isclose(last["rx_mb_s"], 2.0) and math.isclose(last["tx_mb_s"], 1.0)  # one host counter
    assert math.isclose(last["cpu_util_pct"], 400.0 / 2)  # over the 2 CPUs the processes may use
    first = series[(series["repeat"] == 0) & (series["t_s"] == 0)].iloc[0]
    assert math.isnan(first["rx_mb_s"])  # no interval before the first sample
    assert "series" not in build_report(store, "s-series", metric="elapsed").views  # only when asked
    text = run_cli("--db", str(db_path), "report", "--metric", "elapsed", "--view", "series")
    assert text.returncode == 0, text.stderr
    assert (
        "Per-node CPU, memory and network over time" in text.stdout and "█" in text.stdout
    )  # each sparkline peaks at a full block
    csv = run_cli("--db", str(db_path), "report", "--metric", "elapsed", "--view", "series", "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    header = next(line for line in csv.stdout.splitlines() if not line.startswith("#"))
    assert header.startswith("workload,config,layer,repeat,node,roles,t_s,") and "rx_mb_s,tx_mb_s" in header
    assert len(csv.stdout.splitlines()) > 2 * 6  # every second of both runs
    html = run_cli("--db", str(db_path), "report", "--metric", "elapsed", "--view", "series", "--format", "html")
    assert html.returncode == 0 and "per-node series" in html.stdout and "<svg" in html.stdout


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
