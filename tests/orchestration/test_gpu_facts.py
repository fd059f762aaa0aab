"""The testbed's GPU facts (playbooks/library/dlinfra_target_facts.py): NVML first, nvidia-smi second.

No GPU runs where these tests run, so each says which stand-in answers in its place: the stand-in ``pynvml``
(tests/gpu_standins/pynvml.py: two H100s' typical values) or an ``nvidia-smi`` stand-in script printing the CSV
and banner in the real tool's format for the same host (tests/gpu_standins/smi.py). The module runs as Ansible runs
it on a target: a process of its own, its arguments as JSON, its facts as JSON on stdout.
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

MODULE = REPO / "playbooks" / "library" / "dlinfra_target_facts.py"
STANDINS = REPO / "tests" / "gpu_standins"
#: What both readers must say of the stand-in boards (the second one was under load: facts do not move).
H100 = {
    "model": "NVIDIA H100 80GB HBM3",
    "driver": "550.54.15",
    "cuda": "12.4",
    "memory_mb": 81559,
    "pcie_gen": 5,
    "pcie_width": 16,
    "sm_clock_max_mhz": 1980,
    "mem_clock_max_mhz": 2619,
}


def _facts(tmp_path: Path, *, smi_csv: str | None, nvml: str | None) -> list[dict]:
    """Run the module with (or without) the stand-in nvidia-smi on PATH and the stand-in pynvml importable."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if smi_csv:
        smi.install(bin_dir, smi_csv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = str(bin_dir)  # the module runs no other program: a real nvidia-smi must not answer
    if nvml:
        env.update(PYTHONPATH=str(STANDINS), DLINFRA_STANDIN_NVML=nvml)
    args = json.dumps({"ANSIBLE_MODULE_ARGS": {"flags": ["avx2"]}})
    proc = subprocess.run(
        [sys.executable, str(MODULE), args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    facts = json.loads(proc.stdout)
    assert facts["kernel"] == os.uname().release  # the rest of the module is untouched by the GPU part
    return facts["gpus"]


def test_nvidia_smi_stand_in_gives_each_gpus_facts(tmp_path: Path) -> None:
    """nvidia-smi stand-in script (no GPU here) printing its CSV and banner; no pynvml importable."""
    gpus = _facts(tmp_path, smi_csv="nvidia-smi-query-gpu.csv", nvml=None)
    assert [g["index"] for g in gpus] == [0, 1]
    assert all({k: g[k] for k in H100} == H100 and g["source"] == "nvidia-smi" for g in gpus)


def test_nvml_stand_in_is_asked_first_and_agrees_with_nvidia_smi(tmp_path: Path) -> None:
    """Stand-in pynvml (no GPU here), with the nvidia-smi stand-in also on PATH: NVML answers, and its facts
    are nvidia-smi's, field for field."""
    by_nvml = _facts(tmp_path, smi_csv="nvidia-smi-query-gpu.csv", nvml="h100x2")
    by_smi = _facts(tmp_path, smi_csv="nvidia-smi-query-gpu.csv", nvml=None)
    assert [g["source"] for g in by_nvml] == ["nvml", "nvml"]
    assert [{**g, "source": ""} for g in by_nvml] == [{**g, "source": ""} for g in by_smi]


def test_nvml_without_a_driver_falls_back_to_nvidia_smi_and_neither_gives_none(tmp_path: Path) -> None:
    """Stand-in pynvml failing as without the kernel module, and the nvidia-smi stand-in (no GPU here)."""
    gpus = _facts(tmp_path, smi_csv="nvidia-smi-query-gpu.csv", nvml="no-driver")
    assert [g["source"] for g in gpus] == ["nvidia-smi", "nvidia-smi"]
    assert _facts(tmp_path / "none", smi_csv=None, nvml=None) == []
    assert _facts(tmp_path / "nvml-only", smi_csv=None, nvml="h100x2")[1]["model"] == H100["model"]


@pytest.fixture
def facts_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("dlinfra_target_facts", MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-smi only
    return module


def _run(argv: list[str]) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout, proc.stderr


def test_values_nvidia_smi_cannot_give_are_null(facts_module: ModuleType, tmp_path: Path, monkeypatch) -> None:
    """nvidia-smi stand-in (no GPU here) printing a vGPU's CSV, where PCIe and clocks read [N/A]."""
    smi.install(tmp_path, "nvidia-smi-query-gpu-vgpu.csv")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), os.environ["PATH"]]))
    (gpu,) = facts_module.gpu_facts(_run)
    assert (gpu["model"], gpu["driver"], gpu["memory_mb"]) == ("GRID A100-40C", "535.161.08", 40960)
    assert gpu["pcie_gen"] is gpu["pcie_width"] is gpu["sm_clock_max_mhz"] is None
    assert gpu["cuda"] == "12.4"  # the stand-in's banner is the H100 host's


def test_a_failing_nvidia_smi_gives_no_gpus(facts_module: ModuleType, tmp_path: Path, monkeypatch) -> None:
    """nvidia-smi stand-in (no GPU here) on PATH, but the query fails, as with no driver loaded."""
    smi.install(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path), os.environ["PATH"]]))
    assert facts_module.gpus_smi(lambda argv: (9, "NVIDIA-SMI has failed", "")) == []
    assert facts_module.gpus_smi(_run)[0]["source"] == "nvidia-smi"
