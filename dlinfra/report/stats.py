"""The statistics of the report: robust summaries and a bootstrap CI of overhead.

Overhead is estimated as a ratio of **means**, with a percentile bootstrap that
resamples repeats within each layer independently. Means, not medians, because
campaigns have few repeats (3-10): the bootstrap distribution of a median of 5
values takes only a handful of distinct values, so its percentile interval is
jumpy and too narrow; the mean's is smooth. Outliers, which the median would
hide, are not hidden either: they raise the CV, and a CV above 5% is a warning.
The tables still show the median and IQR of each layer, as users expect.

Sign convention: a positive overhead is always *worse* than the baseline:
throughput ``(baseline - layer) / baseline``, times ``(layer - baseline) / baseline``.

The RNG is seeded from the report seed and the group's identity, so the same
store gives the same report, whatever order groups come in.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

#: Resamples per interval: percentile CIs are stable to ~0.1 point at this count.
N_BOOT = 10_000
CONFIDENCE = 0.95
CV_LIMIT_PCT = 5.0
MIN_REPEATS = 3

FASTER, SLOWER, SAME = "faster", "slower", "no difference"


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


def _boot_means(x: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    return x[idx].mean(axis=1)


def bootstrap_overhead(
    baseline: np.ndarray,
    layer: np.ndarray,
    higher_is_better: bool,
    seed: int,
    n_boot: int = N_BOOT,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float]:
    """(point, low, high) overhead in percent; NaN when either side has fewer than 2 runs."""
    b = np.asarray(baseline, dtype=float)
    b = b[~np.isnan(b)]
    x = np.asarray(layer, dtype=float)
    x = x[~np.isnan(x)]
    if b.size == 0 or x.size == 0:
        return (math.nan, math.nan, math.nan)
    point = overhead_pct(float(b.mean()), float(x.mean()), higher_is_better)
    if b.size < 2 or x.size < 2:
        return (point, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    bm = _boot_means(b, rng, n_boot)
    xm = _boot_means(x, rng, n_boot)
    with np.errstate(divide="ignore", invalid="ignore"):
        boots = ((bm - xm) if higher_is_better else (xm - bm)) / bm * 100
    alpha = (1 - confidence) / 2
    low, high = np.nanpercentile(boots, [alpha * 100, (1 - alpha) * 100])
    return (point, float(low), float(high))


def bootstrap_mean_ci(values: np.ndarray, seed: int, n_boot: int = N_BOOT) -> tuple[float, float]:
    """95% percentile-bootstrap interval of one layer's mean (the plots' CI bars)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if x.size < 2:
        return (math.nan, math.nan)
    means = _boot_means(x, np.random.default_rng(seed), n_boot)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.percentile(means, [alpha * 100, (1 - alpha) * 100])
    return (float(low), float(high))


def verdict(low: float, high: float) -> str:
    """faster / slower / no difference at 95%, from the overhead interval (positive = worse)."""
    if math.isnan(low) or math.isnan(high):
        return "insufficient data"
    if low > 0:
        return SLOWER
    if high < 0:
        return FASTER
    return SAME
