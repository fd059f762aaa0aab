"""Store -> tidy pandas frames: one row per process, then one value per run.

The report compares *runs* (one cell x repeat), not processes: a distributed
run has one row per ps/worker/chief, and they must be folded into one number
per run before any statistics, or a 4-worker cell would count four times.

"Config" here is the cell config minus the layer and minus placement details
(hosts, addresses, CPU sets) that differ between layers by construction: the
same experiment on ``bm`` and on ``vm`` lands on different addresses, and
those must not split the comparison. ``placement`` (pack/spread) *is* kept:
it is an experimental factor (seed 000 compares the two).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.layers import layer_label
from dlinfra.report import stats
from dlinfra.results.export import runs_frame
from dlinfra.results.store import CONTAMINATED, ResultsStore

#: Cell-config keys that name *where* (or through which provider) a cell ran rather than *what* it ran: the
#: layers of one config are compared with each other, so the provider that made each layer is not part of it.
PLACEMENT_KEYS = frozenset(
    {
        "layer",
        "provider",
        "runtime",  # a container's OCI runtime: part of its layer's label (layer_label), not of the config
        "workload",
        "host",
        "hosts",
        "physical_host",
        "target",
        "targets",
        "target_address",
        "address",
        "addresses",
        "hostname",
        "cpu_set",
        "cpu_sets",
        "cpus",
        "cpuset",
    }
)
#: Config keys that may hold the worker / parameter-server counts (the spec's names are not fixed yet).
WORKER_KEYS = ("workers", "num_workers", "worker_count", "n_workers")
PS_KEYS = ("ps", "num_ps", "ps_count", "n_ps", "parameter_servers")


@dataclass(frozen=True)
class Metric:
    """A metric the report can compare, with the direction that counts as better."""

    name: str
    column: str
    unit: str
    higher_is_better: bool


METRICS = {
    "throughput": Metric("throughput", "examples_per_sec", "examples/s", True),
    "elapsed": Metric("elapsed", "elapsed_s", "s", False),
    "time-to-accuracy": Metric("time-to-accuracy", "time_to_accuracy_s", "s", False),
}


def report_config(cell_config: dict[str, Any]) -> dict[str, Any]:
    """The cell config that defines a comparison group: no layer, no placement details."""
    return {k: v for k, v in cell_config.items() if k not in PLACEMENT_KEYS}


def config_label(config: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    """A stable human-readable label: ``k=v`` pairs sorted by key; '-' when empty."""
    items = [(k, v) for k, v in sorted(config.items()) if k not in drop]
    if not items:
        return "-"
    return " ".join(
        f"{k}={json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else v}" for k, v in items
    )


def _first_int(config: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return None


def _rates(samples: list[dict[str, Any]], field: str) -> tuple[float, float]:
    """Mean and max byte rate (MB/s) of a cumulative counter sampled every second."""
    if len(samples) < 2:
        return (np.nan, np.nan)
    t = np.array([s["elapsed_s"] for s in samples], dtype=float)
    b = np.array([s[field] for s in samples], dtype=float)
    dt = np.diff(t)
    db = np.clip(np.diff(b), 0, None)  # a counter reset is not negative traffic
    ok = dt > 0
    if not ok.any():
        return (np.nan, np.nan)
    span = t[-1] - t[0]
    mean = db.sum() / span / 1e6 if span > 0 else np.nan
    return (float(mean), float((db[ok] / dt[ok]).max() / 1e6))


def _peak(readings: list[dict[str, Any]], field: str, scale: float = 1.0) -> float:
    values = [r[field] for r in readings if r.get(field) is not None]
    return max(values) / scale if values else np.nan


def gpu_peaks(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A process's GPU readings at their peak (any one GPU): utilisation %, memory used (MB), power (W); NaN
    without GPU readings (older records, or no NVML on the target)."""
    readings = [g for s in samples for g in s.get("gpus") or []]
    return {
        "gpus": len({g.get("uuid") or g["index"] for g in readings}),
        "max_gpu_util_pct": _peak(readings, "util_percent"),
        "max_gpu_mem_mb": _peak(readings, "memory_used_bytes", 1e6),
        "max_gpu_power_w": _peak(readings, "power_w"),
    }


