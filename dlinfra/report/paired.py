"""The overhead's interval from a duet's pairs (``schedule: duet``, :mod:`dlinfra.orchestration.duet`).

Why paired: the two sides of a pair ran at the same time on the same host, so the host's drift (a CPU that speeds
up and slows down under another tenant) moves both; the log of their ratio cancels it, where the unpaired
interval (:func:`dlinfra.report.stats.overhead_ci`) counts it twice, once per side. The interval is a
t-interval on the mean paired log-ratio (layer over baseline), exponentiated; the point is the geometric mean
ratio, so it always lies inside. Pairs whose measured windows did not overlap, or with a side missing (failed,
contaminated, trimmed), are left out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from dlinfra.report.stats import CONFIDENCE

#: What the report says of a duet campaign: how it ran, how its intervals are made, and what that assumes.
DUET_ASSUMES = (
    "schedule duet: each config's cells ran at the same time on disjoint halves of the host's CPUs, sides swapped "
    "every repeat; overhead intervals are 95% t-intervals of the mean paired log-ratio. It assumes both sides see "
    "the same outside interference, and each loads the other symmetrically"
)


def pairs(base: pd.DataFrame, mine: pd.DataFrame) -> list[tuple[float, float]]:
    """(baseline, layer) values of the runs measured together: the same pair id on both sides, their windows
    overlapping (an unknown overlap counts: older records cannot say)."""
    if "pair_id" not in base.columns or "pair_id" not in mine.columns:
        return []
    found = []
    sides = _by_pair(base)
    for pid, row in _by_pair(mine).items():
        other = sides.get(pid)
        if other is None:
            continue
        overlap = row.get("pair_overlap_s")
        if overlap is not None and not pd.isna(overlap) and float(overlap) <= 0:
            continue
        found.append((float(other["value"]), float(row["value"])))
    return found


def _by_pair(frame: pd.DataFrame) -> dict[str, dict[str, object]]:
    rows = frame[frame["pair_id"].notna() & frame["value"].notna()]
    return {str(r["pair_id"]): r for r in rows.to_dict("records")}


def paired_ci(
    values: list[tuple[float, float]], higher_is_better: bool, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(point, low, high) overhead in percent from (baseline, layer) pairs; NaN bounds with fewer than 2 pairs or
    no spread among their ratios (a zero-width interval is no evidence)."""
    logs = np.array([math.log(x / b) for b, x in values if b > 0 and x > 0], dtype=float)
    if logs.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(logs.mean())
    point = (1 - math.exp(mean)) * 100 if higher_is_better else (math.exp(mean) - 1) * 100
    if logs.size < 2 or float(logs.std(ddof=1)) == 0:
        return (point, math.nan, math.nan)
    half = float(stdtrit(logs.size - 1, 0.5 + confidence / 2)) * float(logs.std(ddof=1)) / math.sqrt(logs.size)
    low_r, high_r = math.exp(mean - half), math.exp(mean + half)
    if higher_is_better:  # overhead = 1 - ratio
        return (point, (1 - high_r) * 100, (1 - low_r) * 100)
    return (point, (low_r - 1) * 100, (high_r - 1) * 100)


def overhead_ci(base: pd.DataFrame, mine: pd.DataFrame, higher_is_better: bool) -> tuple[float, float, float] | None:
    """The paired interval where the runs hold at least 2 pairs (a duet campaign), else None: the caller then
    uses the unpaired one."""
    found = pairs(base, mine)
    if len(found) < 2:
        return None
    return paired_ci(found, higher_is_better)
