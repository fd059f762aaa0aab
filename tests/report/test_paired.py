"""A duet campaign's report: the overhead interval from the stored pairs, the schedule and its assumptions said.

Synthetic pairs through the real store: the host's speed drifts by 30% from pair to pair, the container is 3%
slower than bare metal within every pair. The paired interval sees the 3% through the drift; the same runs
read as unpaired (a sequential campaign) give an interval wide enough to hold 0.
"""

from __future__ import annotations

import math

import pytest
from records import make_record

from dlinfra.report.build import build_report
from dlinfra.report.paired import paired_ci
from dlinfra.results.store import CellOutcome, ResultsStore

LEVELS = [1000.0, 1300.0, 800.0, 1150.0, 950.0, 1200.0]
RATIO = [0.972, 0.968, 0.971, 0.969, 0.973, 0.967]


def _store_campaign(store: ResultsStore, cid: str, duet: bool) -> None:
    store.add_campaign(cid, cid, {"schedule": "duet"} if duet else {})
    for repeat, (level, ratio) in enumerate(zip(LEVELS, RATIO, strict=True)):
        for layer, value in (("bm", level), ("ctr", level * ratio)):
            cell = {"workload": "mnist-dnn", "layer": layer, "mode": "single", "batch_size": 64}
            record = make_record(cid, cell, repeat, throughput=value)
            pair = f"p-r{repeat}-1" if duet else None
            outcome = CellOutcome(
                cid, record.provenance.cell_hash, repeat, layer, "mnist-dnn", cell, "ok",
                pair_id=pair, pair_overlap_s=3.0 if duet else None,
            )  # fmt: skip
            store.store_cell(outcome, [record])


def _ctr_row(store: ResultsStore, cid: str) -> dict:
    report = build_report(store, cid)
    view = report.views["overhead"]
    return {**view[view["layer"] == "ctr"].iloc[0].to_dict(), "notes": report.notes}


def test_a_duet_campaigns_interval_comes_from_its_pairs(store: ResultsStore) -> None:
    _store_campaign(store, "duet", duet=True)
    _store_campaign(store, "seq", duet=False)
    row = _ctr_row(store, "duet")
    point, low, high = paired_ci(
        list(zip(LEVELS, [v * r for v, r in zip(LEVELS, RATIO, strict=True)], strict=True)), True
    )
    assert (row["overhead_pct"], row["ci_low_pct"], row["ci_high_pct"]) == (
        pytest.approx(point),
        pytest.approx(low),
        pytest.approx(high),
    )
    assert 2.5 < low < 3 < high < 3.5 and row["verdict"] == "slower"
    assert any("schedule duet" in n and "6 pair(s)" in n and "loads the other symmetrically" in n for n in row["notes"])
    unpaired = _ctr_row(store, "seq")  # the same values, one cell at a time: the drift swamps the 3%
    assert unpaired["ci_low_pct"] < 0 < unpaired["ci_high_pct"] and unpaired["verdict"] == "no difference"
    assert not any("schedule duet" in n for n in unpaired["notes"])


def test_a_pair_whose_windows_did_not_overlap_is_left_out(store: ResultsStore) -> None:
    _store_campaign(store, "duet", duet=True)
    store._execute("UPDATE runs SET pair_overlap_s = 0 WHERE repeat >= 2")  # 4 of 6 pairs did not overlap
    row = _ctr_row(store, "duet")
    kept = [(b, b * r) for b, r in zip(LEVELS[:2], RATIO[:2], strict=True)]
    assert row["ci_low_pct"] == pytest.approx(paired_ci(kept, True)[1])
    assert not math.isnan(row["ci_low_pct"])