def load_runs(store: ResultsStore, campaign_id: str) -> pd.DataFrame:
    """One row per process per run, with the parsed record's config, step samples, system samples (for the
    per-node series) and their summary."""
    frame = runs_frame(store, campaign_id, with_records=True)
    if frame.empty:
        return frame
    extra: list[dict[str, Any]] = []
    layers: list[str] = []
    for layer, record in zip(frame["layer"], frame["record"], strict=True):
        prov, metrics = record["provenance"], record["metrics"]
        layers.append(layer_label(layer, prov.get("cell_config") or {}))
        cfg = report_config(prov.get("cell_config") or {})
        system = metrics.get("system") or []
        rx_mean, rx_max = _rates(system, "net_rx_bytes")
        tx_mean, tx_max = _rates(system, "net_tx_bytes")
        accuracy = [p["value"] for p in metrics.get("accuracy") or []]
        if metrics.get("final_accuracy") is not None:
            accuracy.append(metrics["final_accuracy"])
        extra.append(
            {
                "config": cfg,
                "config_label": config_label(cfg),
                "batch_size": metrics.get("batch_size"),
                "step_samples": list((metrics.get("step_times") or {}).get("samples") or []),
                "max_cpu_pct": max((s["cpu_percent"] for s in system), default=np.nan),
                "max_rss_mb": max((s["rss_bytes"] for s in system), default=np.nan) / 1e6,
                "rx_mb_s": rx_mean,
                "tx_mb_s": tx_mean,
                "max_rx_mb_s": rx_max,
                "max_tx_mb_s": tx_max,
                "max_accuracy": max(accuracy, default=np.nan),
                "speed_cv_pct": (metrics.get("steadiness") or {}).get("cv_pct", np.nan),
                "system_samples": system,
                **gpu_peaks(system),
                "cpu_ids": list(prov.get("cpu_set") or []),
                "_workers_cfg": _first_int(cfg, WORKER_KEYS),
                "_ps_cfg": _first_int(cfg, PS_KEYS),
            }
        )
    frame = pd.concat([frame.drop(columns=["record"]), pd.DataFrame(extra, index=frame.index)], axis=1)
    frame["layer"] = layers
    # Worker and ps counts: from the config when it names them, else counted from the run's processes.
    counted = frame.groupby(["cell_hash", "repeat"])["role"].agg(
        workers=lambda r: max(int((r == "worker").sum()), 1),
        ps=lambda r: int((r == "ps").sum()),
    )
    frame = frame.join(counted, on=["cell_hash", "repeat"])
    frame["workers"] = frame["_workers_cfg"].fillna(frame["workers"]).astype(int)
    frame["ps"] = frame["_ps_cfg"].fillna(frame["ps"]).astype(int)
    return frame.drop(columns=["_workers_cfg", "_ps_cfg"])


def _run_value(rows: pd.DataFrame, metric: Metric) -> float:
    """Fold the processes of one run into one number (see module docstring and docs/report.md)."""
    values = rows[metric.column].astype(float)
    if values.isna().all():
        return np.nan
    if metric.name == "elapsed":
        return float(values.max())  # the run ends when its last process ends
    if metric.name == "time-to-accuracy":
        return float(values.min())  # the first process (the evaluating chief) to see the target
    for role in ("single", "chief"):
        own = values[rows["role"] == role].dropna()
        if not own.empty:  # the single process, or the coordinator's cluster-wide rate
            return float(own.iloc[0])
    return float(values[rows["role"] == "worker"].sum(min_count=1))


def _largest(rows: pd.DataFrame, column: str) -> float:
    """The largest of a run's processes' figures (NaN where none has one, or the column is not stored)."""
    if column not in rows:
        return np.nan
    return float(pd.to_numeric(rows[column], errors="coerce").max())


def noise_explained(values: pd.DataFrame) -> str:
    """What the records of these runs (:func:`run_values` rows) say of their variation: the CPU's speed within
    them (the median chunk CV), against others' and steal's largest shares (:func:`stats.explain_cv`)."""
    if values.empty or "speed_cv_pct" not in values:
        return ""
    speed = pd.to_numeric(values["speed_cv_pct"], errors="coerce").dropna()
    if speed.empty:
        return ""
    foreign = pd.to_numeric(values["foreign_share"], errors="coerce").max() * 100
    steal = pd.to_numeric(values["steal_share"], errors="coerce").max() * 100
    return stats.explain_cv(
        float(speed.median()), None if pd.isna(foreign) else float(foreign), None if pd.isna(steal) else float(steal)
    )


