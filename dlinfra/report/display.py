"""How a report's values read, shared by every human-facing format (table, Markdown, HTML).

Why a module of its own: :mod:`.render` (text formats) and :mod:`.html` both need these, and ``render``
dispatches to ``html``; with them in ``render`` the two modules imported each other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: Columns kept for CSV/JSON/plots but left out of the text tables (they would double their width).
HIDDEN = {"overhead": ("mean", "mean_ci_low", "mean_ci_high")}
EMPTY = {
    "scaling": "no config ran with more than one worker count next to a 1-worker (or single) cell",
    "ps": "no config ran with more than one parameter-server count",
    "sync_async": "no config ran in both sync and ps-async mode",
    "system": "no run recorded system samples",
    "step_times": "no run recorded per-step times",
    "metadata": "no metadata differs",
    "drift": "no layer has enough repeats to test for drift",
    "series": "no run recorded system samples",
}
#: Eight levels of a sparkline, low to high.
SPARKS = "▁▂▃▄▅▆▇█"
#: Most characters of a sparkline: a longer series is averaged into this many time buckets.
SPARK_WIDTH = 24


def format_value(column: str, value: Any) -> str:
    """The one display format of a cell (table and Markdown)."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if column.endswith("_pct"):
            text = f"{v:.1f}"
        elif abs(v) >= 100:
            text = f"{v:.1f}"
        elif abs(v) >= 1:
            text = f"{v:.3f}"
        else:
            text = f"{v:.4g}"
        return "0.0" if text in ("-0.0", "-0") else text
    return str(value)


def short_config_labels(configs: list[str], most: int = 40) -> list[str]:
    """Config labels without the ``k=v`` pairs they all share: what tells them apart, at most ``most`` characters."""
    tokens = [c.split() for c in configs]
    common = set.intersection(*(set(t) for t in tokens)) if len(tokens) > 1 else set()
    labels = [" ".join(t for t in ts if t not in common) or "-" for ts in tokens]
    return [label if len(label) <= most else label[: most - 1] + "…" for label in labels]


def workload_config_labels(frame: pd.DataFrame, most: int = 22) -> list[str]:
    """Each row's config as short as it can be within its workload: the keys that differ between the
    workload's configs, or the whole label (cut to ``most``) when it has one config."""
    labels = list(frame["config"])
    for _, group in frame.groupby("workload", sort=False):
        distinct = list(dict.fromkeys(group["config"]))
        short = dict(zip(distinct, short_config_labels(distinct, most) if len(distinct) > 1 else
                         [c if len(c) <= most else c[: most - 1] + "…" for c in distinct], strict=True))  # fmt: skip
        for position, config in zip(frame.index.get_indexer(group.index), group["config"], strict=True):
            labels[position] = short[config]
    return labels


#: The first table's columns in the terminal: what a reader needs to read a verdict, in 100 columns. The CSV,
#: JSON, Markdown and HTML keep every column (IQR, CV, the interval's ends, flags); the warnings below the
#: tables name each flagged row.
COMPACT_OVERHEAD = ["workload", "config", "layer", "runs", "median", "overhead % ± CI", "verdict"]


def compact_overhead(frame: pd.DataFrame, full_config: bool = False) -> pd.DataFrame:
    """The overhead view for a terminal: short config labels (the keys that differ within each workload; all
    of them with ``full_config``), the overhead with its interval's half-width (the smallest effect the
    repeats can tell)."""
    out = frame.copy()
    if not full_config:
        out["config"] = workload_config_labels(out)
    out["overhead % ± CI"] = [
        "-" if _missing(p) else f"{p:+.1f}" + ("" if _missing(h) else f" ± {h:.1f}")
        for p, h in zip(out["overhead_pct"], out["detectable_pct"], strict=True)
    ]
    return out[COMPACT_OVERHEAD]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def shown_columns(name: str, frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in HIDDEN.get(name, ())]


def sparkline(values: pd.Series, width: int = SPARK_WIDTH) -> str:
    """A series as a line of block characters scaled to its own peak (the peak is in the next column)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0 or np.isnan(x).all():
        return "-"
    buckets = [b for b in np.array_split(x, min(width, x.size)) if b.size]
    means = np.array([np.nanmean(b) if not np.isnan(b).all() else np.nan for b in buckets])
    top = np.nanmax(means)
    levels = np.zeros(len(means), dtype=int) if top <= 0 else np.round(means / top * (len(SPARKS) - 1))
    return "".join(" " if np.isnan(m) else SPARKS[int(level)] for m, level in zip(means, levels, strict=True))


def compact_series(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-second series as one row per run and node: a sparkline and the peak of each quantity (the text
    formats; CSV, JSON and the HTML plots keep every second)."""
    rows = []
    keys = ["workload", "config", "layer", "repeat", "node", "roles"]
    for key, group in frame.groupby(keys, sort=False):
        group = group.sort_values("t_s")
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row["seconds"] = int(group["t_s"].max() - group["t_s"].min() + 1)
        for column, peak in (("cpu_pct", "max_cpu_pct"), ("rss_mb", "max_rss_mb")):
            row[column] = sparkline(group[column])
            row[peak] = group[column].max()
        for column in ("rx_mb_s", "tx_mb_s", "gpu_util_pct", "gpu_mem_mb", "gpu_power_w"):
            if column in group:  # the GPU columns: only where the payload sampled GPUs
                row[column] = sparkline(group[column])
                row[f"max_{column}"] = group[column].max()
        rows.append(row)
    return pd.DataFrame(rows)


def text_frame(name: str, frame: pd.DataFrame, terminal: bool = False, full_config: bool = False) -> pd.DataFrame:
    """What a human-facing format shows of a view: the view itself, the series compacted; in a terminal, the
    overhead view compacted too (:func:`compact_overhead`)."""
    if frame.empty:
        return frame
    if name == "series":
        return compact_series(frame)
    if name == "overhead" and terminal:
        return compact_overhead(frame, full_config)
    return frame
