"""The statistics issue 56 mended, on synthetic values: the adaptive stopping rule's coverage by simulation, Yuen's
interval for the trimmed statistic, no verdict from a zero-width interval, the forecast of the repeats ``ci_pct``
needs (and what a campaign says when it is past ``max``), and a high CV explained by the CPU's own speed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from records import make_record
from scipy.special import stdtrit

from dlinfra.orchestration import campaign
from dlinfra.orchestration.spec import AdaptiveRepeats
from dlinfra.record import Steadiness
from dlinfra.report import stats
from dlinfra.report.build import build_report
from dlinfra.report.compare import build_compare
from dlinfra.report.frame import interval_options, noise_explained, sequential, trim_runs
from dlinfra.report.precision import Precision, forecast_repeats
from dlinfra.results.store import CellOutcome

TRUTH = 0.03  # a 3% overhead of throughput


def _welch_log_ratio(b: np.ndarray, x: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """stats.overhead_ci's interval, for many campaigns at once (rows): log(ratio of means) and its half-width."""
    n = b.shape[1]
    mb, mx = b.mean(1), x.mean(1)
    vb, vx = b.var(1, ddof=1) / (n * mb * mb), x.var(1, ddof=1) / (n * mx * mx)
    df = (vb + vx) ** 2 / (vb**2 / (n - 1) + vx**2 / (n - 1))
    return np.log(mx / mb), stdtrit(df, 0.5 + confidence / 2) * np.sqrt(vb + vx)


def _adaptive_coverage(campaigns: int, low: int, high: int, ci_pct: float, cv: float, confidence: float) -> float:
    """Campaigns of bm and ctr runs (ctr 3% slower, CV ``cv``) under ``repeats: {min, max, ci_pct}``: one more repeat
    until the half-width at ``confidence`` is <= ci_pct or ``max`` ran; the share whose interval held 3%."""
    rng = np.random.default_rng(56)
    b = rng.normal(1.0, cv, (campaigns, high))
    x = rng.normal(1 - TRUTH, cv * (1 - TRUTH), (campaigns, high))
    done = np.zeros(campaigns, bool)
    held = np.zeros(campaigns, bool)
    for n in range(low, high + 1):
        ratio, half = _welch_log_ratio(b[:, :n], x[:, :n], confidence)
        covers = (1 - np.exp(ratio + half) <= TRUTH) & (TRUTH <= 1 - np.exp(ratio - half))
        stop = ~done & ((half * 100 <= ci_pct) | (n == high))
        held[stop] = covers[stop]
        done |= stop
    return float(held.mean())


def test_the_vectorised_interval_is_the_reports() -> None:
    rng = np.random.default_rng(1)
    b, x = rng.normal(1000, 20, (1, 7)), rng.normal(970, 20, (1, 7))
    ratio, half = _welch_log_ratio(b, x, stats.SEQUENTIAL_CONFIDENCE)
    _, low, high = stats.overhead_ci(b[0], x[0], True, stats.SEQUENTIAL_CONFIDENCE)
    assert low == pytest.approx((1 - math.exp(ratio[0] + half[0])) * 100)
    assert high == pytest.approx((1 - math.exp(ratio[0] - half[0])) * 100)


@pytest.mark.parametrize(("low", "high", "ci_pct", "cv"), [(3, 20, 1.5, 0.02), (2, 20, 2.0, 0.02), (6, 20, 1.5, 0.015)])
def test_the_stopping_rule_keeps_95_percent_coverage(low: int, high: int, ci_pct: float, cv: float) -> None:
    """20,000 simulated campaigns per case: stopping on a nominal 95% interval held the truth in 92-94% of them;
    at the sequential level (stopping rule and report alike) at least 95%."""
    assert _adaptive_coverage(20_000, low, high, ci_pct, cv, stats.CONFIDENCE) < 0.945
    assert _adaptive_coverage(20_000, low, high, ci_pct, cv, stats.SEQUENTIAL_CONFIDENCE) >= 0.95


