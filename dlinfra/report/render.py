"""Render a Report as a terminal table (rich), Markdown, CSV or JSON.

One number formatter serves the table and Markdown, so they show the same
digits; CSV and JSON carry full precision. Warnings are in every format:
after the tables in text formats, a top-level ``warnings`` list in JSON, and
``# warning:`` comment lines before the CSV header (read it back with
``pandas.read_csv(path, comment="#")``) plus a ``flags`` column per row.
"""

from __future__ import annotations

import functools
import io
import json
import math
import textwrap
from typing import Any

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dlinfra.errors import DlinfraError
from dlinfra.report.display import EMPTY, format_value, header, shown_columns, terminal_frame, text_frame
from dlinfra.report.model import VIEW_TITLES, Report
from dlinfra.report.warnings import ReportWarning

JSON_SCHEMA = 1
FORMATS = ("table", "markdown", "csv", "json", "html")


def _views(report: Report) -> list[tuple[str, pd.DataFrame]]:
    return [(name, report.views[name]) for name in VIEW_TITLES if name in report.views]


#: The width a terminal table fits when the output is not a terminal (a file, a pipe): a 100-column terminal.
DEFAULT_WIDTH = 100


def render_table(report: Report, width: int | None = None, wide: bool = False, full_config: bool = False) -> str:
    """Rich tables as plain text (no colour codes: they go to files and pipes too), each within ``width``
    columns unless ``wide``: what the rows share said once above, the columns that do not fit named below."""
    width = width or DEFAULT_WIDTH
    console = Console(
        file=io.StringIO(), width=10_000 if wide else width, record=True, color_system=None, soft_wrap=wide
    )
    console.print(report.title, markup=False)
    console.print(report.subtitle, markup=False)
    for name, frame in _views(report):
        if frame.empty:
            if name in EMPTY:
                console.print(f"\n{VIEW_TITLES[name]}: {EMPTY[name]}", markup=False)
            continue
        console.print()
        console.print(_table(name, frame, report.unit, width, wide, full_config))
    # Notes and warnings wrap at spaces under their first word, so each still reads as one item.
    fill = functools.partial(textwrap.fill, width=10_000 if wide else width, break_long_words=False)
    for note in report.notes:
        console.print(fill(f"note: {note}", subsequent_indent="      "), markup=False, highlight=False)
    console.print(f"\nWarnings ({len(report.warnings)}):" if report.warnings else "\nWarnings: none", markup=False)
    for w in report.warnings:
        console.print(fill(f"  ! {w.line()}", subsequent_indent="    "), markup=False, highlight=False)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def _table(name: str, frame: pd.DataFrame, unit: str, width: int, wide: bool, full_config: bool) -> Group:
    """One view as a Rich table within ``width``: numbers right-aligned, units in the headers, text wrapped
    (never cut), what every row shares above it, the columns left out named below."""
    shown, above, left_out = terminal_frame(name, frame, width, wide=wide, full_config=full_config)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False)
    for column in shown.columns:
        numeric = pd.api.types.is_numeric_dtype(shown[column])
        # Only long text (a config, flags, a reason) wraps; names and numbers never break.
        longest = max((len(format_value(column, v)) for v in shown[column]), default=0)
        table.add_column(
            header(column, unit, sep="\n"),
            justify="right" if numeric else "left",
            overflow="fold",
            no_wrap=numeric or (column != "config" and longest <= 16),
        )
    for row in shown.itertuples(index=False):
        # Text, not str: a stored name is data, never Rich markup.
        table.add_row(*(Text(format_value(c, v)) for c, v in zip(shown.columns, row, strict=True)))
    parts: list[Any] = [Text(VIEW_TITLES[name])] + [Text(f"  {line}") for line in above] + [table]
    if left_out:
        parts.append(Text(f"  --wide adds: {', '.join(left_out)}"))
    if "config" in shown and not full_config and not wide:
        parts.append(Text("  config: what tells a workload's configs apart (--full-config: all of it)"))
    return Group(*parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    out = [f"# {report.title}", "", report.subtitle, ""]
    if report.warnings:
        out += [f"## Warnings ({len(report.warnings)})", ""]
        out += [
            f"- **{w.code}**: {_md_cell(w.where) + ': ' if w.where else ''}{_md_cell(w.message)}"
            for w in report.warnings
        ]
        out.append("")
    for name, frame in _views(report):
        frame = text_frame(name, frame)
        out += [f"## {VIEW_TITLES[name]}", ""]
        if frame.empty:
            out += [f"_{EMPTY.get(name, 'no data')}_", ""]
            continue
        columns = shown_columns(name, frame)
        numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in columns]
        out.append("| " + " | ".join(columns) + " |")
        out.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
        for row in frame[columns].itertuples(index=False):
            out.append(
                "| " + " | ".join(_md_cell(format_value(c, v)) for c, v in zip(columns, row, strict=True)) + " |"
            )
        out.append("")
    if report.notes:
        out += ["## Notes", ""] + [f"- {_md_cell(n)}" for n in report.notes] + [""]
    return "\n".join(out)


