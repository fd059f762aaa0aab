"""The statistics of the report: robust summaries and a calibrated CI of overhead.

Overhead is estimated as a ratio of **means**, with a Welch t-interval on the log of that ratio (the delta
method: the log's variance is each layer's squared CV over its repeats, summed; Welch-Satterthwaite degrees of
freedom). Why not the percentile bootstrap of before: with the 3-10 repeats campaigns have, it resamples too few
values and ignores that the variance itself is estimated: its "95%" interval held a true 3% overhead in 89% of
simulated campaigns of 8 repeats at a CV of 15%, this one in 95% (``tests/report/test_stats.py``). Means, not
medians: the median of 5 values is jumpy, and outliers, which the median would hide, are not hidden either: they
raise the CV, and a CV above 5% is a warning. The tables still show the median and IQR of each layer, as users
expect.

Sign convention: a positive overhead is always *worse* than the baseline:
throughput ``(baseline - layer) / baseline``, times ``(layer - baseline) / baseline``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit  # Student's t quantile: scipy.stats would cost 0.6 s more at start-up

CONFIDENCE = 0.95
#: The nominal level of the intervals of a campaign whose repeats were sized by its noise (``repeats: {min, max,
#: ci_pct}``): it stops when its intervals look narrow, which happens more when the variance came out low by chance,
#: so a nominal 95% interval held the truth in only 92-94% of simulated campaigns. At a nominal 97.5%, for both the
#: stopping rule and the report, they hold it in 95.6-97% (min 2-10, max 10-50; ``tests/report/test_stats.py``).
SEQUENTIAL_CONFIDENCE = 0.975
#: The interval every overhead and change carries, as the report names it.
INTERVAL = "95% Welch t-interval of the ratio of means (log scale)"
CV_LIMIT_PCT = 5.0
#: A CPU whose chunks of identical steps vary less than this (CV, %) ran at a steady speed.
STEADY_SPEED_PCT = 3.0
MIN_REPEATS = 3

FASTER, SLOWER, SAME = "faster", "slower", "no difference"
#: The verdict where neither side varied: a zero-width interval is no evidence of anything (a coarse clock, a
#: cached result), so no verdict is given.
NO_VARIATION = "insufficient variation"


@dataclass(frozen=True)
class Summary:
    """Location and spread of one layer's run values."""

    n: int
    median: float
    q1: float
    q3: float
    mean: float
    std: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def cv_pct(self) -> float:
        """Coefficient of variation (sample std / mean), in percent."""
        if self.n < 2 or not self.mean:
            return math.nan
        return abs(self.std / self.mean) * 100


def summarise(values: np.ndarray) -> Summary:
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    std = float(x.std(ddof=1)) if x.size > 1 else math.nan
    return Summary(int(x.size), float(med), float(q1), float(q3), float(x.mean()), std)


def noise_flags(summary: Summary, why: str = "") -> list[tuple[str, str]]:
    """(code, message) for what makes one layer's runs too few or too noisy to conclude much: the report's rows
    and ``compare``'s sides say it alike. ``why``: what the runs' records say of a high CV (:func:`explain_cv`)."""
    flags = []
    if summary.n and summary.n < MIN_REPEATS:
        flags.append(("few-repeats", f"only {summary.n} successful repeat(s); at least {MIN_REPEATS} are needed"))
    if not math.isnan(summary.cv_pct) and summary.cv_pct > CV_LIMIT_PCT:
        flags.append(("high-cv", f"CV {summary.cv_pct:.1f}% is above {CV_LIMIT_PCT:g}%" + (f": {why}" if why else "")))
    if summary.n >= 2 and summary.std == 0:
        flags.append(("no-variation", "every run gave the same value: no interval, no verdict"))
    return flags


def explain_cv(speed_cv_pct: float | None, foreign_pct: float | None, steal_pct: float | None) -> str:
    """Why runs varied, from their records: the CPU's own speed within the runs (the largest chunk CV,
    :class:`dlinfra.record.Steadiness`), against what others and steal took of the CPUs (the largest shares, %).
    Empty where the records say nothing (older records, workloads without step times)."""
    if speed_cv_pct is None or math.isnan(speed_cv_pct):
        return ""
    others = max(foreign_pct or 0.0, 0.0)
    steal = max(steal_pct or 0.0, 0.0)
    if speed_cv_pct < STEADY_SPEED_PCT:
        return (
            f"the CPU's speed was steady within each run ({speed_cv_pct:.1f}%): the runs differ from one another "
            "(the host's speed drifting between runs, or the runs' start)"
        )
    speed = f"the CPU's speed varied by {speed_cv_pct:.0f}% during these runs"
    if others < 2 and steal < 1:
        return f"{speed}, with no other process and no steal to explain it (another tenant of the physical host?)"
    return f"{speed}; others took up to {others:.0f}% of the CPUs and steal {steal:.0f}%"


