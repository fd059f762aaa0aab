"""What a person reads: labels that tell configs apart, terminal tables within 100 columns, the overhead plot."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pytest
from report.resultsets import demo_like
from support import run_cli

from dlinfra.cli.report_cmd import _write_plot
from dlinfra.errors import DlinfraError
from dlinfra.report.build import build_report
from dlinfra.report.display import config_pairs, split_configs, terminal_frame
from dlinfra.report.html import _overhead_figure, _plotted, overhead_figure
from dlinfra.report.render import render

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_labels_keep_what_differs_whole_and_the_rest_once():
    configs = [
        'batch_size=64 data=generated:img dataset={"kind": "jpeg", "n": 10} mode=single',
        'batch_size=64 data=generated:img dataset={"kind": "jpeg", "n": 20} mode=single',
        "batch_size=64 mode=ps-async ps=1 workers=2",
    ]
    labels, common = split_configs(configs)
    assert labels == [
        'data=generated:img dataset={"kind": "jpeg", "n": 10} mode=single',
        'data=generated:img dataset={"kind": "jpeg", "n": 20} mode=single',
        "mode=ps-async ps=1 workers=2",
    ]
    assert common == "batch_size=64"
    assert config_pairs(configs[0])["dataset"] == '{"kind": "jpeg", "n": 10}'


def test_every_terminal_table_fits_100_columns_and_tells_configs_apart(store, db_path):
    """The demo's shape (bm, ctr, vm, ctr-vm; mnist-dnn and sysbench-cpu with several parameters; refused
    emulated guests) as a user prints it in a 100-column terminal."""
    demo_like(store)
    result = run_cli("--db", str(db_path), "report", env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    text = ANSI.sub("", result.stdout)
    long = [line for line in text.splitlines() if len(line) > 100]
    assert not long, "\n".join(long)
    assert "mnist-dnn, every row: data=synthetic steps=3000" in text  # said once, above the table
    assert "--wide adds:" in text
    frame = build_report(store, "c-demo").views["overhead"]
    shown, _, _ = terminal_frame("overhead", frame, 100)
    keys = list(zip(shown["workload"], shown["config"], shown["layer"], strict=True))
    assert len(set(keys)) == len(keys) == len(frame)  # no two rows read the same
    assert set(shown.loc[shown["workload"] == "sysbench-cpu", "config"]) == {"threads=1", "threads=2"}
    wide = render(build_report(store, "c-demo"), "table", wide=True, full_config=True)
    assert "detectable" in wide and "--wide adds" not in wide
    assert "batch_size=64 data=synthetic mode=single threads=2 time=2" in wide


def test_overhead_plot_shows_each_layer_against_the_baseline(store, db_path, tmp_path):
    """Each compared layer is a point with its 95% interval; the baseline is the zero line; the emulated guests'
    refused rows are listed apart with no point; the campaign's band is shaded."""
    demo_like(store)
    report = build_report(store, "c-demo")
    report.band_pct = 5.0
    workloads = dict(_plotted(report))
    fig = _overhead_figure(report, [("sysbench-cpu", workloads["sysbench-cpu"])])
    ax = fig.axes[0]
    frame = workloads["sysbench-cpu"]
    ctr = frame[frame["layer"] == "ctr"]
    points = sorted(float(c.lines[0].get_xdata()[0]) for c in ax.containers)
    assert points == sorted(ctr["overhead_pct"])  # ctr only: vm and ctr-vm are emulated, refused
    assert sum(t.get_text().startswith("not compared: refused") for t in ax.texts) == 4
    assert any(list(line.get_xdata()) == [0, 0] for line in ax.lines)  # the baseline
    band = ax.patches[0].get_extents()  # the axvspan, in display units
    assert band.width > 0 and "±5%" in ax.get_legend().get_texts()[0].get_text()
    plt.close(fig)
    assert overhead_figure(report, "svg").startswith("<svg")
    out = tmp_path / "overhead.png"
    result = run_cli("--db", str(db_path), "report", "--format", "png", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(DlinfraError, match="binary"):
        _write_plot(report, "png", None)  # not into a terminal
