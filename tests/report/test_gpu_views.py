"""GPU samples in the report (system view, ``--view series``) and GPU facts in ``compare``.

No GPU runs where these tests run: the records carry readings shaped as the payload writes them through NVML
(:class:`GpuSample`, as ``tests/gpu_standins/pynvml.py`` gives them for two H100s), added to the generated
result sets as they are stored.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from report.resultsets import draws

from dlinfra.record import GpuSample
from dlinfra.report.build import build_report
from dlinfra.report.compare import build_compare
from dlinfra.report.render import render
from dlinfra.results.store import ResultsStore


def _readings(t: float) -> list[GpuSample]:
    """Two GPUs at second ``t``: the first idle, the second loaded and filling its memory."""
    return [
        GpuSample(0, "GPU-aaaa", 0.0, 500_000_000, 70.0, 345, 2619),
        GpuSample(1, "GPU-bbbb", 97.0, int(10e9 + 1e9 * t), 600.0 + t, 1980, 2619),
    ]


@pytest.fixture
def gpu_store(store: ResultsStore, monkeypatch: pytest.MonkeyPatch) -> ResultsStore:
    """The store, with each record's system samples given both GPUs' readings before it is stored."""
    real = store.store_cell

    def store_cell(outcome: Any, records: list[Any]) -> Any:
        for record in records:
            for sample in record.metrics.system:
                sample.gpus = _readings(sample.elapsed_s)
            record.metrics.gpu_sampling = "nvml: 2 GPU(s): NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3"
        return real(outcome, records)

    monkeypatch.setattr(store, "store_cell", store_cell)
    return store


def test_the_system_view_shows_gpu_peaks(gpu_store: ResultsStore, campaign) -> None:
    """Per role: the GPUs seen and the peak of any one GPU (utilisation, memory used, power)."""
    campaign("g").add("bm", draws(1000, 2, 3, seed=1))
    report = build_report(gpu_store, "g")
    system = report.views["system"].iloc[0]
    assert system["gpus"] == 2 and system["max_gpu_util_pct"] == 97.0
    assert math.isclose(system["max_gpu_mem_mb"], 15e3) and math.isclose(system["max_gpu_power_w"], 605.0)
    assert "max_gpu_util_pct" in render(report, "table")


def test_a_campaign_without_gpu_samples_keeps_its_system_view(store, campaign) -> None:
    campaign("cpu").add("bm", draws(1000, 2, 3, seed=1))
    system = build_report(store, "cpu").views["system"]
    assert not any(c.startswith(("gpus", "max_gpu")) for c in system.columns)
    series = build_report(store, "cpu", series=True).views["series"]
    assert "gpu_util_pct" not in series


def test_the_series_counts_each_gpu_once_per_node(gpu_store: ResultsStore, campaign) -> None:
    """Four processes of one host each read the same two GPUs: the node's series has two GPUs, their memory
    and power summed once, utilisation and clocks averaged over them."""
    campaign("gs").add("bm", [12.0] * 2, workload="logreg", metric="elapsed", mode="ps-async", workers=2, ps=1)
    report = build_report(gpu_store, "gs", metric="elapsed", series=True)
    series = report.views["series"]
    last = series[(series["repeat"] == 0) & (series["t_s"] == 5)].iloc[0]
    assert last["processes"] == 4 and last["gpus"] == 2
    assert math.isclose(last["gpu_util_pct"], 48.5) and math.isclose(last["gpu_mem_mb"], 500 + 15e3)
    assert math.isclose(last["gpu_power_w"], 70 + 605) and math.isclose(last["gpu_sm_mhz"], (345 + 1980) / 2)
    csv = render(report, "csv", view="series")
    header = next(line for line in csv.splitlines() if not line.startswith("#"))
    assert header.endswith(",gpus,gpu_util_pct,gpu_mem_mb,gpu_power_w,gpu_sm_mhz,gpu_mem_mhz")
    assert "max_gpu_util_pct" in render(report, "table")  # the compacted series: a sparkline and its peak
    assert "GPU % (mean of GPUs)" in render(report, "html")


def _targets(driver: str) -> list[dict[str, Any]]:
    gpus = [
        {"index": i, "model": "NVIDIA H100 80GB HBM3", "driver": driver, "cuda": "12.4", "pcie_gen": 5}
        for i in range(2)
    ]
    return [
        {
            "layer": "bm",
            "target": "bm-0",
            "provider": "ssh",
            "physical_host": "host1",
            "target_address": "10.0.0.1",
            "metadata": {"kernel": "6.8.0", "gpus": gpus},
        }
    ]


def test_compare_names_the_gpu_fact_that_changed(store, campaign) -> None:
    """GPU facts as the facts module gives them (a list of mappings): a driver change is one field per GPU."""
    campaign("a").add("bm", draws(1000, 2, 4, seed=1))
    campaign("b").add("bm", draws(1000, 2, 4, seed=1))
    store.store_targets("a", _targets("550.54.15"))
    store.store_targets("b", _targets("560.35.03"))
    meta = build_compare(store, "a", "b").views["metadata"]
    assert list(meta["field"]) == ["testbed.gpus[0].driver", "testbed.gpus[1].driver"]
    assert set(meta["a"]) == {"550.54.15"} and set(meta["b"]) == {"560.35.03"}
