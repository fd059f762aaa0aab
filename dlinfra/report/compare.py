"""Two campaigns side by side: did anything get faster or slower, and what else changed?

Cells are matched by what they ran, not by their hash: the workload, the layer and the report's config (the
cell config without placement details and provider), so the same experiment matches across campaigns on other
hosts or addresses, and through another provider (Docker in A, Podman in B: the provider then shows in the
metadata diff). For each matched cell the change of the metric's mean, B against A, in percent, with the
report's 95% interval of that ratio (:func:`dlinfra.report.stats.overhead_ci`) and the report's verdict: "no
difference" when the CI holds 0. Cells that ran in one campaign only are listed, never dropped.

The metadata diff lists, per layer, the run metadata the records carry (CPU model, memory, Python,
TensorFlow, payload hash, hosts, provider, devices, container and guest details) whose values differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.layers import layer_label
from dlinfra.report import stats
from dlinfra.report.frame import (
    METRICS,
    Metric,
    interval_options,
    leave_out_contaminated,
    load_runs,
    noise_explained,
    require_metric,
    run_values,
    sequential,
    trim_runs,
)
from dlinfra.report.model import STATISTICS, Report
from dlinfra.report.warnings import ReportWarning, dedupe
from dlinfra.results.store import ResultsStore

COMPARE_COLUMNS = [
    "workload",
    "config",
    "layer",
    "runs_a",
    "runs_b",
    "mean_a",
    "mean_b",
    "change_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
]
METADATA_COLUMNS = ["layer", "field", "a", "b"]
#: Run columns that describe the machine and software, not the measurement.
METADATA_FIELDS = (
    "cpu_model",
    "memory_bytes",
    "python_version",
    "tf_version",
    "payload_hash",
    "physical_host",
    "provider",
    "emulated",
)
#: ``target_details`` that name one run's objects or time it (a container's or guest's name carries the run's
#: label): they differ between any two campaigns and say nothing about the testbed.
RUN_SPECIFIC_DETAILS = frozenset({"container", "domain", "boot_to_ssh_s", "published_ports"})
ONLY_A, ONLY_B = "only in A", "only in B"


@dataclass(frozen=True)
class Side:
    """One campaign of the comparison: its id, name and one value per run."""

    campaign_id: str
    name: str
    values: pd.DataFrame
    #: The stored runs, records included (their provenance is the run metadata).
    runs: pd.DataFrame
    #: Every workload x config x layer with a stored run, successful or not.
    ran: frozenset[tuple[str, str, str]] = frozenset()
    #: Runs of contaminated attempts left out, and their largest foreign share.
    contaminated: int = 0
    worst_share: float | None = None

    def warnings(self, label: str) -> list[ReportWarning]:
        """What limits this side's numbers, as the report says it: noise, too few repeats, contaminated runs."""
        found = []
        for (workload, config, layer), group in self.values.groupby(["workload", "config_label", "layer"]):
            where = f"campaign {label} ({self.campaign_id})"
            for code, message in stats.noise_flags(stats.summarise(group["value"].to_numpy()), noise_explained(group)):
                found.append(ReportWarning(code, f"{where}: {message}", workload, config, layer))
        if self.contaminated:
            share = f" (others took up to {self.worst_share:.0%} of their CPUs)" if self.worst_share is not None else ""
            found.append(
                ReportWarning(
                    "contaminated", f"campaign {label} ({self.campaign_id}): {self.contaminated} run(s) left out{share}"
                )
            )
        return found


def _side(store: ResultsStore, campaign: str, metric: Metric, statistic: str) -> Side:
    campaign_id = store.resolve_campaign(campaign)
    row = next((c for c in store.campaigns() if c["campaign_id"] == campaign_id), {})
    runs, contaminated, worst = leave_out_contaminated(load_runs(store, campaign_id))
    if runs.empty:
        raise DlinfraError(
            f"campaign {campaign_id} has no stored runs"
            + (f" but {contaminated} contaminated one(s)" if contaminated else ""),
            "see 'dlinfra results show'",
        )
    values = sequential(run_values(runs, metric), store.campaign_spec(campaign_id).get("repeats"))
    require_metric(values, metric, campaign_id)
    if statistic == "trimmed":
        values, _ = trim_runs(values)
    good = values[values["ok"] & values["value"].notna()]
    ran = set(zip(values["workload"], values["config_label"], values["layer"], strict=True))
    stored = pd.DataFrame(store.runs(campaign_id))  # with each record: its target_details are metadata too
    return Side(campaign_id, row.get("name", campaign_id), good, stored, frozenset(ran), contaminated, worst)


