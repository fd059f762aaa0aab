"""The ``expect`` entries of a campaign spec, held against its stored runs (like ReFrame's references).

An expectation selects cells by filters (workload, layer, provider, any matrix key) and bounds either the
overhead against a baseline layer (``overhead_pct: {min, max}``) or a metric's mean (``value`` with a
relative, asymmetric ``tolerance``). Each selected workload x config x layer is one outcome. It passes only
when the whole 95% interval (:func:`~dlinfra.report.stats.overhead_ci`) lies inside the bound, the same
interval the report shows: a point estimate inside the bound with an interval reaching outside is a failure,
not a pass. With fewer than 2 runs (no interval), no baseline, or no run the filters select, the outcome is
"insufficient data", which is not a pass either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlinfra.report import stats
from dlinfra.report.frame import (
    METRICS,
    interval_options,
    leave_out_contaminated,
    load_runs,
    run_values,
    sequential,
    trim_runs,
)
from dlinfra.results.store import ResultsStore

PASS, FAIL, NO_DATA = "pass", "fail", "insufficient data"
COLUMNS = ["expectation", "workload", "config", "layer", "bound", "measured", "status", "reason"]
FILTER_SKIP = {"metric", "overhead_pct", "baseline", "value", "tolerance"}


@dataclass(frozen=True)
class Outcome:
    """One expectation held against one workload x config x layer."""

    expectation: str
    workload: str
    config: str
    layer: str
    bound: str
    measured: str
    status: str
    reason: str = ""

    @property
    def cell(self) -> str:
        return " / ".join(p for p in (self.workload, self.config if self.config != "-" else "", self.layer) if p)

    def line(self) -> str:
        """One line for ``dlinfra check``: the expectation, the cell, the bound and what was measured."""
        cell = f" [{self.cell}]" if self.cell else ""
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.status.upper()}: {self.expectation}{cell}: {self.measured} against bound {self.bound}{why}"


def _label(index: int, item: dict[str, Any]) -> str:
    filters = " ".join(f"{k}={v}" for k, v in item.items() if k not in FILTER_SKIP)
    return f"expect[{index}]" + (f" {filters}" if filters else "")


def _selects(item: dict[str, Any], row: pd.Series) -> bool:
    config = row["config"] if isinstance(row["config"], dict) else {}
    for key, want in item.items():
        if key in FILTER_SKIP:
            continue
        have = row["workload"] if key == "workload" else row["layer"] if key == "layer" else config.get(key, "")
        if have != want:
            return False
    return True


def _interval(low: float, high: float, unit: str = "") -> str:
    return f"[{low:.4g}, {high:.4g}]{unit}" if not (math.isnan(low) or math.isnan(high)) else "[no interval]"


def _bound(low: float, high: float, unit: str) -> str:
    lo = f"{low:.4g}" if math.isfinite(low) else "-inf"
    hi = f"{high:.4g}" if math.isfinite(high) else "+inf"
    return f"[{lo}, {hi}]{unit}"


def evaluate(
    store: ResultsStore, campaign_id: str, expect: list[dict[str, Any]], seed: int = 0, statistic: str = "mean"
) -> list[Outcome]:
    """Every expectation against every group it selects; a group-less expectation is one "insufficient data"."""
    if not expect:
        return []
    runs, _, _ = leave_out_contaminated(load_runs(store, campaign_id))  # as the report does
    values_by_metric: dict[str, pd.DataFrame] = {}
    out: list[Outcome] = []
    for index, item in enumerate(expect):
        name = item.get("metric", "throughput")
        metric = METRICS[name]
        if name not in values_by_metric:
            values = sequential(run_values(runs, metric), store.campaign_spec(campaign_id).get("repeats"))
            if statistic == "trimmed":
                values, _ = trim_runs(values)
            values_by_metric[name] = values[values["ok"] & values["value"].notna()]
        good = values_by_metric[name]
        label = _label(index, item)
        overhead = "overhead_pct" in item
        baseline = item.get("baseline", "bm")
        if overhead:
            b = item["overhead_pct"]
            low_b, high_b = float(b.get("min", -math.inf)), float(b.get("max", math.inf))
            bound = _bound(low_b, high_b, f"% overhead of {name} against {baseline}")
        else:
            tol = item.get("tolerance") or {}
            value = float(item["value"])
            low_b, high_b = value * (1 + float(tol.get("lower", 0))), value * (1 + float(tol.get("upper", 0)))
            bound = _bound(low_b, high_b, f" {metric.unit} mean {name}")
        selected = good[[_selects(item, row) for _, row in good.iterrows()]] if not good.empty else good
        if overhead:
            selected = selected[selected["layer"] != baseline]
        if selected.empty:
            out.append(Outcome(label, "", "", "", bound, "nothing measured", NO_DATA, "no successful run matches"))
            continue
        for (workload, config, layer), group in selected.groupby(["workload", "config_label", "layer"], sort=True):
            key = (workload, config, layer)
            if overhead:
                base = good[
                    (good["workload"] == workload) & (good["config_label"] == config) & (good["layer"] == baseline)
                ]
                if base.empty:
                    out.append(Outcome(label, *key, bound, "no overhead", NO_DATA, f"no {baseline} run"))
                    continue
                point, low, high = stats.overhead_ci(
                    base["value"].to_numpy(),
                    group["value"].to_numpy(),
                    metric.higher_is_better,  # the report's interval, to the digit
                    **interval_options(base, group),
                )
                measured = f"overhead {point:.4g}% CI {_interval(low, high, '%')}"
            else:
                point = float(group["value"].mean())
                low, high = stats.mean_ci(group["value"].to_numpy())
                measured = f"mean {point:.4g} CI {_interval(low, high)}"
            if math.isnan(low) or math.isnan(high):
                n = min(len(group), len(base)) if overhead else len(group)
                out.append(Outcome(label, *key, bound, measured, NO_DATA, f"{n} run(s): no interval"))
            elif low_b <= low and high <= high_b:
                out.append(Outcome(label, *key, bound, measured, PASS))
            else:
                out.append(Outcome(label, *key, bound, measured, FAIL, "the interval is not inside the bound"))
    return out


def outcomes_frame(outcomes: list[Outcome]) -> pd.DataFrame:
    return pd.DataFrame(
        [[o.expectation, o.workload, o.config, o.layer, o.bound, o.measured, o.status, o.reason] for o in outcomes],
        columns=COLUMNS,
    )