def test_a_campaign_sized_by_its_noise_reports_at_the_sequential_level() -> None:
    values = pd.DataFrame({"value": [1.0, 2.0]})
    rule = {"min": 3, "max": 10, "ci_pct": 2}
    assert interval_options(values, values)["confidence"] == stats.CONFIDENCE
    assert interval_options(sequential(values, rule), values)["confidence"] == stats.SEQUENTIAL_CONFIDENCE
    assert interval_options(sequential(values, 5), values)["confidence"] == stats.CONFIDENCE  # a fixed count


def test_the_trimmed_statistic_gets_yuens_interval() -> None:
    """One run dropped at each end of 7: the interval uses the winsorised variance (the dropped runs put back as
    copies of the kept extremes) over h(h-1), with h-1 degrees of freedom, not the kept runs' own variance."""
    base = pd.DataFrame({"workload": "w", "config_label": "c", "layer": "bm", "ok": True,
                         "value": [90.0, 99.0, 100.0, 100.5, 101.0, 102.0, 120.0]})  # fmt: skip
    mine = base.assign(layer="ctr", value=[80.0, 96.0, 97.0, 97.5, 98.0, 99.0, 115.0])
    kept, dropped = trim_runs(pd.concat([base, mine], ignore_index=True))
    assert dropped == 4 and set(kept["trimmed"]) == {1}
    b, x = kept[kept["layer"] == "bm"], kept[kept["layer"] == "ctr"]
    options = interval_options(b, x)
    assert options["trimmed"] == (1, 1)
    _, low, high = stats.overhead_ci(b["value"].to_numpy(), x["value"].to_numpy(), True, **options)
    _, naive_low, naive_high = stats.overhead_ci(b["value"].to_numpy(), x["value"].to_numpy(), True)

    def yuen(kept_values: np.ndarray) -> float:
        w = np.sort(np.concatenate([kept_values, [kept_values.min(), kept_values.max()]]))
        h = kept_values.size
        return float(w.var(ddof=1)) * (w.size - 1) / (h * (h - 1)) / kept_values.mean() ** 2

    vb, vx = yuen(b["value"].to_numpy()), yuen(x["value"].to_numpy())
    df = (vb + vx) ** 2 / (vb**2 / 4 + vx**2 / 4)
    ratio = math.log(x["value"].mean() / b["value"].mean())
    half = float(stdtrit(df, 0.975)) * math.sqrt(vb + vx)
    assert (low, high) == pytest.approx(((1 - math.exp(ratio + half)) * 100, (1 - math.exp(ratio - half)) * 100))
    assert high - low > naive_high - naive_low  # the trimming is paid for


def test_a_zero_width_interval_gives_no_verdict() -> None:
    point, low, high = stats.overhead_ci(np.array([100.0] * 4), np.array([90.0] * 4), True)
    assert point == pytest.approx(10.0) and math.isnan(low) and math.isnan(high)
    assert stats.verdict(low, high) != stats.SLOWER
    codes = [code for code, _ in stats.noise_flags(stats.summarise(np.array([90.0] * 4)))]
    assert codes == ["no-variation"]


def test_the_forecast_is_the_smallest_count_whose_half_width_meets_the_target() -> None:
    """half-width ~ t(2(n-1)) / sqrt(n): from +-4% at 6 repeats, +-2% needs about 4x the repeats, a little less as
    t falls; a width already met needs no more."""
    level = stats.SEQUENTIAL_CONFIDENCE
    n = forecast_repeats(4.0, 6, 2.0, level)
    assert n is not None and 18 <= n <= 24

    def width(k: int) -> float:
        return 4.0 * math.sqrt(6 / k) * float(stdtrit(2 * (k - 1), 0.5 + level / 2) / stdtrit(10, 0.5 + level / 2))

    assert width(n) <= 2.0 + 1e-9 < width(n - 1)
    assert forecast_repeats(1.0, 6, 2.0) == 6
    assert forecast_repeats(math.nan, 6, 2.0) is None


