"""Warnings and refusals: never silent, in every format."""

from __future__ import annotations

import json
import math

import pytest
from report.resultsets import draws

from dlinfra.report.build import build_report
from dlinfra.report.render import render


def _codes(report, layer):
    row = report.views["overhead"].set_index("layer").loc[layer]
    return row, set(filter(None, row["flags"].split(",")))


def test_differing_payload_hashes_refuse_the_comparison(campaign, store):
    c = campaign("payload")
    c.add("bm", draws(1000, 1, 5, seed=1))
    c.add("vm", draws(900, 1, 5, seed=2), payload_hash="sha256:payload-b")
    report = build_report(store, "payload")
    row, codes = _codes(report, "vm")
    assert row["verdict"] == "refused"
    assert math.isnan(row["overhead_pct"]) and math.isnan(row["ci_low_pct"])
    assert "payload-mismatch" in codes
    assert any(w.code == "payload-mismatch" and w.layer == "vm" for w in report.warnings)


def test_emulated_guest_against_real_host_is_refused(campaign, store):
    c = campaign("emu")
    c.add("bm", draws(1000, 1, 5, seed=1))
    c.add("vm", draws(60, 1, 5, seed=2), emulated=True, cpu_model="QEMU TCG CPU")
    report = build_report(store, "emu")
    row, codes = _codes(report, "vm")
    assert row["verdict"] == "refused"
    assert {"emulated", "emulated-mismatch"} <= codes
    # Two emulated layers against each other are comparable (with the emulated warning kept).
    c.add("ctr-vm", draws(57, 1, 5, seed=3), emulated=True, cpu_model="QEMU TCG CPU")
    report = build_report(store, "emu", baseline="vm")
    row, codes = _codes(report, "ctr-vm")
    assert row["verdict"] == "slower" and "emulated" in codes and "emulated-mismatch" not in codes


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"values": draws(900, 1, 2, seed=2)}, "few-repeats"),
        ({"values": draws(900, 12, 8, seed=2)}, "high-cv"),
        ({"values": draws(900, 1, 4, seed=2), "failed": 2}, "failed-cells"),
        ({"values": draws(900, 1, 4, seed=2), "cpu_model": "AMD EPYC Test"}, "cpu-model-differs"),
        ({"values": draws(900, 1, 4, seed=2), "python_version": "3.11.2"}, "runtime-differs"),
    ],
)
def test_quality_warnings(campaign, store, kwargs, code):
    c = campaign("quality")
    c.add("bm", draws(1000, 1, 6, seed=1))
    values = kwargs.pop("values")
    c.add("vm", values, **kwargs)
    report = build_report(store, "quality")
    row, codes = _codes(report, "vm")
    assert code in codes
    assert any(w.code == code for w in report.warnings)
    if code == "failed-cells":
        assert (row["runs"], row["failed"]) == (4, 2)
        assert "worker 1 unreachable" in next(w.message for w in report.warnings if w.code == code)


def test_layer_without_baseline_config_is_flagged(campaign, store):
    c = campaign("nobase")
    c.add("bm", draws(1000, 1, 4, seed=1), extra={"batch_size": 32})
    c.add("vm", draws(900, 1, 4, seed=2), extra={"batch_size": 128})
    report = build_report(store, "nobase")
    row, codes = _codes(report, "vm")
    assert row["verdict"] == "no baseline" and "no-baseline" in codes


def test_every_format_shows_every_warning(campaign, store):
    c = campaign("all-warnings")
    c.add("bm", draws(1000, 1, 4, seed=1))
    c.add("vm", draws(900, 12, 2, seed=2), failed=1, payload_hash="sha256:other")
    c.add("ctr", draws(60, 1, 3, seed=3), emulated=True)
    report = build_report(store, "all-warnings")
    codes = {w.code for w in report.warnings}
    assert {"payload-mismatch", "few-repeats", "high-cv", "failed-cells", "emulated", "emulated-mismatch"} <= codes
    for fmt in ("table", "markdown", "csv", "html"):
        text = " ".join(render(report, fmt).split())  # a terminal table wraps long warnings at spaces
        for w in report.warnings:
            assert w.code in text, (fmt, w.code)
            assert " ".join(w.message.split(":")[0].split()) in text, (fmt, w.message)
    csv_text = render(report, "csv")
    assert sum(line.startswith("# warning: ") for line in csv_text.splitlines()) == len(report.warnings)
    data = json.loads(render(report, "json"))
    assert [w["code"] for w in data["warnings"]] == [w.code for w in report.warnings]
