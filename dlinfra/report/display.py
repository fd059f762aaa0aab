"""How a report's values read, shared by every human-facing format (table, Markdown, HTML).

Why a module of its own: :mod:`.render` (text formats) and :mod:`.html` both need these, and ``render``
dispatches to ``html``; with them in ``render`` the two modules imported each other.
"""

from __future__ import annotations

import math
import re
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


#: Where a ``k=v`` pair of a config label starts (values may hold spaces: JSON of a data set's definition).
_PAIR = re.compile(r"(?:^| )([A-Za-z_][\w.-]*)=")


def config_pairs(label: str) -> dict[str, str]:
    """A config label (``k=v`` pairs, see :func:`frame.config_label`) back as key -> value text."""
    starts = list(_PAIR.finditer(label))
    if not starts:
        return {} if label in ("", "-") else {"": label}
    pairs = {}
    for match, after in zip(starts, [*starts[1:], None], strict=True):
        end = after.start() if after else len(label)
        pairs[match.group(1)] = label[match.end() : end]
    return pairs


def split_configs(configs: list[str]) -> tuple[list[str], str]:
    """Labels that keep only the keys whose values differ between ``configs`` (a key missing from some counts as
    differing), and the pairs they all share, once. Two different configs never get the same label: they differ
    in some key, and that key is kept, whole."""
    parsed = [config_pairs(c) for c in configs]
    keys = list(dict.fromkeys(k for p in parsed for k in p))
    varying = {k for k in keys if len({p.get(k) for p in parsed}) > 1}
    labels = [" ".join(f"{k}={v}" if k else v for k, v in p.items() if k in varying) for p in parsed]
    common = " ".join(f"{k}={v}" if k else v for k, v in (parsed[0].items() if parsed else ()) if k not in varying)
    return labels, common


def short_config_labels(configs: list[str]) -> list[str]:
    """Config labels without the pairs they all share ('-' where nothing is left)."""
    return [label or "-" for label in split_configs(configs)[0]]


def workload_config_labels(frame: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    """Each row's config within its workload: only the keys whose values differ between the workload's rows
    (empty where it has one config); and per workload, the pairs every row of it shares."""
    labels = list(frame["config"].astype(str))
    groups = frame.groupby("workload", sort=False) if "workload" in frame else [("", frame)]
    common = {}
    for workload, group in groups:
        distinct = list(dict.fromkeys(group["config"].astype(str)))
        short, common[str(workload)] = split_configs(distinct)
        by_config = dict(zip(distinct, short, strict=True))
        for position, config in zip(frame.index.get_indexer(group.index), group["config"].astype(str), strict=True):
            labels[position] = by_config[config]
    return labels, {w: c for w, c in common.items() if c}


#: The first table's columns in the terminal: what a reader needs to read a verdict, in 100 columns. The CSV,
#: JSON, Markdown and HTML keep every column (IQR, CV, the interval's ends, flags); the warnings below the
#: tables name each flagged row.
COMPACT_OVERHEAD = ["workload", "config", "layer", "runs", "median", "overhead % ± CI", "verdict"]


def compact_overhead(frame: pd.DataFrame) -> pd.DataFrame:
    """The overhead view for a terminal: the overhead with its interval's half-width (the precision the
    repeats reached: docs/report.md, detectable_pct) in one column, and fewer columns (``--wide`` shows them all)."""
    out = frame.copy()
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


def text_frame(name: str, frame: pd.DataFrame, terminal: bool = False, wide: bool = False) -> pd.DataFrame:
    """What a human-facing format shows of a view: the view itself, the series compacted; in a terminal, the
    overhead view compacted too (:func:`compact_overhead`) unless ``wide``."""
    if frame.empty:
        return frame
    if name == "series":
        return compact_series(frame)
    if name == "overhead" and terminal and not wide:
        return compact_overhead(frame)
    return frame


#: Column-name endings -> the unit a header shows.
UNITS = (("_mb_s", "MB/s"), ("_pct", "%"), ("_ms", "ms"), ("_mb", "MB"), ("_mhz", "MHz"), ("_w", "W"), ("_s", "s"))
#: Columns in the report's metric (their unit is the metric's).
METRIC_COLUMNS = ("median", "iqr", "mean", "mean_ci_low", "mean_ci_high", "median_alone", "median_shared")
#: Columns a narrow terminal keeps first, after the leading text columns that name a row.
FIRST = ("verdict", "overhead % ± CI", "status", "trend", "runs")


def header(column: str, unit: str = "", sep: str = " ") -> str:
    """A column's header with its unit: ``max_rss_mb`` -> ``max rss (MB)`` (``sep`` between the name and the
    unit: a newline keeps a terminal's number columns narrow)."""
    if column in METRIC_COLUMNS and unit:
        return f"{column.replace('_', ' ')}{sep}({unit})"
    for ending, name in UNITS:
        if column.endswith(ending) and len(column) > len(ending):
            return f"{column[: -len(ending)].replace('_', ' ')}{sep}({name})"
    return column.replace("_", " ") if column.islower() else column


def shared_config_lines(common: dict[str, str]) -> list[str]:
    """What a table's rows share, said once above it (per workload)."""
    return [f"{workload or 'every row'}, every row: {pairs}" for workload, pairs in common.items()]


def terminal_frame(
    name: str, frame: pd.DataFrame, width: int, wide: bool = False, full_config: bool = False
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """A view as a terminal shows it: config labels cut to the keys that differ within each workload (all of them
    with ``full_config``), and the columns that fit ``width`` (all with ``wide``); the lines to print above
    it (what the rows share), and the columns left out."""
    frame = text_frame(name, frame, terminal=True, wide=wide)
    frame = frame[shown_columns(name, frame)] if not wide else frame
    above: list[str] = []
    if "config" in frame and not frame.empty and not full_config:
        labels, common = workload_config_labels(frame)
        frame = frame.assign(config=[label or "-" for label in labels])
        above = shared_config_lines(common)
        if not any(labels):
            frame = frame.drop(columns="config")
    if wide or frame.empty:
        return frame, above, []
    kept = _fitting_columns(frame, width)
    return frame[kept], above, [c for c in frame.columns if c not in kept]


def _fitting_columns(frame: pd.DataFrame, width: int) -> list[str]:
    """The leading text columns (what names a row), then :data:`FIRST`, then the rest in order, while they fit
    ``width`` (text may wrap to 24 characters; numbers and words never break)."""
    leading = []
    for column in frame.columns:
        if pd.api.types.is_numeric_dtype(frame[column]) or column in FIRST:
            break
        leading.append(column)
    order = leading + [c for c in FIRST if c in frame and c not in leading]
    order += [c for c in frame.columns if c not in order]
    kept, used = [], -GAP
    for column in order:
        cells = [format_value(column, v) for v in frame[column]]
        numeric = pd.api.types.is_numeric_dtype(frame[column])
        words = [len(line) for line in header(column, sep="\n").splitlines()]
        words += [len(w) for text in cells for w in text.split()] or [1]
        need = max(max(words), max(map(len, cells)) if numeric else min(24, max(map(len, cells))))
        if column not in leading and used + GAP + need > width:
            continue
        kept.append(column)
        used += GAP + need
    return [c for c in frame.columns if c in kept]


#: Characters between two columns of a terminal table.
GAP = 2
