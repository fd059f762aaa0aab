"""The report's views: each a pandas DataFrame answering one question of the seeds.

- overhead: each layer against the baseline, per workload x config (the question).
- scaling: speedup and efficiency against the 1-worker cell (seed 003's ideal line).
- ps: the effect of the parameter-server count (seeds 000, 003).
- shared: each layer's degradation next to a background job against the same cell alone (seed 002).
- sync_async: sync vs async time-to-accuracy (seed 004).
- run_times: best and worst total run time per layer (seed 000, figures 9-10).
- system: per role, max CPU, max RSS, network rates (seed 004, tables 3, 4, 6), and GPU peaks where sampled.
- series: per node and second, CPU, memory and network rx/tx (seed 004's sar series; ``--view series``), and
  the node's GPUs where sampled.
- step_times: the distribution of per-step times per layer.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dlinfra.layers import LAYERS
from dlinfra.report import paired, stats
from dlinfra.report.frame import PS_KEYS, WORKER_KEYS, Metric, config_label, interval_options, noise_explained
from dlinfra.report.warnings import CODES, ReportWarning, refusal_reasons

#: A config label of cells that read a JPEG data set dlinfra generated (``data: generated:NAME`` of kind jpeg;
#: the set's definition is in the label, ``dataset={... "kind": "jpeg" ...}``; a set of kind mnist is real data).
GENERATED_DATA = re.compile(r'(^| )data=generated:.*(^| )dataset=\{[^}]*"kind": "jpeg"')

OVERHEAD_COLUMNS = [
    "workload",
    "config",
    "layer",
    "runs",
    "failed",
    "median",
    "iqr",
    "cv_pct",
    "overhead_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
    "flags",
    "detectable_pct",
    "mean",
    "mean_ci_low",
    "mean_ci_high",
]


def _layer_order(layers: list[str], baseline: str) -> list[str]:
    """Baseline first, then the layers in their usual order, unknown ones last."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(set(layers), key=lambda layer: (layer != baseline, rank.get(layer, 99), layer))


def _ok(values: pd.DataFrame) -> pd.DataFrame:
    return values[values["ok"] & values["value"].notna()]


def overhead_view(
    values: pd.DataFrame, failed: pd.DataFrame, metric: Metric, baseline: str, seed: int
) -> tuple[pd.DataFrame, list[ReportWarning]]:
    """Per workload x config x layer: runs, median, IQR, CV, overhead vs baseline with its CI, verdict."""
    rows: list[dict[str, object]] = []
    warnings: list[ReportWarning] = []
    good = _ok(values)
    failed_keys = set(zip(failed["cell_hash"], failed["repeat"], strict=True))
    groups = sorted(
        set(zip(values["workload"], values["config_label"], strict=True))
        | set(zip(failed["workload"], failed["config_label"], strict=True))
    )
    for workload, config in groups:
        in_group = values[(values["workload"] == workload) & (values["config_label"] == config)]
        group = good[(good["workload"] == workload) & (good["config_label"] == config)]
        failed_group = failed[(failed["workload"] == workload) & (failed["config_label"] == config)]
        if group.empty and not in_group[in_group["ok"]].empty:
            warnings.append(ReportWarning("no-metric", f"no run recorded {metric.column}", workload, config))
            continue
        base = group[group["layer"] == baseline]
        for layer in _layer_order(list(in_group["layer"]) + list(failed_group["layer"]), baseline):
            mine = group[group["layer"] == layer]
            extra_failed = in_group[(in_group["layer"] == layer) & ~in_group["ok"]]
            n_failed = int((failed_group["layer"] == layer).sum()) + sum(
                (h, r) not in failed_keys
                for h, r in zip(extra_failed["cell_hash"], extra_failed["repeat"], strict=True)
            )
            s = stats.summarise(mine["value"].to_numpy())
            key = (workload, config, layer)
            lo_m, hi_m = stats.mean_ci(mine["value"].to_numpy())
            flags: list[str] = []

            flag = functools.partial(_flag, flags, warnings, key)

            if n_failed:
                reasons = sorted(set(failed_group.loc[failed_group["layer"] == layer, "failure_reason"]) - {""})
                why = f": {'; '.join(reasons[:3])}" if reasons else ""
                flag("failed-cells", f"{n_failed} failed run(s) left out{why}")
            for code, message in stats.noise_flags(s, noise_explained(mine)):
                flag(code, message)
            if not mine.empty and mine["emulated"].any():
                flag("emulated", CODES["emulated"])
            if GENERATED_DATA.search(config):  # the row says what it read, wherever it is copied to
                flag("generated-data", CODES["generated-data"])
            verdict, point, low, high = _against_baseline(base, mine, layer, baseline, s.n, metric, flag)
            rows.append(
                {
                    "workload": workload,
                    "config": config,
                    "layer": layer,
                    "runs": s.n,
                    "failed": n_failed,
                    "median": s.median,
                    "iqr": s.iqr,
                    "cv_pct": s.cv_pct,
                    "overhead_pct": point,
                    "ci_low_pct": low,
                    "ci_high_pct": high,
                    # The interval's half-width: a true effect of this size is found about half the time (80%
                    # power needs about 1.4 times it; docs/report.md).
                    "detectable_pct": (high - low) / 2 if layer != baseline else math.nan,
                    "verdict": verdict,
                    "flags": ",".join(dict.fromkeys(flags)),
                    "mean": s.mean,
                    "mean_ci_low": lo_m,
                    "mean_ci_high": hi_m,
                }
            )
    return pd.DataFrame(rows, columns=OVERHEAD_COLUMNS), warnings