def stable_seed(seed: int, *parts: object) -> int:
    """A per-group RNG seed that depends on the group, not on iteration order or PYTHONHASHSEED."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def overhead_pct(baseline_mean: float, layer_mean: float, higher_is_better: bool) -> float:
    """Overhead in percent, positive = worse than the baseline (see module docstring)."""
    if not baseline_mean:
        return math.nan
    diff = baseline_mean - layer_mean if higher_is_better else layer_mean - baseline_mean
    return diff / baseline_mean * 100


def _clean(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    return x[~np.isnan(x)]


def _log_mean_var(x: np.ndarray, trimmed: int) -> tuple[float, float, int]:
    """The squared standard error of log(mean of ``x``) and its degrees of freedom. ``trimmed``: how many runs
    were dropped at each end before ``x`` (``--statistic trimmed``); then Yuen's: the winsorised variance (the
    dropped runs put back as copies of the kept extremes) over h(h-1), with h-1 degrees of freedom."""
    mean = float(x.mean())
    if not trimmed:
        return float(x.var(ddof=1)) / (x.size * mean * mean), mean, x.size - 1
    ordered = np.sort(x)
    winsorised = np.concatenate([np.repeat(ordered[0], trimmed), ordered, np.repeat(ordered[-1], trimmed)])
    n = winsorised.size
    return float(winsorised.var(ddof=1)) * (n - 1) / (x.size * (x.size - 1)) / (mean * mean), mean, x.size - 1


def overhead_ci(
    baseline: np.ndarray,
    layer: np.ndarray,
    higher_is_better: bool,
    confidence: float = CONFIDENCE,
    trimmed: tuple[int, int] = (0, 0),
) -> tuple[float, float, float]:
    """(point, low, high) overhead in percent (:data:`INTERVAL`); NaN bounds when either side has fewer than 2
    runs, or when neither side varied (a zero-width interval is no evidence: :data:`NO_VARIATION`).
    ``trimmed``: runs dropped at each end of (baseline, layer) before these values: Yuen's interval.
    Deterministic: the same runs give the same interval."""
    b, x = _clean(baseline), _clean(layer)
    if b.size == 0 or x.size == 0:
        return (math.nan, math.nan, math.nan)
    mb, mx = float(b.mean()), float(x.mean())
    point = overhead_pct(mb, mx, higher_is_better)
    if b.size < 2 or x.size < 2 or mb <= 0 or mx <= 0:
        return (point, math.nan, math.nan)
    (vb, _, db), (vx, _, dx) = _log_mean_var(b, trimmed[0]), _log_mean_var(x, trimmed[1])
    se = math.sqrt(vb + vx)
    if se == 0:
        return (point, math.nan, math.nan)
    df = (vb + vx) ** 2 / (vb**2 / db + vx**2 / dx)
    half = float(stdtrit(df, 0.5 + confidence / 2)) * se
    ratio = math.log(mx / mb)  # layer over baseline
    lo_r, hi_r = math.exp(ratio - half), math.exp(ratio + half)
    if higher_is_better:  # overhead = 1 - ratio: a larger ratio is less overhead
        return (point, (1 - hi_r) * 100, (1 - lo_r) * 100)
    return (point, (lo_r - 1) * 100, (hi_r - 1) * 100)


def mean_ci(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The t-interval of one layer's mean (the plots' CI bars, an expectation's value check)."""
    x = _clean(values)
    if x.size < 2:
        return (math.nan, math.nan)
    half = float(stdtrit(x.size - 1, 0.5 + confidence / 2)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (float(x.mean()) - half, float(x.mean()) + half)


def verdict(low: float, high: float) -> str:
    """faster / slower / no difference at 95%, from the overhead interval (positive = worse)."""
    if math.isnan(low) or math.isnan(high):
        return "insufficient data"
    if low > 0:
        return SLOWER
    if high < 0:
        return FASTER
    return SAME
