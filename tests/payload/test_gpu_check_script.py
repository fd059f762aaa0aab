"""scripts/gpu-check.py, the check to run on a real GPU host, exercised here without one.

No GPU runs where these tests run: its comparisons are fed the stand-in ``pynvml`` and the ``nvidia-smi``
stand-in script (tests/gpu_standins/), and its end-to-end run is the one a host without a GPU library gets.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from gpu_standins import smi
from support import REPO

SCRIPT = REPO / "scripts" / "gpu-check.py"
STANDINS = REPO / "tests" / "gpu_standins"


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """The script as a module, with the stand-in pynvml and the nvidia-smi stand-in on PATH (no GPU here)."""
    spec = importlib.util.spec_from_file_location("pynvml", STANDINS / "pynvml.py")
    assert spec is not None and spec.loader is not None
    nvml = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nvml)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    smi.install(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), os.environ["PATH"]]))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the checkout first: undone after the test
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_library_it_prints_why_and_exits_2() -> None:
    """This host has neither CuPy nor PyTorch with a GPU (no GPU here): the summary says so, and the host's
    /dev/kvm, docker and podman are reported all the same."""
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, cwd=REPO)
    summary = json.loads(proc.stdout)
    if proc.returncode != 2:  # pragma: no cover - a GPU host: the real check ran
        assert proc.returncode in (0, 1) and "probe" in summary
        return
    assert summary["ok"] is False and "cupy" in summary["reason"] and "torch" in summary["reason"]
    assert set(summary["host"]) >= {"dev_kvm", "docker", "podman", "nvidia_smi"}


def test_the_facts_readers_agree_on_the_stand_in_host(check: ModuleType) -> None:
    """Stand-in pynvml and nvidia-smi stand-in (no GPU here), describing the same two H100s: they agree."""
    facts = check.compare_facts(check.facts_module())
    assert facts["agree"] and facts["differ"] == [] and len(facts["nvml"]) == 2


def test_live_readings_are_compared_at_the_nearest_moment(check: ModuleType) -> None:
    """The sampler's readings against nvidia-smi's (as its --query-gpu prints them, memory in MiB)."""
    ours = [
        {
            "t": t,
            "index": 0,
            "uuid": "GPU-a",
            "util_percent": 96.0,
            "memory_used_bytes": 20000 * 2**20,
            "power_w": 600.0,
            "sm_clock_mhz": 1980,
        }
        for t in (0.0, 1.0, 2.0)
    ]
    theirs = [
        {
            "t": 1.2,
            "uuid": "GPU-a",
            "util_percent": 97.0,
            "memory_used_bytes": 19500.0,
            "power_w": 610.0,
            "sm_clock_mhz": 1980.0,
        }
    ]
    live = check.compare_live(ours, theirs)
    assert live["util_percent"] == {"worst_gap": 1.0, "tolerance": 15.0, "agree": True}
    assert live["memory_used_mib"]["worst_gap"] == 500.0 and live["memory_used_mib"]["agree"]
    assert live["busy_gpus_seen"] == [0]
    theirs[0]["power_w"] = 300.0
    assert not check.compare_live(ours, theirs)["power_w"]["agree"]
    assert not check.compare_live(ours, [])["util_percent"]["agree"]  # nothing compared is no agreement


def test_the_probe_is_set_against_the_links_nominal_rate(check: ModuleType, monkeypatch) -> None:
    """The probe's result as on a gen5 x16 H100 host (no GPU here: the probe itself is stubbed)."""
    monkeypatch.setattr(check.gpu, "probe", lambda: {"library": "torch 2.5.1", "h2d_gb_s": 54.0, "d2h_gb_s": 52.0})
    facts = [{"pcie_gen": 5, "pcie_width": 16}]
    live = [{"uuid": "GPU-a", "pcie_gen_now": 5.0, "pcie_width_now": 16.0}]
    result = check.bandwidth(facts, live)
    assert result["nominal_gb_s"] == 64.0 and result["h2d_of_nominal"] == round(54 / 64, 3)
    assert result["pcie"] == {"gen_max": 5, "width_max": 16, "gen_under_load": 5.0, "width_under_load": 16.0}
    assert check.bandwidth([{"pcie_gen": 4, "pcie_width": 8}], [])["nominal_gb_s"] == 16.0