def _against_baseline(
    base: pd.DataFrame,
    mine: pd.DataFrame,
    layer: str,
    baseline: str,
    runs: int,
    metric: Metric,
    flag: Callable[[str, str], None],
) -> tuple[str, float, float, float]:
    """A layer's verdict against the baseline, and its overhead with the CI (NaN where there is none): refused
    where the runs may not be compared, flagged where the machines or runtimes underneath differ."""
    if layer == baseline:
        return ("baseline" if runs else "no runs"), math.nan, math.nan, math.nan
    if runs == 0:
        return "no runs", math.nan, math.nan, math.nan
    if base.empty:
        flag("no-baseline", f"no successful {baseline} run to compare with")
        return "no baseline", math.nan, math.nan, math.nan
    refused = refusal_reasons(base, mine)
    if refused:
        for code in refused:
            flag(code, CODES[code])
        return "refused", math.nan, math.nan, math.nan
    point, low, high = paired.overhead_ci(base, mine, metric.higher_is_better) or stats.overhead_ci(
        base["value"].to_numpy(), mine["value"].to_numpy(), metric.higher_is_better, **interval_options(base, mine)
    )  # a duet's pairs where the runs hold them (schedule: duet), else the runs of each side
    base_cpu = set(",".join(base["cpu_model"]).split(","))
    cpus = set(",".join(mine["cpu_model"]).split(","))
    if cpus != base_cpu:
        flag("cpu-model-differs", f"CPU model {', '.join(sorted(cpus))} vs {baseline}'s {', '.join(sorted(base_cpu))}")
    runtime, base_runtime = _runtime(mine), _runtime(base)
    if runtime != base_runtime:
        flag("runtime-differs", f"{runtime} vs {baseline}'s {base_runtime}")
    return stats.verdict(low, high), point, low, high


def _speedup(base: float, value: float, higher_is_better: bool) -> float:
    if not base or not value or math.isnan(base) or math.isnan(value):
        return math.nan
    return value / base if higher_is_better else base / value


