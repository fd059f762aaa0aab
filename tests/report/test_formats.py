"""The same report in every format: the numbers agree; JSON round-trips."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
from report.resultsets import draws, ten_percent_slower

from dlinfra.report.build import build_report
from dlinfra.report.display import COMPACT_OVERHEAD, compact_overhead, format_value, shown_columns, terminal_frame
from dlinfra.report.render import render, report_from_json


def _report(store, campaign):
    ten_percent_slower(store)
    c = campaign("mixed")
    c.add("bm", draws(1000, 1, 4, seed=1))
    c.add("vm", draws(880, 9, 2, seed=2), failed=1)
    for workers, rate in ((1, 100.0), (2, 185.0)):
        c.add("bm", draws(rate, 2, 3, seed=workers), mode="ps-async", workers=workers, ps=1)
        c.add("ctr", draws(rate * 0.97, 2, 3, seed=workers + 10), mode="ps-async", workers=workers, ps=1)
    return build_report(store, "mixed")


def _table_rows(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one rich table (box characters) in the plain-text output."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = lines.index(title)
    header, rows = None, []
    for line in lines[start + 1 :]:
        if line.startswith("┃") and header is None:
            header = [c.strip() for c in line.strip("┃").split("┃")]
        elif line.startswith("│"):
            rows.append([c.strip() for c in line.strip("│").split("│")])
        elif line.startswith("└"):
            break
    return header, rows


def _markdown_rows(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines()
    start = lines.index(f"## {title}")
    table = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return table[0], table[2:]


def _compact_rows(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The last header line and the rows of a terminal table (no vertical rules: cells are 2+ spaces apart;
    the header's units are on its last line, under the names)."""
    lines = [line.strip() for line in text.splitlines()]
    body = lines[lines.index(title) + 1 :]
    rule = next(i for i, line in enumerate(body) if line.startswith("───"))
    header, rows = re.split(r"\s{2,}", body[rule - 1]), []
    for line in body[rule + 1 :]:
        if not line or line.startswith("--wide") or line.startswith("config:"):
            break
        rows.append(re.split(r"\s{2,}", line))
    return header, rows


def test_table_markdown_and_csv_agree(store, campaign):
    """Markdown carries every column as CSV has it; the terminal's first table is those numbers, compacted to
    read in 100 columns (short configs, the overhead with its interval's half-width)."""
    report = _report(store, campaign)
    frame = report.views["overhead"]
    columns = shown_columns("overhead", frame)
    csv = pd.read_csv(io.StringIO(render(report, "csv")), comment="#", keep_default_na=False, na_values=[""])
    assert list(csv.columns) == list(frame.columns)
    expected = [
        [format_value(c, v) for c, v in zip(columns, row, strict=True)]
        for row in csv[columns].astype(object).where(csv[columns].notna(), None).itertuples(index=False)
    ]
    m_header, m_rows = _markdown_rows(render(report, "markdown"), "Overhead against the baseline")
    assert m_header == columns
    # CSV reads empty strings back as NaN: the renderers show '-' for both.
    normalise = [[("-" if v in ("", "nan") else v) for v in row] for row in expected]
    assert m_rows == normalise and len(m_rows) == len(frame) == 6
    text = render(report, "table", width=100)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    shown, _, _ = terminal_frame("overhead", frame, 100)
    assert list(shown.columns) == COMPACT_OVERHEAD
    body = text[text.index("Overhead against the baseline") :]
    for row in shown.itertuples(index=False):
        cells = [format_value(c, v) for c, v in zip(COMPACT_OVERHEAD, row, strict=True)]
        after_config = r"\s+".join(re.escape(c) for c in cells[2:])
        assert re.search(
            rf"^{re.escape(cells[0])}\s+{re.escape(cells[1].split()[0])}.*\s{after_config}$", body, re.M
        ), (
            cells,
            body,
        )
    compact = compact_overhead(frame)
    slower = compact[compact["layer"] == "vm"]["overhead % ± CI"].iloc[0]
    point, half = frame.loc[frame["layer"] == "vm", ["overhead_pct", "detectable_pct"]].iloc[0]
    assert slower == f"{point:+.1f} ± {half:.1f}"
    _, rows = _compact_rows(render(report, "table", width=400, full_config=True), "Overhead against the baseline")
    assert {row[1] for row in rows} == set(frame["config"])


def test_csv_keeps_full_precision_and_flags(store, campaign):
    report = _report(store, campaign)
    csv = pd.read_csv(io.StringIO(render(report, "csv")), comment="#")
    frame = report.views["overhead"]
    pd.testing.assert_series_equal(csv["median"], frame["median"], check_names=False)
    assert "few-repeats" in csv.loc[csv["layer"] == "vm", "flags"].iloc[0]


def test_json_round_trips(store, campaign):
    report = _report(store, campaign)
    text = render(report, "json")
    again = report_from_json(text)
    assert render(again, "json") == text
    assert again.warnings == report.warnings
    for name, frame in report.views.items():
        back = again.views[name]
        assert list(back.columns) == list(frame.columns)
        pd.testing.assert_frame_equal(
            back.reset_index(drop=True), frame.reset_index(drop=True), check_dtype=False, check_exact=True
        )
    data = json.loads(text)
    assert set(data) >= {"warnings", "views", "campaign_id", "metric", "baseline"}


def test_every_view_renders_in_markdown(store, campaign):
    report = _report(store, campaign)
    text = render(report, "markdown")
    for title in (
        "Overhead against the baseline",
        "Scaling against 1 worker",
        "System view per role",
        "Step-time distribution",
        "Best and worst total run times per layer",
    ):
        assert f"## {title}" in text
