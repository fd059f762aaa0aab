"""One self-contained HTML page: the tables, the warnings and inline SVG plots.

Nothing is fetched at view time (no scripts, fonts, stylesheets or images by
URL): the page is mailed, archived and opened on air-gapped machines. Plots
are drawn by matplotlib (Agg backend, no display) as SVG and inlined as ``<svg>``.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from html import escape

import matplotlib

matplotlib.use("Agg")  # never a display; set before pyplot is imported
import matplotlib.pyplot as plt
import pandas as pd

from dlinfra.errors import DlinfraError
from dlinfra.report.display import (
    EMPTY,
    format_value,
    header,
    shared_config_lines,
    short_config_labels,
    shown_columns,
    text_frame,
    workload_config_labels,
)
from dlinfra.report.model import VIEW_TITLES, Report

#: Most bars/boxes per plot; larger campaigns get the first ones and a note.
MAX_GROUPS = 16

STYLE = """
body{font-family:system-ui,sans-serif;margin:1em 1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 6px}th{background:#f0f0f0}td{white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.txt{white-space:normal;overflow-wrap:break-word}td.txt>div{max-width:20em}
td details summary{cursor:pointer}td details[open]{max-width:40em}
p.same{font-size:13px;color:#444;margin:.2em 0;overflow-wrap:anywhere}
.warnings{border:2px solid #c62828;background:#fff4f4;padding:.5em 1em;margin:1em 0;overflow-wrap:anywhere}
.warnings li{margin:.2em 0}.ok{border:2px solid #2e7d32;background:#f3fbf3;padding:.5em 1em}
figure{margin:1em 0}figcaption{font-size:13px;color:#555}svg{max-width:100%;height:auto}
.slower{color:#b71c1c}.faster{color:#1b5e20}.refused{color:#b71c1c;font-weight:bold}
"""


def _svg(fig: plt.Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    return re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)


def _colors(layers: list[str]) -> dict[str, str]:
    palette = {"bm": "#455a64", "ctr": "#1e88e5", "vm": "#fb8c00", "ctr-vm": "#8e24aa"}
    extra = iter(["#43a047", "#e53935", "#6d4c41"])
    return {layer: palette.get(layer) or next(extra, "#999999") for layer in layers}


def throughput_plots(report: Report) -> list[tuple[str, str]]:
    """Per workload: the metric's mean per layer and config, with 95% t-interval bars."""
    frame = report.views["overhead"]
    frame = frame[frame["runs"] > 0]
    plots = []
    for workload, group in frame.groupby("workload", sort=True):
        configs = list(dict.fromkeys(group["config"]))[:MAX_GROUPS]
        layers = list(dict.fromkeys(group["layer"]))
        colors = _colors(layers)
        fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(configs) * max(1, len(layers)) / 2), 3.4))
        width = 0.8 / max(1, len(layers))
        for i, layer in enumerate(layers):
            xs, ys, err_lo, err_hi = [], [], [], []
            for j, config in enumerate(configs):
                row = group[(group["config"] == config) & (group["layer"] == layer)]
                if row.empty:
                    continue
                r = row.iloc[0]
                xs.append(j + (i - (len(layers) - 1) / 2) * width)
                ys.append(r["mean"])
                lo, hi = r["mean_ci_low"], r["mean_ci_high"]
                err_lo.append(0 if math.isnan(lo) else r["mean"] - lo)
                err_hi.append(0 if math.isnan(hi) else hi - r["mean"])
            # An emulated guest's bar is hatched and named so: the table refuses to compare it with the baseline.
            emulated = group.loc[group["layer"] == layer, "flags"].str.contains("emulated").any()
            ax.bar(xs, ys, width=width, color=colors[layer], yerr=[err_lo, err_hi], capsize=3,
                   hatch="//" if emulated else None, alpha=0.5 if emulated else 1.0,
                   label=f"{layer} (emulated, not compared)" if emulated else layer)  # fmt: skip
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(short_config_labels(configs), rotation=20, ha="right", fontsize=7)
        ax.set_ylabel(f"{report.metric} ({report.unit})")
        ax.set_title(f"{workload}: mean {report.metric} per layer, 95% CI")
        ax.legend(fontsize=8)
        plots.append((f"{workload}: {report.metric} per layer (mean, 95% CI bars)", _svg(fig)))
    return plots


def scaling_plots(report: Report) -> list[tuple[str, str]]:
    """Per workload: speedup against workers for each layer and config, with the ideal line."""
    frame = report.views.get("scaling", pd.DataFrame())
    plots = []
    for workload, group in frame.groupby("workload", sort=True) if not frame.empty else []:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        top = int(group["workers"].max())
        ax.plot([1, top], [1, top], "--", color="#999999", label="ideal (linear)")
        colors = _colors(list(dict.fromkeys(group["layer"])))
        curves = list(group.groupby(["layer", "config"], sort=True))[:MAX_GROUPS]
        labels = short_config_labels([config for (_, config), _ in curves])  # what differs, never cut
        for ((layer, _), curve), short in zip(curves, labels, strict=True):
            curve = curve.sort_values("workers")
            label = textwrap.fill(f"{layer} {short}", 40)
            ax.plot(curve["workers"], curve["speedup"], "o-", color=colors[layer], label=label)
        ax.set_xlabel("workers")
        ax.set_ylabel("speedup")
        ax.set_title(f"{workload}: scaling against 1 worker")
        ax.legend(fontsize=7)
        plots.append((f"{workload}: speedup against workers, dashed line = ideal", _svg(fig)))
    return plots


def step_time_plots(report: Report) -> list[tuple[str, str]]:
    """Per workload: box plots of the pooled per-step times of each layer and config."""
    by_workload: dict[str, list[tuple[str, str, list[float]]]] = {}
    for key, samples in report.step_samples.items():
        workload, config, layer = key.split("|", 2)
        by_workload.setdefault(workload, []).append((layer, config, samples))
    plots = []
    for workload, runs in sorted(by_workload.items()):
        # Each box named by what tells its config apart within the workload, wrapped, never cut.
        labels = short_config_labels([config for _, config, _ in runs])
        boxes = [
            (f"{layer}\n{textwrap.fill(label, 24)}", samples)
            for (layer, _, samples), label in zip(runs, labels, strict=True)
        ]
        boxes = boxes[:MAX_GROUPS]
        fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(boxes)), 3.6))
        ax.boxplot([[s * 1000 for s in b[1]] for b in boxes], whis=(5, 95), showfliers=False)
        ax.set_xticks(range(1, len(boxes) + 1))
        ax.set_xticklabels([b[0] for b in boxes], fontsize=7)
        ax.set_ylabel("step time (ms)")
        ax.set_title(f"{workload}: per-step times (whiskers 5th-95th percentile)")
        plots.append((f"{workload}: step-time distribution per layer", _svg(fig)))
    return plots


