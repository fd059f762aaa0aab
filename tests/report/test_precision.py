"""How precise a campaign is so far: each cell's CI half-width, the figure ``repeats: {min, max, ci_pct}`` stops
on and the report's ``detectable_pct`` shows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from report.resultsets import draws

from dlinfra.report import stats
from dlinfra.report.build import build_report
from dlinfra.report.precision import campaign_precision


def test_a_compared_cell_is_as_precise_as_its_overhead_interval_a_lone_one_as_its_mean(store, campaign):
    c = campaign("p1")
    bm, ctr = draws(1000, 2, 6, seed=1), draws(950, 4, 6, seed=2)
    c.add("bm", bm)
    c.add("ctr", ctr)
    c.add("ctr", [500.0], extra={"batch_size": 32})  # one run, no baseline: no interval yet
    found = campaign_precision(store, "p1")
    widths = {(p.layer, p.runs): p.half_width_pct for p in found}
    assert {(p.layer, p.runs) for p in found if p.compared} == {("ctr", 6)}  # what the stopping rule judges
    _, low, high = stats.overhead_ci(np.array(bm), np.array(ctr), True)
    assert widths[("ctr", 6)] == pytest.approx((high - low) / 2)
    low, high = stats.mean_ci(np.array(bm))
    assert widths[("bm", 6)] == pytest.approx((high - low) / 2 / np.mean(bm) * 100)
    assert math.isnan(widths[("ctr", 1)])
    # The report shows the same figure per compared row: the smallest effect these repeats could tell.
    view = build_report(store, "p1").views["overhead"].set_index(["layer", "runs"])
    assert view.loc[("ctr", 6), "detectable_pct"] == pytest.approx(widths[("ctr", 6)])
    assert math.isnan(view.loc[("bm", 6), "detectable_pct"])


def test_more_repeats_of_the_same_noise_narrow_the_interval(store, campaign):
    for n, name in ((3, "few"), (12, "many")):
        c = campaign(name)
        c.add("bm", draws(1000, 5, n, seed=3))
        c.add("ctr", draws(970, 5, n, seed=4))
    few = {p.layer: p.half_width_pct for p in campaign_precision(store, "few")}
    many = {p.layer: p.half_width_pct for p in campaign_precision(store, "many")}
    assert many["ctr"] < few["ctr"] / 2


def test_a_shared_cell_is_as_precise_as_its_degradation_against_the_same_cell_alone(store, campaign):
    c = campaign("s1")
    alone, shared = draws(1000, 2, 4, seed=5), draws(550, 10, 3, seed=6)
    c.add("bm", alone, extra={"scenario": "alone"})
    c.add("bm", shared, extra={"scenario": "shared", "background": {"workload": "sysbench-cpu", "threads": 4}})
    found = campaign_precision(store, "s1")
    # What a campaign sized by the noise judges: the degradation's interval, not the shared cell's own mean.
    (judged,) = [p for p in found if p.compared]
    assert (judged.layer, judged.runs, judged.against) == ("bm", 3, "alone")
    _, low, high = stats.overhead_ci(np.array(alone), np.array(shared), True)
    assert judged.half_width_pct == pytest.approx((high - low) / 2)
    assert "against alone" in str(judged)
    (row,) = build_report(store, "s1").views["shared"].to_dict("records")
    assert row["detectable_pct"] == pytest.approx(judged.half_width_pct)


def test_a_shared_cell_without_its_alone_runs_has_no_interval_yet(store, campaign):
    c = campaign("s2")
    c.add("bm", draws(550, 10, 3, seed=6), extra={"scenario": "shared", "background": {"workload": "sysbench-cpu"}})
    (judged,) = [p for p in campaign_precision(store, "s2") if p.compared]
    assert judged.against == "alone" and math.isnan(judged.half_width_pct)  # a campaign sized by it goes on