def test_a_campaign_past_max_says_so_at_once_with_what_would_help(capsys) -> None:
    result = campaign.CampaignResult(campaign_id="c", cells_total=2, skipped=0)
    widths = [Precision("mnist-dnn", "batch_size=64", "ctr", 6, 9.8, True, "bm"),
              Precision("mnist-dnn", "batch_size=64", "vm", 6, 1.2, True, "bm")]  # fmt: skip
    clause = campaign._forecast(AdaptiveRepeats(6, 20, 1.5), widths, 6, result)
    needed = forecast_repeats(9.8, 6, 1.5, stats.SEQUENTIAL_CONFIDENCE)
    assert needed is not None and needed > 100 and f"about {needed} repeats" in clause
    assert f"needs about {needed} repeats (mnist-dnn batch_size=64 ctr), past max 20" in result.forecast
    assert "duet" in result.forecast and "longer runs" in result.forecast and "quieter host" in result.forecast
    assert f"+-{9.8 * math.sqrt(6 / 20):.1f}% at 20" in result.forecast
    said = capsys.readouterr()
    assert "past max 20" in said.out + said.err
    first = result.forecast
    campaign._forecast(AdaptiveRepeats(6, 20, 1.5), widths, 7, result)
    assert result.forecast == first  # said once


def test_a_high_cv_is_explained_by_the_cpus_own_speed() -> None:
    quiet = pd.DataFrame({"speed_cv_pct": [17.0, 18.0, 19.0], "foreign_share": [0.002, 0.008, 0.0],
                          "steal_share": [0.0, 0.0, 0.0]})  # fmt: skip
    text = noise_explained(quiet)
    assert text == (
        "the CPU's speed varied by 18% during these runs, with no other process and no steal to explain it "
        "(another tenant of the physical host?)"
    )
    summary = stats.summarise(np.array([33.9, 65.7, 50.0, 45.0]))
    ((code, message),) = stats.noise_flags(summary, text)
    assert code == "high-cv" and message.endswith("(another tenant of the physical host?)")
    busy = quiet.assign(foreign_share=[0.25, 0.0, 0.0])
    assert "others took up to 25% of the CPUs" in noise_explained(busy)
    assert "steady within each run" in noise_explained(quiet.assign(speed_cv_pct=[1.0, 1.2, 0.9]))
    assert noise_explained(quiet.assign(speed_cv_pct=[math.nan] * 3)) == ""


def test_the_report_and_compare_explain_a_high_cv(store) -> None:
    """The same words in the report's warning and in compare's, from the records the store holds."""
    for cid in ("noisy-a", "noisy-b"):
        store.add_campaign(cid, cid, {})
        for repeat, rate in enumerate([33_900.0, 65_700.0, 50_000.0, 41_000.0]):
            for layer in ("bm", "ctr"):
                cell = {"workload": "mnist-dnn", "layer": layer, "mode": "single", "batch_size": 64}
                r = make_record(cid, cell=cell, repeat=repeat, throughput=rate)
                r.metrics.steadiness = Steadiness(150, 20, 0.2, 18.0, 17.0)
                p = r.provenance
                store.store_cell(CellOutcome(cid, p.cell_hash, repeat, layer, "mnist-dnn", p.cell_config, "ok"), [r])
    expected = "the CPU's speed varied by 18% during these runs, with no other process and no steal to explain it"
    report = build_report(store, "noisy-a")
    assert any(w.code == "high-cv" and expected in w.message for w in report.warnings), report.warnings
    result = build_compare(store, "noisy-a", "noisy-b")
    assert any(w.code == "high-cv" and expected in w.message for w in result.warnings), result.warnings