def compare_plots(report: Report) -> list[tuple[str, str]]:
    """``dlinfra compare``: each matched cell's change B against A, with its 95% CI, one bar per cell."""
    frame = report.views.get("compare")
    if frame is None or frame.empty or "change_pct" not in frame:
        return []
    shown = frame.dropna(subset=["change_pct"]).head(MAX_GROUPS)
    if shown.empty:
        return []
    labels = [f"{r.workload} {r.layer} {r.config}"[:60] for r in shown.itertuples(index=False)]
    change = shown["change_pct"].astype(float)
    low = (change - shown["ci_low_pct"].astype(float)).clip(lower=0)
    high = (shown["ci_high_pct"].astype(float) - change).clip(lower=0)
    colors = [
        "#999999" if v == "no difference" else "#1b9e77" if v == "faster" else "#d95f02" for v in shown["verdict"]
    ]
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(shown) + 1.2))
    ax.barh(range(len(shown)), change, xerr=[low, high], color=colors, capsize=3)
    ax.axvline(0, color="#333333", linewidth=0.8)
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"change of {report.metric}, B against A (%)")
    caption = "change per matched cell with its 95% CI (grey: no difference)"
    if len(frame) > len(shown):
        caption += f"; unmatched or capped cells ({len(frame) - len(shown)}) are in the table"
    return [(caption, _svg(fig))]


