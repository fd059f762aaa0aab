"""How precise a campaign's comparisons are so far: each cell's 95% CI half-width, in percent.

The half-width is the precision the repeats reached: a layer whose overhead interval is +-2% cannot show a 1%
overhead, and finds a true 2% only about half the time (about 1.4 times the half-width with 80% power). A cell with
a baseline run of the same config is judged by its overhead's interval (percentage points); a ``scenario: shared``
cell also by its degradation's interval against the same cell alone (seed 002's question: how much a neighbour
costs); a baseline cell, or one without either, by its mean's interval relative to the mean. ``repeats: {min, max,
ci_pct}`` stops a campaign once every half-width is at most ``ci_pct`` (:mod:`dlinfra.orchestration.campaign`); the
report shows the same figure per row (``detectable_pct``, in the overhead and shared views).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from scipy.special import stdtrit  # Student's t quantile, as stats uses it

from dlinfra.report import paired, stats
from dlinfra.report.frame import (
    METRICS,
    Metric,
    interval_options,
    leave_out_contaminated,
    load_runs,
    run_values,
    sequential,
)
from dlinfra.report.views import shared_view
from dlinfra.results.store import ResultsStore


@dataclass(frozen=True)
class Precision:
    workload: str
    config: str
    layer: str
    runs: int
    #: The CI half-width in percent (95%; 97.5% nominal in a campaign sized by its noise, which keeps 95% coverage:
    #: :data:`stats.SEQUENTIAL_CONFIDENCE`); NaN with fewer than 2 runs on a side.
    half_width_pct: float
    #: Whether it is an overhead against the baseline (else the interval of a mean).
    compared: bool = False
    #: What it is compared with: the baseline layer, or ``alone`` (a shared cell's degradation); '' for a mean.
    against: str = ""

    def __str__(self) -> str:
        width = "no interval yet" if math.isnan(self.half_width_pct) else f"+-{self.half_width_pct:.1f}%"
        versus = f" against {self.against}" if self.against else ""
        return f"{self.workload} {self.config} {self.layer}{versus}: {width} over {self.runs} run(s)"


def half_width(
    baseline: pd.Series | None, mine: pd.Series, metric: Metric, confidence: float = stats.CONFIDENCE
) -> float:
    """The CI half-width of ``mine``'s overhead against ``baseline``, or of its mean when there is none."""
    if baseline is not None:
        _, low, high = stats.overhead_ci(baseline.to_numpy(), mine.to_numpy(), metric.higher_is_better, confidence)
        return (high - low) / 2
    low, high = stats.mean_ci(mine.to_numpy(), confidence)
    mean = float(mine.mean())
    return (high - low) / 2 / abs(mean) * 100 if mean else math.nan


def precision(values: pd.DataFrame, baseline: str, metric: Metric) -> list[Precision]:
    """Every workload x config x layer of ``values`` (:func:`~dlinfra.report.frame.run_values`) with its width,
    and every ``scenario: shared`` cell's degradation with the width the report's shared view shows."""
    good = values[values["ok"] & values["value"].notna()] if not values.empty else values
    out = []
    for (workload, config), group in good.groupby(["workload", "config_label"], sort=True):
        base = group.loc[group["layer"] == baseline, "value"]
        for layer, mine in group.groupby("layer", sort=True):
            compared = layer != baseline and len(base) > 0
            level = interval_options(group, mine)["confidence"]
            width = half_width(base if compared else None, mine["value"], metric, level)
            duet = paired.overhead_ci(group[group["layer"] == baseline], mine, metric.higher_is_better)
            if compared and duet is not None:  # schedule: duet: the width of the interval the report shows
                width = (duet[2] - duet[1]) / 2
            out.append(
                Precision(workload, config, str(layer), len(mine), width, compared, baseline if compared else "")
            )
    if not good.empty:  # a shared cell without alone runs has no interval yet: a campaign sized by it goes on
        for row in shared_view(good, metric, seed=0).itertuples():
            label = f"{row.config} background={row.background}"
            out.append(Precision(row.workload, label, row.layer, row.runs_shared, row.detectable_pct, True, "alone"))
    return out


def forecast_repeats(
    half_width_pct: float, runs: int, target_pct: float, confidence: float = stats.CONFIDENCE
) -> int | None:
    """How many repeats a comparison needs for a half-width of ``target_pct``, at the noise ``runs`` repeats gave
    ``half_width_pct``: the half-width goes as t/sqrt(n), so n = runs * (half_width / target)^2 * (t_n / t_runs)^2,
    solved for n (Welch's degrees of freedom taken as 2(n-1): two sides alike). None where there is no interval."""
    if math.isnan(half_width_pct) or runs < 2 or target_pct <= 0:
        return None
    q = 0.5 + confidence / 2
    t_runs = float(stdtrit(2 * (runs - 1), q))
    n = runs
    for _ in range(50):  # converges in a few steps: t_n falls slowly as n grows
        t_n = float(stdtrit(2 * (n - 1), q))
        again = max(
            runs if half_width_pct <= target_pct else runs + 1,
            math.ceil(runs * (half_width_pct / target_pct) ** 2 * (t_n / t_runs) ** 2 - 1e-9),
        )
        if again == n:
            break
        n = again
    return n


def campaign_precision(store: ResultsStore, campaign_id: str, baseline: str = "bm") -> list[Precision]:
    """:func:`precision` of a stored campaign's clean runs: throughput where the workload records it, else
    elapsed time (sysbench, kernels)."""
    runs, _, _ = leave_out_contaminated(load_runs(store, campaign_id))
    if not runs.empty:
        runs = runs[~runs["emulated"]]  # an emulated guest is never compared: its precision cannot stop a campaign
    if runs.empty:
        return []
    found = []
    rule = store.campaign_spec(campaign_id).get("repeats")  # sized by the noise: the report's wider level
    throughput = sequential(run_values(runs, METRICS["throughput"]), rule)
    measured = set(throughput.loc[throughput["value"].notna(), "workload"])
    found += precision(throughput[throughput["workload"].isin(measured)], baseline, METRICS["throughput"])
    rest = runs[~runs["workload"].isin(measured)]
    if not rest.empty:
        found += precision(sequential(run_values(rest, METRICS["elapsed"]), rule), baseline, METRICS["elapsed"])
    return found