def render_csv(report: Report, view: str = "overhead") -> str:
    """One view as CSV, full precision, with the report's warnings as leading ``#`` lines."""
    frame = report.views.get(view)
    if frame is None:
        raise DlinfraError(f"this report has no view {view!r}", f"use one of {', '.join(report.views)}")
    lines = [f"# {report.title}", f"# {report.subtitle}", f"# view: {view} ({VIEW_TITLES[view]})"]
    lines += [f"# warning: {w.line()}" for w in report.warnings]
    lines += [f"# note: {n}" for n in report.notes]
    body = frame.to_csv(index=False, lineterminator="\n")
    return "\n".join(line.replace("\n", " ") for line in lines) + "\n" + body


def _jsonable(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return None if math.isnan(value) else float(value)
    return value


def render_json(report: Report) -> str:
    data = {
        "schema": JSON_SCHEMA,
        "campaign_id": report.campaign_id,
        "campaign_name": report.campaign_name,
        "baseline": report.baseline,
        "metric": report.metric,
        "unit": report.unit,
        "higher_is_better": report.higher_is_better,
        "seed": report.seed,
        "statistic": report.statistic,
        **report.extra,
        "notes": report.notes,
        "warnings": [w.to_dict() for w in report.warnings],
        "views": {
            name: {
                "title": VIEW_TITLES[name],
                "columns": list(frame.columns),
                "rows": [[_jsonable(v) for v in row] for row in frame.itertuples(index=False)],
            }
            for name, frame in _views(report)
        },
    }
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def report_from_json(text: str) -> Report:
    """Read back what :func:`render_json` wrote (step samples are not part of JSON)."""
    data = json.loads(text)
    views = {}
    for name, view in data["views"].items():
        frame = pd.DataFrame(view["rows"], columns=view["columns"])
        for column in frame.columns:  # JSON null in a number column is NaN again
            if (
                frame[column].map(lambda v: v is None or isinstance(v, (int, float))).all()
                and frame[column].notna().any()
            ):
                frame[column] = frame[column].astype(float) if frame[column].isna().any() else frame[column]
        views[name] = frame
    return Report(
        campaign_id=data["campaign_id"],
        campaign_name=data["campaign_name"],
        baseline=data["baseline"],
        metric=data["metric"],
        unit=data["unit"],
        higher_is_better=data["higher_is_better"],
        seed=data["seed"],
        statistic=data.get("statistic", "mean"),
        views=views,
        warnings=[ReportWarning(**w) for w in data["warnings"]],
        notes=list(data["notes"]),
    )


def render(
    report: Report,
    fmt: str,
    width: int | None = None,
    view: str = "overhead",
    wide: bool = False,
    full_config: bool = False,
) -> str:
    """The report as text in ``fmt``; ``wide`` and ``full_config`` lay out the terminal table."""
    if fmt == "table":
        return render_table(report, width, wide=wide, full_config=full_config)
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "csv":
        return render_csv(report, view)
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        from dlinfra.report.html import render_html  # late: matplotlib loads only for HTML

        return render_html(report)
    raise DlinfraError(f"unknown report format {fmt!r}", f"use one of {', '.join(FORMATS)}")