def series_plots(report: Report) -> list[tuple[str, str]]:
    """Per run: CPU %, memory and network rx/tx of each node over time (seed 004's sar figures), and GPU
    utilisation where the payload sampled GPUs."""
    frame = report.views.get("series")
    if frame is None or frame.empty:
        return []
    plots = []
    runs = list(frame.groupby(["workload", "config", "layer", "repeat"], sort=False))
    gpu = "gpu_util_pct" in frame and bool(frame["gpu_util_pct"].notna().any())
    ylabels = ("CPU % (100 = one core)", "memory (MB, RSS)", "network (MB/s)") + (("GPU % (mean of GPUs)",) * gpu)
    for (workload, config, layer, repeat), run in runs[:MAX_GROUPS]:
        fig, axes = plt.subplots(1, len(ylabels), figsize=(11.0 + 3.5 * gpu, 2.8))
        for node, curve in run.groupby("node", sort=True):
            label = f"{node} ({curve['roles'].iloc[0]})"
            axes[0].plot(curve["t_s"], curve["cpu_pct"], label=label)
            axes[1].plot(curve["t_s"], curve["rss_mb"], label=label)
            axes[2].plot(curve["t_s"], curve["rx_mb_s"], label=f"{label} rx")
            axes[2].plot(curve["t_s"], curve["tx_mb_s"], "--", label=f"{label} tx")
            if gpu:
                axes[3].plot(curve["t_s"], curve["gpu_util_pct"], label=label)
        for ax, ylabel in zip(axes, ylabels, strict=True):
            ax.set_xlabel("s since the run began")
            ax.set_ylabel(ylabel)
        axes[0].legend(fontsize=6)
        axes[2].legend(fontsize=6)
        fig.suptitle(f"{workload} {layer} repeat {repeat}: {config[:80]}", fontsize=9)
        plots.append((f"{workload} {layer} repeat {repeat}: per-node series ({config})", _svg(fig)))
    if len(runs) > MAX_GROUPS:
        plots.append((f"the first {MAX_GROUPS} of {len(runs)} runs are drawn; every second is in the CSV", ""))
    return plots


