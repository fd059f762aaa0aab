"""``--compare-seed``: the seed studies' published figures beside the campaign's, as ratios.

The figures live in ``seed_figures.json`` (transcribed from the seeds' tables,
each citing its table or figure). Each figure says how to compute the
campaign's counterpart: which runs (``match``), which statistic (``kind``).
A figure with no matching runs is listed with a dash, never dropped, so the
reader sees what the campaign did not cover. Absolute figures (seconds,
examples/s) mostly measure the hardware; the relative ones (overhead %, speedup,
ratios) are the comparable part: the notes say so, with both machines named.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.report import stats
from dlinfra.report.frame import METRICS, Metric, run_values
from dlinfra.report.warnings import ReportWarning, refusal_reasons

SEEDS = ("000", "002", "003", "004")
COLUMNS = ["figure", "source", "what", "seed_value", "campaign_value", "unit", "ratio", "difference", "matched", "note"]
#: Config values a campaign may leave out, and what leaving them out means.
DEFAULTS = {"data": "synthetic", "placement": "pack"}


@cache
def load_figures() -> dict[str, Any]:
    text = resources.files("dlinfra.report").joinpath("seed_figures.json").read_text(encoding="utf-8")
    return json.loads(text)


def published_value(fig: dict[str, Any]) -> float:
    """The seed's number: given, or derived from the published pair it came from."""
    if "value" in fig:
        return float(fig["value"])
    a, b = (float(x) for x in fig["pair"])
    if fig["kind"] == "overhead_pct":
        metric = METRICS[fig.get("metric", "throughput")]
        return stats.overhead_pct(a, b, metric.higher_is_better)
    return b / a  # best_over_single: best/single; speedup: n/base; tta_ratio: sync/async


def _wanted(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, list):
        return any(_wanted(actual, w) for w in wanted)
    if isinstance(wanted, str) and wanted.startswith("!"):
        return str(actual) != wanted[1:]
    return actual == wanted or str(actual) == str(wanted)


def select(frame: pd.DataFrame, match: dict[str, Any]) -> pd.DataFrame:
    """Rows of a run frame (with a ``config`` dict column) matching every key of ``match``."""
    if frame.empty:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    for key, wanted in match.items():
        if key in frame.columns and key != "config":
            actual = list(frame[key])
        else:
            actual = [c.get(key, DEFAULTS.get(key)) for c in frame["config"]]
        keep &= np.array([_wanted(a, wanted) for a in actual], dtype=bool)
    return frame[keep]


def select_view(frame: pd.DataFrame, match: dict[str, Any]) -> pd.DataFrame:
    """Rows of a view (config as a label) matching ``match``: columns first, else ``key=value`` in the label."""
    if frame.empty:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    for key, wanted in match.items():
        if key in frame.columns:
            keep &= np.array([_wanted(a, wanted) for a in frame[key]], dtype=bool)
        else:
            options = wanted if isinstance(wanted, list) else [wanted]
            keep &= np.array([any(f"{key}={w}" in str(label).split() for w in options) for label in frame["config"]])
    return frame[keep]


def _ok(values: pd.DataFrame) -> pd.DataFrame:
    return values[values["ok"] & values["value"].notna()]


def _overhead(values: pd.DataFrame, fig: dict[str, Any], baseline: str, metric: Metric) -> tuple[float, str, str]:
    """Median over matching configs of the point overhead (ratio of means) of the figure's layer vs the baseline."""
    good = select(_ok(values), fig["match"])
    results, refused = [], 0
    for _, group in good.groupby("config_label"):
        base, mine = group[group["layer"] == baseline], group[group["layer"] == fig["layer"]]
        if base.empty or mine.empty:
            continue
        if refusal_reasons(base, mine):
            refused += 1
            continue
        results.append(stats.overhead_pct(base["value"].mean(), mine["value"].mean(), metric.higher_is_better))
    note = f"{refused} config(s) refused (payload or emulation differs)" if refused else ""
    if not results:
        return (math.nan, "", note)
    return (float(np.median(results)), f"{len(results)} config(s), {fig['layer']} vs {baseline}", note)