def scaling_view(values: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """Speedup and efficiency against the 1-worker cell of the same config (else the single-mode cell)."""
    columns = ["workload", "config", "layer", "workers", "runs", "median", "speedup", "ideal", "efficiency_pct", "base"]
    good = _ok(values).copy()
    if good.empty:
        return pd.DataFrame(columns=columns)
    good["scale_key"] = [config_label(c, drop=WORKER_KEYS) for c in good["config"]]
    good["base_key"] = [config_label(c, drop=(*WORKER_KEYS, *PS_KEYS, "mode")) for c in good["config"]]
    rows = []
    for (workload, layer, key), group in good.groupby(["workload", "layer", "scale_key"], sort=True):
        if group["mode"].iloc[0] == "single":
            continue
        medians = group.groupby("workers")["value"].agg(["median", "size"])
        base_name, base = "1 worker", medians["median"].get(1, math.nan)
        if math.isnan(base):
            single = good[
                (good["workload"] == workload)
                & (good["layer"] == layer)
                & (good["mode"] == "single")
                & (good["base_key"] == group["base_key"].iloc[0])
            ]
            base_name, base = "single", float(single["value"].median()) if not single.empty else math.nan
        if math.isnan(base) or (medians.index > 1).sum() == 0:
            continue
        for workers, row in medians.iterrows():
            speedup = _speedup(base, float(row["median"]), metric.higher_is_better)
            rows.append(
                {
                    "workload": workload,
                    "config": key,
                    "layer": layer,
                    "workers": int(workers),
                    "runs": int(row["size"]),
                    "median": float(row["median"]),
                    "speedup": speedup,
                    "ideal": float(workers),
                    "efficiency_pct": speedup / int(workers) * 100,
                    "base": base_name,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def ps_view(values: pd.DataFrame, metric: Metric, seed: int) -> pd.DataFrame:
    """The effect of adding parameter servers, against the fewest-ps cell of the same config."""
    columns = [
        "workload",
        "config",
        "layer",
        "ps",
        "runs",
        "median",
        "effect_pct",
        "ci_low_pct",
        "ci_high_pct",
        "verdict",
    ]
    good = _ok(values).copy()
    if good.empty:
        return pd.DataFrame(columns=columns)
    good["ps_key"] = [config_label(c, drop=PS_KEYS) for c in good["config"]]
    rows = []
    for (workload, layer, key), group in good.groupby(["workload", "layer", "ps_key"], sort=True):
        counts = sorted(group["ps"].unique())
        if len(counts) < 2:
            continue
        base = group[group["ps"] == counts[0]]["value"].to_numpy()
        for ps in counts:
            mine = group[group["ps"] == ps]["value"].to_numpy()
            if ps == counts[0]:
                point, low, high, verdict = 0.0, math.nan, math.nan, "reference"
            else:
                point, low, high = stats.overhead_ci(base, mine, metric.higher_is_better)
                verdict = stats.verdict(low, high)
            rows.append(
                {
                    "workload": workload,
                    "config": key,
                    "layer": layer,
                    "ps": int(ps),
                    "runs": len(mine),
                    "median": float(np.median(mine)),
                    "effect_pct": point,
                    "ci_low_pct": low,
                    "ci_high_pct": high,
                    "verdict": verdict,
                }
            )
    return pd.DataFrame(rows, columns=columns)


#: Cell-config keys of the shared-resource scenario: the same cell alone and shared differs only in them.
SCENARIO_KEYS = ("scenario", "background")


def shared_view(values: pd.DataFrame, metric: Metric, seed: int) -> pd.DataFrame:
    """Per workload x config x layer: the cell next to a background job against the same cell alone
    (degradation > 0: worse when shared), with the CI of :func:`stats.overhead_ci`."""
    columns = [
        "workload",
        "config",
        "layer",
        "background",
        "runs_alone",
        "runs_shared",
        "median_alone",
        "median_shared",
        "degradation_pct",
        "ci_low_pct",
        "ci_high_pct",
        "detectable_pct",
        "verdict",
    ]
    good = _ok(values).copy()
    good = good[[isinstance(c, dict) and c.get("scenario") in ("alone", "shared") for c in good["config"]]]
    if good.empty:
        return pd.DataFrame(columns=columns)
    good["alone_key"] = [config_label(c, drop=SCENARIO_KEYS) for c in good["config"]]
    good["scenario"] = [c["scenario"] for c in good["config"]]
    good["background"] = [config_label(c.get("background") or {}) for c in good["config"]]
    rows = []
    for (workload, key, layer), group in good.groupby(["workload", "alone_key", "layer"], sort=True):
        alone_rows = group[group["scenario"] == "alone"]
        alone = alone_rows["value"].to_numpy()
        for background, shared in group[group["scenario"] == "shared"].groupby("background", sort=True):
            mine = shared["value"].to_numpy()
            point, low, high = (math.nan,) * 3
            verdict = "no alone run"
            if alone.size:
                options = interval_options(alone_rows, shared)
                point, low, high = stats.overhead_ci(alone, mine, metric.higher_is_better, **options)
                verdict = stats.verdict(low, high)
            rows.append(
                {
                    "workload": workload,
                    "config": key,
                    "layer": layer,
                    "background": background,
                    "runs_alone": int(alone.size),
                    "runs_shared": len(mine),
                    "median_alone": float(np.median(alone)) if alone.size else math.nan,
                    "median_shared": float(np.median(mine)),
                    "degradation_pct": point,
                    "ci_low_pct": low,
                    "ci_high_pct": high,
                    "detectable_pct": (high - low) / 2,
                    "verdict": verdict,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def sync_async_view(tta: pd.DataFrame, elapsed: pd.DataFrame) -> pd.DataFrame:
    """Sync vs async (ps-async) time-to-accuracy and elapsed time, same config otherwise (seed 004)."""
    columns = [
        "workload",
        "config",
        "layer",
        "workers",
        "async_ps",
        "sync_runs",
        "async_runs",
        "sync_tta_s",
        "async_tta_s",
        "tta_ratio",
        "sync_elapsed_s",
        "async_elapsed_s",
    ]
    good = elapsed[elapsed["ok"] & elapsed["mode"].isin(["sync", "ps-async"])].copy()
    if good.empty:
        return pd.DataFrame(columns=columns)
    tta_by_run = tta.set_index(["cell_hash", "repeat"])["value"]
    good["tta"] = [tta_by_run.get((h, r), math.nan) for h, r in zip(good["cell_hash"], good["repeat"], strict=True)]
    good["mode_key"] = [config_label(c, drop=("mode", *PS_KEYS)) for c in good["config"]]
    rows = []
    for (workload, layer, key), group in good.groupby(["workload", "layer", "mode_key"], sort=True):
        sync = group[group["mode"] == "sync"]
        if sync.empty:
            continue
        # One row per async parameter-server count: pooling them would blur the comparison.
        for ps, asyn in group[group["mode"] == "ps-async"].groupby("ps", sort=True):
            rows.append(_sync_async_row(workload, key, layer, int(ps), sync, asyn))
    return pd.DataFrame(rows, columns=columns)


def _sync_async_row(
    workload: str, key: str, layer: str, ps: int, sync: pd.DataFrame, asyn: pd.DataFrame
) -> dict[str, object]:
    s_tta, a_tta = sync["tta"].median(), asyn["tta"].median()
    return {
        "workload": workload,
        "config": key,
        "layer": layer,
        "workers": int(sync["workers"].iloc[0]),
        "async_ps": ps,
        "sync_runs": len(sync),
        "async_runs": len(asyn),
        "sync_tta_s": s_tta,
        "async_tta_s": a_tta,
        "tta_ratio": s_tta / a_tta if a_tta else math.nan,
        "sync_elapsed_s": sync["value"].median(),
        "async_elapsed_s": asyn["value"].median(),
    }


def run_times_view(elapsed: pd.DataFrame) -> pd.DataFrame:
    """Best and worst total run time per workload x layer over its configs (seed 000, figures 9 and 10)."""
    columns = [
        "workload",
        "layer",
        "rank",
        "config",
        "mode",
        "ps",
        "workers",
        "runs",
        "total_run_time_s",
        "step_time_s",
        "max_accuracy",
    ]
    good = _ok(elapsed)
    rows = []
    for (workload, layer), group in good.groupby(["workload", "layer"], sort=True):
        per_config = (
            group.groupby("config_label")
            .agg(
                mode=("mode", "first"),
                ps=("ps", "first"),
                workers=("workers", "first"),
                runs=("value", "size"),
                total_run_time_s=("value", "median"),
                step_time_s=("step_time_s", "median"),
                max_accuracy=("max_accuracy", "max"),
            )
            .sort_values(["total_run_time_s"], kind="stable")
        )
        for rank, position in (("best", 0), ("worst", -1)):
            config, row = per_config.index[position], per_config.iloc[position]
            rows.append({"workload": workload, "layer": layer, "rank": rank, "config": config, **row.to_dict()})
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({"ps": int, "workers": int, "runs": int}) if not frame.empty else frame


#: The system view's GPU columns: shown only when some run sampled a GPU (NVML on the target).
GPU_SYSTEM_COLUMNS = ["gpus", "max_gpu_util_pct", "max_gpu_mem_mb", "max_gpu_power_w"]


def system_view(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload x config x layer x role: max CPU %, max RSS, mean and max network rates (seed 004), the
    largest share of the payload's CPUs that other programs (and the host, as steal) took during a run, and,
    where the payload sampled GPUs, their peak utilisation, memory and power (any one GPU) and their count."""
    columns = [
        "workload",
        "config",
        "layer",
        "role",
        "processes",
        "max_cpu_pct",
        "max_rss_mb",
        "rx_mb_s",
        "tx_mb_s",
        "max_rx_mb_s",
        "max_tx_mb_s",
        "max_foreign_pct",
        "max_steal_pct",
    ]
    good = runs[runs["status"] == "ok"] if not runs.empty else runs
    if good.empty:
        return pd.DataFrame(columns=columns)
    good = good.assign(
        foreign_pct=pd.to_numeric(good.get("foreign_share"), errors="coerce") * 100,
        steal_pct=pd.to_numeric(good.get("steal_share"), errors="coerce") * 100,
    )
    frame = (
        good.groupby(["workload", "config_label", "layer", "role"], sort=True)
        .agg(
            processes=("role", "size"),
            max_foreign_pct=("foreign_pct", "max"),
            max_steal_pct=("steal_pct", "max"),
            max_cpu_pct=("max_cpu_pct", "max"),
            max_rss_mb=("max_rss_mb", "max"),
            rx_mb_s=("rx_mb_s", "median"),
            tx_mb_s=("tx_mb_s", "median"),
            max_rx_mb_s=("max_rx_mb_s", "max"),
            max_tx_mb_s=("max_tx_mb_s", "max"),
            **{c: (c, "max") for c in GPU_SYSTEM_COLUMNS if c in good},
        )
        .reset_index()
        .rename(columns={"config_label": "config"})
    )
    frame = frame.dropna(subset=["max_cpu_pct", "max_rss_mb"], how="all")
    if "max_gpu_util_pct" in frame and frame[GPU_SYSTEM_COLUMNS[1:]].notna().any().any():
        columns += GPU_SYSTEM_COLUMNS
    return frame[columns].reset_index(drop=True)


SERIES_COLUMNS = [
    "workload",
    "config",
    "layer",
    "repeat",
    "node",
    "roles",
    "t_s",
    "processes",
    "cpus",
    "cpu_pct",
    "cpu_util_pct",
    "rss_mb",
    "rx_mb_s",
    "tx_mb_s",
]


def _process_points(row: Any, offset: float) -> pd.DataFrame:
    """One process's samples as seconds since its run began, with network byte rates between samples."""
    samples = row["system_samples"] or []
    if not samples:
        return pd.DataFrame()
    t = np.array([s["elapsed_s"] for s in samples], dtype=float)
    points = pd.DataFrame(
        {
            "t": t + offset,
            "cpu": [float(s["cpu_percent"]) for s in samples],
            "rss": [float(s["rss_bytes"]) for s in samples],
        }
    )
    dt = np.diff(t, prepend=np.nan)
    for field, column in (("net_rx_bytes", "rx"), ("net_tx_bytes", "tx")):
        counter = np.array([s[field] for s in samples], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):  # the first sample has no interval before it
            rate = np.clip(np.diff(counter, prepend=np.nan), 0, None) / dt / 1e6
        points[column] = np.where(dt > 0, rate, np.nan)
    points["netns"] = row["hostname"] or row["physical_host"]
    points["process"] = f"{row['role']}{row['task_index']}"
    return points


#: The series' GPU columns, present when some run sampled a GPU: per node and second, the GPUs seen, their mean
#: utilisation and clocks, and their memory used and power summed.
GPU_SERIES_COLUMNS = ["gpus", "gpu_util_pct", "gpu_mem_mb", "gpu_power_w", "gpu_sm_mhz", "gpu_mem_mhz"]
_GPU_FIELDS = {
    "util": "util_percent",
    "mem": "memory_used_bytes",
    "power": "power_w",
    "sm": "sm_clock_mhz",
    "memclk": "mem_clock_mhz",
}


def _gpu_points(row: Any, offset: float) -> pd.DataFrame:
    """One process's GPU readings, one row per sample and GPU, as seconds since its run began."""
    rows = [
        {
            "t": float(s["elapsed_s"]) + offset,
            "gpu": g.get("uuid") or str(g["index"]),
            **{k: np.nan if g.get(f) is None else float(g[f]) for k, f in _GPU_FIELDS.items()},
        }
        for s in row["system_samples"] or []
        for g in s.get("gpus") or []
    ]
    return pd.DataFrame(rows)


def _gpu_per_second(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """A node's GPUs per second (index ``t_s``). Each GPU counts once: every process of a node may read it."""
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    points = pd.concat(parts, ignore_index=True)
    points["t_s"] = np.floor(points["t"]).astype(int)
    per_gpu = points.groupby(["t_s", "gpu"])[list(_GPU_FIELDS)].mean()
    return per_gpu.groupby("t_s").agg(
        gpus=("util", "size"),
        gpu_util_pct=("util", "mean"),
        gpu_mem_mb=("mem", lambda m: m.sum(min_count=1) / 1e6),
        gpu_power_w=("power", lambda w: w.sum(min_count=1)),
        gpu_sm_mhz=("sm", "mean"),
        gpu_mem_mhz=("memclk", "mean"),
    )


def series_view(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run x node x second: the node's CPU %, memory and network rx/tx, like seed 004's sar series.

    The payload samples each process every second (CPU % and RSS its own, network bytes its host's or
    container's). A node's point sums its processes' CPU % (100 = one core; ``cpu_util_pct`` divides by the
    CPUs they may use, as sar's %CPU) and RSS, and its network rate counts each network namespace once (every
    process of a host sees the same counter). Time is seconds since the run's first process started. Where the
    payload sampled GPUs (NVML), the GPU columns (:data:`GPU_SERIES_COLUMNS`) follow; each GPU counts once.
    """
    good = runs[runs["status"] == "ok"] if not runs.empty else runs
    if good.empty or "system_samples" not in good:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    frames = []
    for _, run in good.groupby(["cell_hash", "repeat"], sort=False):
        starts = pd.to_datetime(run["start_utc"], utc=True, format="ISO8601")
        first = starts.min()
        for node, procs in run.groupby("physical_host", sort=True):
            offsets = {i: (starts[i] - first).total_seconds() for i in procs.index}
            parts = [_process_points(row, offsets[i]) for i, row in procs.iterrows()]
            parts = [p for p in parts if not p.empty]
            if not parts:
                continue
            points = pd.concat(parts, ignore_index=True)
            points["t_s"] = np.floor(points["t"]).astype(int)
            per_process = points.groupby(["t_s", "netns", "process"]).agg(
                cpu=("cpu", "mean"), rss=("rss", "max"), rx=("rx", "mean"), tx=("tx", "mean")
            )
            per_netns = per_process.groupby(["t_s", "netns"]).agg(
                processes=("cpu", "size"), cpu=("cpu", "sum"), rss=("rss", "sum"), rx=("rx", "max"), tx=("tx", "max")
            )
            per_node = per_netns.groupby("t_s").agg(
                processes=("processes", "sum"),
                cpu_pct=("cpu", "sum"),
                rss_mb=("rss", "sum"),
                rx_mb_s=("rx", lambda r: r.sum(min_count=1)),
                tx_mb_s=("tx", lambda r: r.sum(min_count=1)),
            )
            gpus = _gpu_per_second([_gpu_points(row, offsets[i]) for i, row in procs.iterrows()])
            per_node = per_node.join(gpus, how="left") if not gpus.empty else per_node
            first_row = procs.iloc[0]
            cpus = len({c for ids in procs["cpu_ids"] for c in ids}) or math.nan
            roles = sorted(f"{r}{i}" for r, i in zip(procs["role"], procs["task_index"], strict=True))
            frame = per_node.reset_index().assign(
                workload=first_row["workload"],
                config=first_row["config_label"],
                layer=first_row["layer"],
                repeat=int(first_row["repeat"]),
                node=node,
                roles=" ".join(roles),
                cpus=cpus,
            )
            frame["rss_mb"] = frame["rss_mb"] / 1e6
            frame["cpu_util_pct"] = frame["cpu_pct"] / cpus
            frames.append(frame[[c for c in SERIES_COLUMNS + GPU_SERIES_COLUMNS if c in frame]])
    if not frames:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out = out[[c for c in SERIES_COLUMNS + GPU_SERIES_COLUMNS if c in out]]
    return out.sort_values(["workload", "config", "layer", "repeat", "node", "t_s"], kind="stable").reset_index(
        drop=True
    )


def step_times(runs: pd.DataFrame, baseline: str) -> tuple[pd.DataFrame, dict[str, list[float]]]:
    """Pooled per-step times per workload x config x layer: a summary table and the samples for plots."""
    columns = ["workload", "config", "layer", "steps", "p5_ms", "median_ms", "p95_ms"]
    rows, samples = [], {}
    good = runs[runs["status"] == "ok"] if not runs.empty else runs
    if good.empty:
        return pd.DataFrame(columns=columns), samples
    for (workload, config), group in good.groupby(["workload", "config_label"], sort=True):
        for layer in _layer_order(list(group["layer"]), baseline):
            pooled = [s for lst in group.loc[group["layer"] == layer, "step_samples"] for s in lst]
            if not pooled:
                continue
            p5, p50, p95 = np.percentile(np.asarray(pooled) * 1000, [5, 50, 95])
            rows.append(
                {
                    "workload": workload,
                    "config": config,
                    "layer": layer,
                    "steps": len(pooled),
                    "p5_ms": p5,
                    "median_ms": p50,
                    "p95_ms": p95,
                }
            )
            samples[f"{workload}|{config}|{layer}"] = pooled
    return pd.DataFrame(rows, columns=columns), samples


def _runtime(runs: pd.DataFrame) -> str:
    """The interpreter and TensorFlow a group of runs used: same payload bytes can still run on other builds."""
    pythons = sorted(set(",".join(runs["python_version"]).split(",")))
    tfs = sorted(set(",".join(runs["tf_version"]).split(",")))
    return f"Python {', '.join(pythons)}, TensorFlow {', '.join(tfs)}"


def _flag(flags: list[str], warnings: list[ReportWarning], key: tuple[str, ...], code: str, message: str) -> None:
    """One flag on a row of the overhead view: its code in the row's flags, and a warning naming the row."""
    flags.append(code)
    warnings.append(ReportWarning(code, message, *key))