def run_values(runs: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """One row per run (cell x repeat): its metric value and what decides comparability."""
    columns = [
        "workload",
        "config_label",
        "layer",
        "cell_hash",
        "repeat",
        "mode",
        "workers",
        "ps",
        "value",
        "ok",
        "payload_hashes",
        "emulated",
        "cpu_model",
        "tf_version",
        "python_version",
        "elapsed_s",
        "step_time_s",
        "max_accuracy",
        "speed_cv_pct",
        "foreign_share",
        "steal_share",
        "config",
        "pair_id",
        "pair_overlap_s",
    ]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for (cell_hash, repeat), rows in runs.groupby(["cell_hash", "repeat"], sort=False):
        first = rows.iloc[0]
        out.append(
            {
                "workload": first["workload"],
                "config_label": first["config_label"],
                "layer": first["layer"],
                "cell_hash": cell_hash,
                "repeat": int(repeat),
                "mode": first["mode"],
                "workers": int(first["workers"]),
                "ps": int(first["ps"]),
                "value": _run_value(rows, metric),
                "ok": bool((rows["status"] == "ok").all()),
                "payload_hashes": ",".join(sorted(set(rows["payload_hash"]))),
                "emulated": bool(rows["emulated"].any()),
                "cpu_model": ",".join(sorted(set(rows["cpu_model"]))),
                "tf_version": ",".join(sorted(set(rows["tf_version"]))),
                "python_version": ",".join(sorted(set(rows["python_version"]))),
                "elapsed_s": float(rows["elapsed_s"].astype(float).max()),
                "step_time_s": float(rows["step_time_median_s"].astype(float).median()),
                "max_accuracy": float(rows["max_accuracy"].astype(float).max()),
                # Why a run was slow, as its records say: the CPU's speed within it, others' and steal's shares.
                "speed_cv_pct": _largest(rows, "speed_cv_pct"),
                "foreign_share": _largest(rows, "foreign_share"),
                "steal_share": _largest(rows, "steal_share"),
                "config": first["config"],
                # schedule: duet: the pair it was measured in (None in a sequential campaign, or a store from before)
                "pair_id": first.get("pair_id"),
                "pair_overlap_s": first.get("pair_overlap_s"),
            }
        )
    return pd.DataFrame(out, columns=columns)


def failed_cells(store: ResultsStore, campaign_id: str) -> pd.DataFrame:
    """Cells x repeats the store holds as failed, labelled like runs."""
    rows = [
        {
            "workload": c["workload"],
            "config_label": config_label(report_config(c["config"])),
            "layer": layer_label(c["layer"], c["config"]),
            "cell_hash": c["cell_hash"],
            "repeat": c["repeat"],
            "failure_reason": c["failure_reason"] or "",
        }
        for c in store.cells(campaign_id)
        if c["status"] not in ("ok", CONTAMINATED)  # a contaminated run ran: the report counts it apart
    ]
    return pd.DataFrame(rows, columns=["workload", "config_label", "layer", "cell_hash", "repeat", "failure_reason"])


def leave_out_contaminated(runs: pd.DataFrame) -> tuple[pd.DataFrame, int, float | None]:
    """The runs without those of contaminated attempts (others took more of their CPUs than the campaign
    allowed); returns the kept rows, how many runs (cell x repeat) were left out and their largest foreign share."""
    if runs.empty or "contaminated" not in runs:
        return runs, 0, None
    flagged = runs["contaminated"].fillna(0).astype(int) == 1
    if not flagged.any():
        return runs, 0, None
    left_out = runs[flagged]
    worst = pd.to_numeric(left_out["foreign_share"], errors="coerce").max()
    count = len(left_out.groupby(["cell_hash", "repeat"]))
    return runs[~flagged], count, (None if pd.isna(worst) else float(worst))


def require_metric(values: pd.DataFrame, metric: Metric, campaign_id: str) -> None:
    """A report on a metric no run recorded would be all dashes: say so instead."""
    if values.empty or values.loc[values["ok"], "value"].notna().sum() == 0:
        hint = {
            "time-to-accuracy": "run cells with a target accuracy, or choose --metric throughput",
            "throughput": "choose --metric elapsed (sysbench and kernel workloads record no examples/s)",
        }.get(metric.name, "choose another --metric")
        raise DlinfraError(f"no successful run in campaign {campaign_id} recorded {metric.column}", hint)


def trim_runs(values: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """MLPerf-style outlier policy: drop the fastest and the slowest successful run of each workload x config x
    layer that has at least 3 of them; returns the kept runs and how many were dropped.

    Why both ends: dropping only the slow one would bias the mean up. Failed runs are kept (they are counted
    as failed, not measured).
    """
    if values.empty:
        return values, 0
    good = values["ok"] & values["value"].notna()
    drop: list[Any] = []
    values = values.assign(trimmed=0)  # runs dropped at each end of the row's group: the interval is Yuen's
    for _, group in values[good].groupby(["workload", "config_label", "layer"], sort=False):
        if len(group) >= 3:
            ordered = group["value"].sort_values(kind="stable")
            drop += [ordered.index[0], ordered.index[-1]]
            values.loc[group.index, "trimmed"] = 1
    return values.drop(index=drop), len(drop)


def sequential(values: pd.DataFrame, rule: Any) -> pd.DataFrame:
    """``values`` of a campaign whose repeats were sized by its noise (``rule``: the spec's ``repeats``, a mapping)
    with their intervals' nominal level raised to :data:`stats.SEQUENTIAL_CONFIDENCE`, which keeps 95% coverage
    under the stopping rule; other campaigns' values as they are."""
    return values.assign(confidence=stats.SEQUENTIAL_CONFIDENCE) if isinstance(rule, dict) else values


def interval_options(baseline: pd.DataFrame, mine: pd.DataFrame) -> dict[str, Any]:
    """How :func:`stats.overhead_ci` computes the interval of ``mine`` against ``baseline`` (rows of
    :func:`run_values`): at the level :func:`sequential` set, with Yuen's correction where :func:`trim_runs` cut."""

    def trimmed(rows: pd.DataFrame) -> int:
        return int(rows["trimmed"].max()) if "trimmed" in rows and len(rows) else 0

    levels = [float(r["confidence"].max()) for r in (baseline, mine) if "confidence" in r and len(r)]
    return {"confidence": max(levels, default=stats.CONFIDENCE), "trimmed": (trimmed(baseline), trimmed(mine))}