def campaign_value(
    fig: dict[str, Any], views: dict[str, pd.DataFrame], runs: pd.DataFrame, baseline: str
) -> tuple[float, str, str]:
    """(value, what it was computed from, note) for one published figure."""
    kind = fig["kind"]
    metric = METRICS[fig.get("metric", "elapsed")]
    match = dict(fig["match"])
    if "layer" in fig and kind not in ("overhead_pct",):
        match["layer"] = fig["layer"]
    if kind == "overhead_pct":
        return _overhead(run_values(runs, metric), fig, baseline, metric)
    if kind in ("metric", "best_runtime", "worst_runtime", "best_over_single", "speedup"):
        values = _ok(run_values(runs, metric))
        chosen = select(values, match)
        if chosen.empty:
            return (math.nan, "", "")
        per_config = chosen.groupby("config_label")["value"].median()
        if kind == "metric":
            return (float(per_config.median()), f"{len(chosen)} run(s) in {len(per_config)} config(s)", "")
        if kind in ("best_runtime", "worst_runtime"):
            pick = per_config.idxmin() if kind == "best_runtime" else per_config.idxmax()
            return (float(per_config[pick]), pick, "")
        base_match = dict(fig["base_match"], **({"layer": fig["layer"]} if "layer" in fig else {}))
        base = select(values, base_match)
        if base.empty:
            return (math.nan, "", "no matching base cell")
        if kind == "best_over_single":
            pick = per_config.idxmin()
            return (float(per_config[pick] / base["value"].median()), f"{pick} / single", "")
        return (
            float(per_config.median() / base["value"].median()),
            f"{len(chosen)} run(s) / {len(base)} base run(s)",
            "",
        )
    if kind in ("efficiency_pct", "ps_effect_pct", "tta_ratio", "degradation_pct"):
        view, column = {
            "efficiency_pct": ("scaling", "efficiency_pct"),
            "ps_effect_pct": ("ps", "effect_pct"),
            "tta_ratio": ("sync_async", "tta_ratio"),
            "degradation_pct": ("shared", "degradation_pct"),
        }[kind]
        rows = select_view(views.get(view, pd.DataFrame()), match)
        found = rows[column].dropna() if not rows.empty else rows
        if len(found) == 0:
            return (math.nan, "", f"needs the {view} view")
        return (float(found.median()), f"{len(found)} row(s) of the {view} view", "")
    if kind == "system":
        good = runs[runs["status"] == "ok"]
        rows = select(good, {**match, "role": fig["role"]})
        series = rows[fig["field"]].dropna() if not rows.empty else pd.Series(dtype=float)
        if series.empty:
            return (math.nan, "", "")
        return (float(series.max()), f"{len(series)} {fig['role']} process(es)", "")
    raise DlinfraError(f"seed figure {fig.get('id')} has unknown kind {kind!r}")  # pragma: no cover - data bug


def hardware_notes(seed: str, runs: pd.DataFrame) -> list[str]:
    """The seed's machines beside this campaign's: the differences a reader must weigh."""
    data = load_figures()[seed]
    cpus = ", ".join(sorted(set(runs["cpu_model"]))) or "unknown"
    hosts = len(set(runs["physical_host"]))
    tf = ", ".join(sorted(set(runs["tf_version"])))
    emulated = " (some in emulated guests)" if runs["emulated"].any() else ""
    notes = [
        f"seed {seed}: {data['title']}",
        f"seed {seed} hardware: {data['hardware']}",
        f"this campaign: {hosts} physical host(s), CPU {cpus}, TensorFlow {tf}{emulated}",
        "absolute figures (s, examples/s, MB) mostly measure the hardware; overheads, speedups and ratios are the "
        "comparable part",
    ]
    notes += [f"difference: {d}" for d in data["differences"]]
    return notes


def compare(
    seed: str,
    views: dict[str, pd.DataFrame],
    runs: pd.DataFrame,
    baseline: str,
) -> tuple[pd.DataFrame, list[str], list[ReportWarning]]:
    """The comparison table, the notes (hardware differences) and warnings for one seed."""
    if seed not in SEEDS:
        raise DlinfraError(f"no published figures for seed {seed!r}", f"use one of {', '.join(SEEDS)}")
    rows = []
    matched = 0
    for fig in load_figures()[seed]["figures"]:
        published = published_value(fig)
        value, source, note = campaign_value(fig, views, runs, baseline)
        if fig.get("approximate"):
            note = "; ".join(n for n in ("approximate: stated in the seed's text", note) if n)
        if not math.isnan(value):
            matched += 1
        rows.append(
            {
                "figure": f"{seed}:{fig['id']}",
                "source": fig["source"],
                "what": fig["what"],
                "seed_value": published,
                "campaign_value": value,
                "unit": fig["unit"],
                "ratio": value / published if published and not math.isnan(value) else math.nan,
                "difference": value - published,
                "matched": source or "no matching runs",
                "note": note,
            }
        )
    warnings = []
    if matched == 0:
        warnings.append(
            ReportWarning(
                "seed-unmatched",
                f"no run of this campaign matches any published figure of seed {seed}: "
                f"run campaigns/seed{seed}.yml or a campaign with the same workloads",
            )
        )
    return pd.DataFrame(rows, columns=COLUMNS), hardware_notes(seed, runs), warnings
