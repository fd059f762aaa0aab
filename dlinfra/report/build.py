"""Store -> Report: resolve the campaign, fold runs, compute every view and warning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlinfra.errors import DlinfraError
from dlinfra.report import views
from dlinfra.report.drift import drift_view
from dlinfra.report.expectations import FAIL, PASS, evaluate, outcomes_frame
from dlinfra.report.frame import (
    METRICS,
    failed_cells,
    leave_out_contaminated,
    load_runs,
    require_metric,
    run_values,
    sequential,
    trim_runs,
)
from dlinfra.report.model import STATISTICS, Report
from dlinfra.report.paired import DUET_ASSUMES
from dlinfra.report.warnings import ReportWarning, dedupe
from dlinfra.results.store import ResultsStore

if TYPE_CHECKING:
    import pandas as pd


def build_report(
    store: ResultsStore,
    campaign: str | None = None,
    baseline: str = "bm",
    metric: str = "throughput",
    seed: int = 0,
    compare_seed: str | None = None,
    statistic: str = "mean",
    series: bool = False,
    include_contaminated: bool = False,
) -> Report:
    """The full report of one campaign; raises DlinfraError with a hint for anything the user can fix.

    ``series`` adds the per-node series (one row per node and second: long, so only when asked).
    Runs of contaminated attempts (others' load on their CPUs over the campaign's bound) are left out and
    counted, unless ``include_contaminated``."""
    for value, known, what in ((metric, METRICS, "metric"), (statistic, STATISTICS, "statistic")):
        if value not in known:
            raise DlinfraError(f"unknown {what} {value!r}", f"use one of {', '.join(known)}")
    m = METRICS[metric]
    campaign_id = store.resolve_campaign(campaign)
    row = next((c for c in store.campaigns() if c["campaign_id"] == campaign_id), {})
    runs, failed, contaminated, worst, measured = _campaign_runs(store, campaign_id, include_contaminated)
    layers = sorted(set(runs["layer"]))
    if baseline not in layers and baseline in measured:
        raise DlinfraError(
            f"every run of the baseline layer {baseline!r} in campaign {campaign_id} was contaminated: other "
            f"programs ran on their CPUs (layers with clean runs: {', '.join(layers)})",
            "see who with 'dlinfra results show'; --include-contaminated reports them anyway; measure again on a "
            "quieter host",
        )
    if baseline not in layers:
        raise DlinfraError(
            f"baseline layer {baseline!r} has no runs in campaign {campaign_id} "
            f"(layers with runs: {', '.join(layers)})",
            "choose one of them with --baseline",
        )
    values = sequential(run_values(runs, m), store.campaign_spec(campaign_id).get("repeats"))
    require_metric(values, m, campaign_id)
    trimmed = 0
    if statistic == "trimmed":
        values, trimmed = trim_runs(values)
    report_views, warnings, samples = _views(
        store, campaign_id, runs, values, failed, metric, baseline, seed, statistic
    )
    if series:
        report_views["series"] = views.series_view(runs)
    notes = _notes(store, campaign_id, row, values, failed, layers, trimmed)
    if contaminated:
        share = f" (others took up to {worst:.0%} of their CPUs)" if worst is not None else ""
        warnings.append(
            ReportWarning(
                "contaminated",
                f"{contaminated} run(s) left out: other programs ran on their CPUs{share}; "
                "--include-contaminated keeps them, 'dlinfra results show' says who",
            )
        )
    if compare_seed:
        from dlinfra.report.seeds import compare  # SciPy and the seeds' figures: only when asked

        table, seed_notes, seed_warnings = compare(compare_seed, report_views, runs, baseline, rng_seed=seed)
        report_views["seed"] = table
        notes.extend(seed_notes)
        warnings.extend(seed_warnings)
    return Report(
        campaign_id=campaign_id,
        campaign_name=row.get("name", campaign_id),
        baseline=baseline,
        metric=metric,
        unit=m.unit,
        higher_is_better=m.higher_is_better,
        seed=seed,
        views=report_views,
        warnings=dedupe(warnings),
        notes=notes,
        step_samples=samples,
        statistic=statistic,
        band_pct=_band(store.campaign_spec(campaign_id).get("repeats")),
    )


def _band(rule: Any) -> float | None:
    """The +- percent a campaign's repeat rule aimed each interval's half-width at, if it set one."""
    value = rule.get("ci_pct") if isinstance(rule, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _campaign_runs(
    store: ResultsStore, campaign_id: str, include_contaminated: bool
) -> tuple[pd.DataFrame, pd.DataFrame, int, float | None, set[str]]:
    """The campaign's runs (contaminated ones left out unless asked), its failed cells, how many runs were left
    out, the largest share of CPU others took in them, and the layers with any run, left out or not; an error
    when nothing is left to report."""
    runs = load_runs(store, campaign_id)
    measured = set(runs["layer"])
    contaminated, worst = 0, None
    if not include_contaminated:
        runs, contaminated, worst = leave_out_contaminated(runs)
    failed = failed_cells(store, campaign_id)
    if runs.empty and contaminated:
        share = f": other programs took up to {worst:.0%} of their CPUs" if worst is not None else ""
        raise DlinfraError(
            f"all {contaminated} run(s) of campaign {campaign_id} were contaminated{share}",
            "see who with 'dlinfra results show'; --include-contaminated reports them anyway; "
            "measure again on a quieter host",
        )
    if runs.empty:
        detail = f" ({len(failed)} failed cell(s))" if len(failed) else ""
        raise DlinfraError(f"campaign {campaign_id} has no stored runs{detail}", "see 'dlinfra results show'")
    return runs, failed, contaminated, worst, measured


def _views(
    store: ResultsStore,
    campaign_id: str,
    runs: pd.DataFrame,
    values: pd.DataFrame,
    failed: pd.DataFrame,
    metric: str,
    baseline: str,
    seed: int,
    statistic: str,
) -> tuple[dict[str, pd.DataFrame], list[ReportWarning], Any]:
    """Every view of the report (the per-node series apart), the warnings they raise, and the step-time samples."""
    m = METRICS[metric]
    elapsed = values if metric == "elapsed" else run_values(runs, METRICS["elapsed"])
    tta = values if metric == "time-to-accuracy" else run_values(runs, METRICS["time-to-accuracy"])
    overhead, warnings = views.overhead_view(values, failed, m, baseline, seed)
    report_views = {
        "overhead": overhead,
        "scaling": views.scaling_view(values, m),
        "ps": views.ps_view(values, m, seed),
        "shared": views.shared_view(values, m, seed),
        "sync_async": views.sync_async_view(tta, elapsed),
        "run_times": views.run_times_view(elapsed),
        "system": views.system_view(runs),
    }
    report_views["step_times"], samples = views.step_times(runs, baseline)
    report_views["drift"], drift_warnings = drift_view(values, seed)
    warnings.extend(drift_warnings)
    expect = store.campaign_spec(campaign_id).get("expect")
    if isinstance(expect, list) and expect:
        outcomes = evaluate(store, campaign_id, expect, seed=seed, statistic=statistic)
        report_views["expectations"] = outcomes_frame(outcomes)
        for o in outcomes:
            if o.status != PASS:
                code = "expectation-failed" if o.status == FAIL else "expectation-no-data"
                warnings.append(ReportWarning(code, o.line(), o.workload, o.config, o.layer))
    if values["emulated"].any():
        warnings.append(
            ReportWarning(
                "emulated",
                "some runs ran in emulated guests (software CPU): their layers are not comparable "
                "with real hardware; comparisons across the two are refused",
            )
        )
    return report_views, warnings, samples


def _notes(
    store: ResultsStore,
    campaign_id: str,
    row: dict[str, Any],
    values: pd.DataFrame,
    failed: pd.DataFrame,
    layers: list[str],
    trimmed: int,
) -> list[str]:
    """What the report was made of: runs, cells, layers, failures, how repeats were sized, what was trimmed."""
    attempts = row.get("failed_attempts")
    notes = [
        f"{len(values)} run(s) over {len(set(values['cell_hash']))} cell(s), layers {', '.join(layers)}; "
        f"{len(failed)} failed cell run(s)"
        + (f", {attempts} failed attempt(s) in all, retries included" if attempts else "")
    ]
    rule = store.campaign_spec(campaign_id).get("repeats")
    if isinstance(rule, dict):
        ran = int(values["repeat"].max()) + 1 if not values.empty else 0
        notes.append(
            f"repeats sized by the noise: until every CI half-width (detectable_pct) is <= {rule.get('ci_pct')}%, "
            "the intervals at a nominal 97.5%, which keeps 95% coverage under that rule, "
            f"at least {rule.get('min')} and at most {rule.get('max')}; {ran} ran"
        )
    if trimmed:
        notes.append(f"statistic trimmed: {trimmed} run(s) dropped, the fastest and slowest of each layer")
    if store.campaign_spec(campaign_id).get("schedule") == "duet":
        pairs = values["pair_id"].dropna().nunique() if "pair_id" in values else 0
        notes.append(f"{DUET_ASSUMES}; {pairs} pair(s)")
    return notes