def _change(
    a: pd.DataFrame, b: pd.DataFrame, metric: Metric, seed: int, threshold_pct: float = 0.0
) -> tuple[float, float, float, str]:
    """B's mean against A's in percent (positive = a larger metric) with its CI, and the verdict on speed.

    ``threshold_pct``: a change whose whole CI lies within +-threshold is "no difference" too (practical
    equivalence, as a reference's tolerance in ReFrame): two runs of one testbed drift by a few percent.
    """
    point, low, high = stats.overhead_ci(
        a["value"].to_numpy(), b["value"].to_numpy(), metric.higher_is_better, **interval_options(a, b)
    )  # Yuen's where trimmed; at the sequential level where either campaign was sized by its noise
    verdict = stats.verdict(low, high)  # overhead > 0 is worse, i.e. slower
    if threshold_pct > 0 and -threshold_pct <= low and high <= threshold_pct:
        verdict = stats.SAME
    if metric.higher_is_better:  # overhead = (A - B) / A: the change is its negative
        point, low, high = -point, -high, -low
    return point, low, high, verdict


def compare_cells(a: Side, b: Side, metric: Metric, seed: int, threshold_pct: float = 0.0) -> pd.DataFrame:
    """One row per workload x config x layer of either campaign; unmatched ones say which side has them."""
    key = ["workload", "config_label", "layer"]
    groups_a = {k: g for k, g in a.values.groupby(key, sort=False)}
    groups_b = {k: g for k, g in b.values.groupby(key, sort=False)}
    rows = []
    for k in sorted(set(groups_a) | set(groups_b)):
        va, vb = groups_a.get(k), groups_b.get(k)
        point = low = high = math.nan
        if va is None:
            verdict = "no successful run in A" if k in a.ran else ONLY_B
        elif vb is None:
            verdict = "no successful run in B" if k in b.ran else ONLY_A
        else:
            point, low, high, verdict = _change(va, vb, metric, stats.stable_seed(seed, "compare", *k), threshold_pct)
        rows.append(
            {
                "workload": k[0],
                "config": k[1],
                "layer": k[2],
                "runs_a": 0 if va is None else len(va),
                "runs_b": 0 if vb is None else len(vb),
                "mean_a": math.nan if va is None else float(va["value"].mean()),
                "mean_b": math.nan if vb is None else float(vb["value"].mean()),
                "change_pct": point,
                "ci_low_pct": low,
                "ci_high_pct": high,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    """Nested metadata as one field per value; a list of mappings (the testbed's ``gpus``) by position, so a
    changed driver reads ``testbed.gpus[0].driver`` and not a whole list against another."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = json.dumps(value, sort_keys=True, default=str) if isinstance(value, list) else str(value)


def metadata(runs: pd.DataFrame, targets: Sequence[dict[str, Any]] = ()) -> dict[tuple[str, str], set[str]]:
    """(layer, field) -> the values of that field over the successful runs of the layer, and over the layer's
    targets' testbed metadata (Ansible facts and provider versions, fields ``testbed.*``)."""
    out: dict[tuple[str, str], set[str]] = {}
    for target in targets:
        fields: dict[str, str] = {}
        _flatten("testbed", target["metadata"], fields)
        for name, value in fields.items():
            out.setdefault((target["layer"], name), set()).add(value)
    good = runs[runs["status"] == "ok"] if "status" in runs else runs
    for _, row in good.iterrows():
        fields = {f: str(row[f]) for f in METADATA_FIELDS if f in row.index}
        record = row["record"] if "record" in row.index else {}
        prov = record.get("provenance", {}) if isinstance(record, dict) else {}
        if prov.get("devices"):
            fields["devices"] = json.dumps(sorted(prov["devices"]))
        details = {k: v for k, v in (prov.get("target_details") or {}).items() if k not in RUN_SPECIFIC_DETAILS}
        _flatten("target_details", details, fields)
        fields.pop("target_details", None)  # an empty mapping adds no field
        layer = layer_label(row["layer"], prov.get("cell_config") or {})  # ctr[runsc]: its own runtime's values
        for name, value in fields.items():
            out.setdefault((layer, name), set()).add(value)
    return out


def metadata_diff(
    a: pd.DataFrame,
    b: pd.DataFrame,
    targets_a: Sequence[dict[str, Any]] = (),
    targets_b: Sequence[dict[str, Any]] = (),
) -> pd.DataFrame:
    """Fields whose values differ, for the layers both campaigns ran (a layer in one only is in the cells)."""
    ma, mb = metadata(a, targets_a), metadata(b, targets_b)
    layers = {layer for layer, _ in ma} & {layer for layer, _ in mb}
    rows = []
    for layer, name in sorted(k for k in set(ma) | set(mb) if k[0] in layers):
        va, vb = ma.get((layer, name), set()), mb.get((layer, name), set())
        if va != vb:
            rows.append(
                {"layer": layer, "field": name, "a": ", ".join(sorted(va)) or "-", "b": ", ".join(sorted(vb)) or "-"}
            )
    return pd.DataFrame(rows, columns=METADATA_COLUMNS)


@dataclass
class CompareReport(Report):
    """A :class:`Report` whose views are the comparison, so every report format renders it."""

    against_id: str = ""
    against_name: str = ""

    @property
    def title(self) -> str:
        return (
            f"dlinfra compare: A = campaign {self.against_id} ({self.against_name}), "
            f"B = campaign {self.campaign_id} ({self.campaign_name})"
        )

    @property
    def subtitle(self) -> str:
        better = "higher" if self.higher_is_better else "lower"
        return (
            f"metric {self.metric} ({self.unit}, {better} is better); change_pct = (mean B - mean A) / mean A; "
            f"{stats.INTERVAL} over repeats; verdict on B's speed, 'no difference' when the CI "
            f"holds 0{self._threshold_note()}; {STATISTICS[self.statistic]}"
        )

    def _threshold_note(self) -> str:
        threshold = float(self.extra.get("threshold_pct", 0) or 0)
        return f" or lies within +-{threshold:g}% (--threshold)" if threshold else ""


def build_compare(
    store: ResultsStore,
    a: str,
    b: str,
    metric: str = "throughput",
    seed: int = 0,
    statistic: str = "mean",
    threshold_pct: float = 0.0,
) -> CompareReport:
    """Compare campaign B against campaign A (ids, prefixes, names, 'latest' or 'latest~N')."""
    if metric not in METRICS:
        raise DlinfraError(f"unknown metric {metric!r}", f"use one of {', '.join(METRICS)}")
    if statistic not in STATISTICS:
        raise DlinfraError(f"unknown statistic {statistic!r}", f"use one of {', '.join(STATISTICS)}")
    m = METRICS[metric]
    side_a, side_b = _side(store, a, m, statistic), _side(store, b, m, statistic)
    if not (0 <= threshold_pct < 100):
        raise DlinfraError(f"--threshold {threshold_pct:g} is not a percentage in [0, 100)", "e.g. --threshold 5")
    cells = compare_cells(side_a, side_b, m, seed, threshold_pct)
    meta = metadata_diff(side_a.runs, side_b.runs, store.targets(side_a.campaign_id), store.targets(side_b.campaign_id))
    counts = cells["verdict"].value_counts()
    notes = [
        f"{len(cells)} cell(s): " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())),
        "no metadata differs" if meta.empty else f"{len(meta)} metadata field(s) differ",
    ]
    if side_a.campaign_id == side_b.campaign_id:
        notes.append("A and B are the same campaign")
    return CompareReport(
        campaign_id=side_b.campaign_id,
        campaign_name=side_b.name,
        baseline="A",
        metric=metric,
        unit=m.unit,
        higher_is_better=m.higher_is_better,
        seed=seed,
        views={"compare": cells, "metadata": meta},
        warnings=dedupe(side_a.warnings("A") + side_b.warnings("B")),
        notes=notes,
        statistic=statistic,
        extra={"compare": {"a": side_a.campaign_id, "b": side_b.campaign_id}, "threshold_pct": threshold_pct},
        against_id=side_a.campaign_id,
        against_name=side_a.name,
    )