def _table(name: str, frame: pd.DataFrame, unit: str) -> str:
    """A view as an HTML table: units in the headers, each config as what tells it apart within its workload
    (what every row shares once above the table), the whole config one click away."""
    frame = text_frame(name, frame)
    columns = shown_columns(name, frame)
    numeric = {c: pd.api.types.is_numeric_dtype(frame[c]) for c in columns}
    # Headers may break after an underscore or a space; a number never breaks.
    head = "".join(f"<th>{escape(header(c, unit)).replace('_', '_<wbr>')}</th>" for c in columns)
    short, common = workload_config_labels(frame) if "config" in frame else (None, {})
    above = "".join(f'<p class="same">{escape(line)}</p>' for line in shared_config_lines(common))
    # Long text (a config, flags, a reason) wraps within 20em; names and numbers do not.
    long = {c for c in columns if not numeric[c] and max(len(format_value(c, v)) for v in frame[c]) > 16}
    body = []
    for i, row in enumerate(frame[columns].itertuples(index=False)):
        cells = []
        for c, v in zip(columns, row, strict=True):
            text = format_value(c, v)
            cls = ' class="num"' if numeric[c] else ' class="txt"' if c in long else ""
            cls = f' class="{escape(text)}"' if c == "verdict" else cls
            if c == "config" and short is not None and short[i] != text:
                summary = escape(short[i] or "(the same)")
                cells.append(
                    f'<td class="txt"><div><details><summary title="{escape(text)}">{summary}</summary>'
                    f"{escape(text)}</details></div></td>"
                )
                continue
            content = escape(text).replace(",", ",<wbr>")
            cells.append(f"<td{cls}><div>{content}</div></td>" if c in long else f"<td{cls}>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"{above}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


#: Verdicts of rows that have an overhead to draw.
COMPARED = ("slower", "faster", "no difference")


def _overhead_rows(group: pd.DataFrame) -> tuple[list[tuple[str, pd.Series]], list[tuple[str, str]]]:
    """A workload's rows as the overhead plot shows them: (label, row) of the compared layers, and (label,
    why not) of the others (refused, emulated, no baseline ...). The baseline is the zero line, not a row."""
    labels, _ = workload_config_labels(group)
    compared, apart = [], []
    for label, (_, row) in zip(labels, group.iterrows(), strict=True):
        name = f"{row['layer']}  {label}".strip()
        if row["verdict"] in COMPARED and not math.isnan(row["overhead_pct"]):
            compared.append((name, row))
        elif row["verdict"] != "baseline":
            flags = f" ({row['flags']})" if row["flags"] else ""
            apart.append((name, f"{row['verdict']}{flags}"))
    return compared, apart


def _draw_overhead(ax: plt.Axes, report: Report, workload: str, group: pd.DataFrame) -> None:
    """One workload's overhead plot on ``ax``: each compared layer's overhead with its 95% interval, the zero
    line (the baseline), the campaign's band; rows not compared listed apart below a dashed line, no point."""
    compared, apart = _overhead_rows(group)
    colors = _colors(list(dict.fromkeys(group["layer"])))
    if report.band_pct:
        ax.axvspan(-report.band_pct, report.band_pct, color="#c8e6c9", alpha=0.6, zorder=0,
                   label=f"±{report.band_pct:g}% (the campaign's ci_pct target)")  # fmt: skip
    ax.axvline(0, color="#333333", linewidth=1, label=f"{report.baseline} (baseline) = 0")
    for y, (_, row) in enumerate(compared):
        low, high = row["overhead_pct"] - row["ci_low_pct"], row["ci_high_pct"] - row["overhead_pct"]
        ax.errorbar(row["overhead_pct"], y, xerr=[[max(low, 0)], [max(high, 0)]], fmt="o", capsize=4,
                    color=colors[row["layer"]])  # fmt: skip
    if apart:
        ax.axhline(len(compared) - 0.5, color="#999999", linestyle="--", linewidth=0.8)
    for y, (_, why) in enumerate(apart, start=len(compared)):
        ax.text(0.02, y, f"not compared: {why}", transform=ax.get_yaxis_transform(), va="center", fontsize=8,
                color="#b71c1c")  # fmt: skip
    names = [n for n, _ in compared + apart]  # wrapped, never cut: two rows never read the same
    ax.set_yticks(range(len(names)), [textwrap.fill(n, 34) for n in names], fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel(f"overhead against {report.baseline} (%), > 0 is worse; bars: 95% CI")
    ax.set_title(f"{workload}: {report.metric} overhead per layer", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")


def _overhead_figure(report: Report, workloads: list[tuple[str, pd.DataFrame]]) -> plt.Figure:
    heights = [len(g) for _, g in workloads]
    fig, axes = plt.subplots(len(workloads), 1, figsize=(8.0, 0.45 * sum(heights) + 1.6 * len(workloads)),
                             gridspec_kw={"height_ratios": [h + 2 for h in heights]}, squeeze=False)  # fmt: skip
    for ax, (workload, group) in zip(axes[:, 0], workloads, strict=True):
        _draw_overhead(ax, report, workload, group)
    fig.tight_layout()
    return fig


def _plotted(report: Report) -> list[tuple[str, pd.DataFrame]]:
    """The overhead view per workload, without its baseline rows, at most :data:`MAX_GROUPS` rows each."""
    frame = report.views.get("overhead", pd.DataFrame())
    if frame.empty:
        return []
    return [
        (str(w), g[g["verdict"] != "baseline"].head(MAX_GROUPS))
        for w, g in frame.groupby("workload", sort=True)
        if (g["verdict"] != "baseline").any()
    ]


def overhead_plots(report: Report) -> list[tuple[str, str]]:
    """Per workload: each layer's overhead against the baseline with its 95% CI (the page's question)."""
    caption = (
        f"{{}}: each layer's overhead against {report.baseline} with its 95% interval; the line at 0 is "
        f"{report.baseline}; rows below the dashed line are not compared (the table says why)"
    )
    return [(caption.format(w), _svg(_overhead_figure(report, [(w, g)]))) for w, g in _plotted(report)]


def overhead_figure(report: Report, fmt: str) -> str | bytes:
    """Every workload's overhead plot in one picture, as SVG text or PNG bytes (``report --format svg|png``)."""
    workloads = _plotted(report)
    if not workloads:
        raise DlinfraError(f"campaign {report.campaign_id} has no layer to compare with {report.baseline}",
                           "run another layer, or choose --baseline")  # fmt: skip
    fig = _overhead_figure(report, workloads)
    if fmt == "svg":
        return _svg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(report.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(report.title)}</h1><p>{escape(report.subtitle)}</p>",
    ]
    if report.warnings:
        items = "".join(
            f"<li><b>{escape(w.code)}</b>: {escape(w.where + ': ') if w.where else ''}{escape(w.message)}</li>"
            for w in report.warnings
        )
        parts.append(
            f'<div class="warnings" id="warnings"><h2>Warnings ({len(report.warnings)})</h2><ul>{items}</ul></div>'
        )
    else:
        parts.append('<div class="ok" id="warnings">No warnings.</div>')
    plots = {
        "overhead": overhead_plots(report) + throughput_plots(report),
        "scaling": scaling_plots(report),
        "step_times": step_time_plots(report),
        "compare": compare_plots(report),
        "series": series_plots(report),
    }
    for name in VIEW_TITLES:
        if name not in report.views:
            continue
        frame = report.views[name]
        parts.append(f'<h2 id="{name}">{escape(VIEW_TITLES[name])}</h2>')
        if frame.empty:
            parts.append(f"<p><i>{escape(EMPTY.get(name, 'no data'))}</i></p>")
        else:
            parts.append(_table(name, frame, report.unit))
        for caption, svg in plots.get(name, []):
            parts.append(f'<figure class="plot">{svg}<figcaption>{escape(caption)}</figcaption></figure>')
    if report.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in report.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
