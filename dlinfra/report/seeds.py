"""``--compare-seed``: the seed studies' published figures beside the campaign's, as ratios.

The figures live in ``seed_figures.json`` (transcribed from the seeds' tables,
each citing its table or figure). Each figure says how to compute the
campaign's counterpart: which runs (``match``), which statistic (``kind``).
A figure with no matching runs is listed with a dash, never dropped, so the
reader sees what the campaign did not cover. Absolute figures (seconds,
examples/s) mostly measure the hardware; the relative ones (overhead %, speedup,
ratios) are the comparable part: the notes say so, with both machines named.

A seed that publishes charts without numbers (001) states verdicts instead ("the
same time on host and container", "GRU slower in the container"): its figures
are of kind ``verdict``, set beside the verdict of the report's own overhead
view (the 95% CI of :func:`stats.overhead_ci`), with whether
the two agree.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.report import SEEDS, stats
from dlinfra.report import views as report_views
from dlinfra.report.frame import METRICS, Metric, run_values
from dlinfra.report.warnings import ReportWarning, refusal_reasons

COLUMNS = [
    "figure",
    "source",
    "what",
    "seed_value",
    "seed_verdict",
    "campaign_value",
    "campaign_verdict",
    "agrees",
    "unit",
    "ratio",
    "difference",
    "matched",
    "note",
]
#: Columns only verdict figures fill, and those only number figures fill: a seed's table drops the set
#: none of its figures uses.
VERDICT_COLUMNS = ("seed_verdict", "campaign_verdict", "agrees")
NUMBER_COLUMNS = ("seed_value", "ratio", "difference")
#: The verdicts a study can state, in the words of :func:`stats.verdict` (the layer against the baseline).
VERDICTS = (stats.FASTER, stats.SLOWER, stats.SAME)
#: Config values a campaign may leave out, and what leaving them out means.
DEFAULTS = {"data": "synthetic", "placement": "pack"}


@cache
def load_figures() -> dict[str, Any]:
    text = resources.files("dlinfra.report").joinpath("seed_figures.json").read_text(encoding="utf-8")
    return json.loads(text)


def published_value(fig: dict[str, Any]) -> float:
    """The seed's number: given, or derived from the published pair it came from; NaN for a verdict."""
    if fig["kind"] == "verdict":
        return math.nan
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


def _node_peak(
    fig: dict[str, Any], match: dict[str, Any], series: pd.DataFrame | None, runs: pd.DataFrame
) -> tuple[float, str, str]:
    """The peak over time of a per-node series (the study's sar figure) on the nodes that ran ``fig['role']``,
    the median over the matching runs."""
    frame = report_views.series_view(runs) if series is None else series
    rows = select_view(frame, match)
    if not rows.empty:
        on_node = [{r.rstrip("0123456789") for r in roles.split()} for roles in rows["roles"]]
        rows = rows[[fig["role"] in names for names in on_node]]
    if rows.empty or rows[fig["field"]].isna().all():
        return (math.nan, "", "")
    peaks = rows.groupby(["config", "layer", "repeat", "node"])[fig["field"]].max().dropna()
    return (float(peaks.median()), f"{len(peaks)} {fig['role']} node series, peak over time", "")


def _why_no_counterpart(fig: dict[str, Any]) -> str:
    """The reason the figures file gives for a figure no run of the seed's file (or of its local run) makes."""
    if fig.get("cannot"):
        return f"no counterpart: {fig['cannot']}"
    if fig.get("not_local"):
        return f"not on the local testbed: {fig['not_local']}"
    return ""


def _verdict(fig: dict[str, Any], overhead: pd.DataFrame) -> tuple[float, str, str, str, str]:
    """(median overhead %, campaign verdict, agrees, what it came from, note) for a verdict figure, from the
    report's overhead view: each matching config's bootstrap-CI verdict of the figure's layer."""
    rows = select_view(overhead, {**fig["match"], "layer": fig["layer"]})
    if rows.empty:
        return (math.nan, "", "", "", "")
    counts = Counter(v for v in rows["verdict"] if v in VERDICTS)
    source = f"{len(rows)} config(s), {fig['layer']} vs the baseline"
    value = float(rows["overhead_pct"].median()) if rows["overhead_pct"].notna().any() else math.nan
    if not counts:  # no CI to read a verdict from: say why (insufficient data, refused, no baseline)
        return (value, ", ".join(sorted(set(rows["verdict"]))), "", source, "no verdict in any config")
    if len(counts) == 1:
        verdict = next(iter(counts))
    else:
        ordered = sorted(counts.items(), key=lambda item: (-item[1], VERDICTS.index(item[0])))
        verdict = "mixed: " + ", ".join(f"{n} {v}" for v, n in ordered)
    agreeing = counts.get(fig["verdict"], 0)
    agrees = "yes" if agreeing == sum(counts.values()) else "partly" if agreeing else "no"
    undecided = len(rows) - sum(counts.values())
    note = f"{undecided} config(s) without a verdict" if undecided else ""
    return (value, verdict, agrees, source, note)


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
    if kind == "series":
        return _node_peak(fig, match, views.get("series"), runs)
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
    rng_seed: int = 0,
) -> tuple[pd.DataFrame, list[str], list[ReportWarning]]:
    """The comparison table, the notes (hardware differences) and warnings for one seed.

    ``rng_seed`` seeds the bootstrap of the overhead view a verdict figure reads (the report's ``--seed``).
    """
    if seed not in SEEDS:
        raise DlinfraError(f"no published figures for seed {seed!r}", f"use one of {', '.join(SEEDS)}")
    no_failed = pd.DataFrame(columns=["workload", "config_label", "layer", "cell_hash", "repeat", "failure_reason"])
    overheads: dict[str, pd.DataFrame] = {}  # metric -> the overhead view on it (verdict figures)
    rows = []
    matched = 0
    figures = load_figures()[seed]["figures"]
    for fig in figures:
        published = published_value(fig)
        seed_verdict = campaign_verdict = agrees = ""
        if fig["kind"] == "verdict":
            metric = METRICS[fig["metric"]]
            if metric.name not in overheads:
                values = run_values(runs, metric)
                overheads[metric.name] = report_views.overhead_view(values, no_failed, metric, baseline, rng_seed)[0]
            seed_verdict = fig["verdict"]
            value, campaign_verdict, agrees, source, note = _verdict(fig, overheads[metric.name])
            found = bool(source)
        else:
            value, source, note = campaign_value(fig, views, runs, baseline)
            found = not math.isnan(value)
        if not found:  # why the dash, where the figures file knows: said once, in place of what was searched
            note = _why_no_counterpart(fig) or note
        if fig.get("approximate"):
            note = "; ".join(n for n in ("approximate: stated in the seed's text", note) if n)
        matched += found
        rows.append(
            {
                "figure": f"{seed}:{fig['id']}",
                "source": fig["source"],
                "what": fig["what"],
                "seed_value": published,
                "seed_verdict": seed_verdict,
                "campaign_value": value,
                "campaign_verdict": campaign_verdict,
                "agrees": agrees,
                "unit": fig.get("unit", "%"),
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
                f"run campaigns/seed-{seed}.yml or a campaign with the same workloads",
            )
        )
    kinds = {fig["kind"] == "verdict" for fig in figures}
    unused = (VERDICT_COLUMNS if True not in kinds else ()) + (NUMBER_COLUMNS if False not in kinds else ())
    table = pd.DataFrame(rows, columns=COLUMNS).drop(columns=list(unused))
    return table, hardware_notes(seed, runs), warnings
