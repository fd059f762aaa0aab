"""The payload's GPU paths (NVML samples, the host-device probe, ``gpu-probe``) without a GPU.

No GPU runs where these tests run (CI, a developer's laptop), so each one says which stand-in it uses instead:
``tests/gpu_standins/pynvml.py`` answers NVML's calls as nvidia-ml-py does on two H100s, and small stand-ins of
PyTorch and CuPy give the probe what their CUDA calls return. What they cannot show (the numbers a real GPU
gives) is ``scripts/gpu-check.py``'s job on a GPU host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from records import make_record
from support import REPO, need

from dlinfra.payload import gpu
from dlinfra.payload.measure import SystemSampler
from dlinfra.record import Metrics, RunRecord, SystemSample

STANDINS = REPO / "tests" / "gpu_standins"


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh stand-in ``pynvml`` in sys.modules (no GPU here: see the module's docstring)."""
    spec = importlib.util.spec_from_file_location("pynvml", STANDINS / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_the_sampler_reads_each_gpu_through_nvml(nvml: ModuleType) -> None:
    """Stand-in pynvml (no GPU here): one reading per board, in the units the record keeps, then NVML closed."""
    sampler = gpu.GpuSampler()
    assert sampler.active and sampler.note == "nvml: 2 GPU(s): NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3"
    idle, busy = sampler.read()
    assert (idle.index, idle.uuid) == (0, "GPU-5b3c1f0e-8a2d-4c71-9e3b-2f6a7d9c0e11")
    assert (busy.util_percent, busy.memory_used_bytes, busy.power_w) == (97.0, 20963131392, 612.345)
    assert (busy.sm_clock_mhz, busy.mem_clock_mhz, idle.sm_clock_mhz) == (1980, 2619, 345)
    sampler.close()
    assert nvml.calls == ["nvmlInit", "nvmlShutdown"] and sampler.read() == []
    sampler.close()  # twice is harmless


@pytest.mark.parametrize(
    ("scenario", "note"),
    [
        ("no-driver", "no GPU sampling: NVML did not start: Driver Not Loaded"),
        ("no-gpu", "no GPU sampling: NVML sees no GPU"),
    ],
)
def test_without_a_usable_gpu_the_note_says_why(nvml: ModuleType, scenario: str, note: str) -> None:
    """Stand-in pynvml (no GPU here), failing as the real one does without a driver or without a device."""
    nvml.SCENARIO = scenario
    sampler = gpu.GpuSampler()
    assert sampler.note == note and not sampler.active and sampler.read() == []
    assert nvml.calls[-1] == ("nvmlShutdown" if scenario == "no-gpu" else "nvmlInit")  # started: closed again


def test_a_reading_the_board_does_not_support_is_none(nvml: ModuleType) -> None:
    """Stand-in pynvml (no GPU here) on a board without power readings (NVML_ERROR_NOT_SUPPORTED)."""
    nvml.SCENARIO = "no-power"
    readings = gpu.GpuSampler().read()
    assert [r.power_w for r in readings] == [None, None] and readings[1].util_percent == 97.0


def test_without_pynvml_nothing_gpu_related_is_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as on a target without nvidia-ml-py
    sampler = SystemSampler(time.time())
    sample = sampler.sample()
    assert sample.gpus == [] and sampler.gpu_note.startswith("no GPU sampling: pynvml is not importable")
    assert "nvidia-ml-py" in sampler.gpu_note


def test_system_samples_carry_the_gpus_and_the_record_keeps_them(nvml: ModuleType) -> None:
    """Stand-in pynvml (no GPU here): the per-second system samples hold each GPU's reading, the sampler closes
    NVML when it stops, and the record round-trips through JSON."""
    sampler = SystemSampler(time.time(), interval=0.05).start()
    time.sleep(0.2)
    samples = sampler.stop()
    assert nvml.calls[-1] == "nvmlShutdown"
    assert samples and all([g.index for g in s.gpus] == [0, 1] for s in samples)
    record = _record(samples, sampler.gpu_note)
    again = RunRecord.from_json(record.to_json())
    assert again.metrics.system[0].gpus[1].power_w == 612.345
    assert again.metrics.gpu_sampling.startswith("nvml: 2 GPU(s)")


def test_a_record_written_before_gpu_sampling_is_still_read() -> None:
    """Old records have no ``gpus`` in their samples and no ``gpu_sampling``: added with defaults, they load."""
    data = _record([SystemSample(1.0, 50.0, 1 << 20, 0, 0, 0, 0)], "").to_dict()
    del data["metrics"]["gpu_sampling"]
    del data["metrics"]["system"][0]["gpus"]
    old = RunRecord.from_dict(data)
    assert old.metrics.system[0].gpus == [] and old.metrics.gpu_sampling == ""


def _record(samples: list[SystemSample], note: str) -> RunRecord:
    record = make_record()
    record.metrics = Metrics(system=samples, gpu_sampling=note)
    return record


# -- the probe -----------------------------------------------------------------------------------------------


class _Buffer:
    def __init__(self, size: int) -> None:
        self.nbytes, self.copies = size, 0


def _torch(available: bool = True) -> ModuleType:
    """A PyTorch stand-in (no GPU here): the calls the probe makes, with an H100's device properties."""
    torch = ModuleType("torch")
    torch.__version__ = "2.5.1+cu124"
    torch.uint8 = "uint8"
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=85017755648, major=9, minor=0)
    syncs: list[int] = []
    torch.created = []
    torch.cuda = SimpleNamespace(
        is_available=lambda: available,
        get_device_properties=lambda index: props,
        device_count=lambda: 1,
        synchronize=lambda: syncs.append(1),
        syncs=syncs,
    )

    def empty(size: int, dtype: Any, pin_memory: bool = False, device: str = "cpu") -> Any:
        tensor = _Buffer(size)
        tensor.copy_ = lambda other, non_blocking=False: setattr(tensor, "copies", tensor.copies + 1)
        torch.created.append(device if device == "cuda" else ("pinned" if pin_memory else "pageable"))
        return tensor

    torch.empty = empty
    return torch


def test_the_probe_measures_both_directions_through_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch stand-in (no GPU here): pinned host buffer, one warm-up and ``repeats`` timed copies each way,
    each followed by a synchronize; the identity is the device's."""
    torch = _torch()
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "torch", torch)
    result = gpu.probe(size=1 << 20, repeats=3)
    assert result["library"] == "torch 2.5.1+cu124" and result["bytes"] == 1 << 20
    assert result["device"] == {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_bytes": 85017755648,
        "compute_capability": "9.0",
        "visible_devices": 1,
    }
    assert result["h2d_gb_s"] >= result["h2d_gb_s_median"] > 0 and result["d2h_gb_s"] > 0
    assert len(torch.cuda.syncs) == 2 * (1 + 3) and sorted(torch.created) == ["cuda", "pinned"]


def test_the_probe_prefers_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy stand-in (no GPU here): its runtime's device properties (bytes names) and its pinned memory."""
    cupy, cupyx = ModuleType("cupy"), ModuleType("cupyx")
    cupy.__version__, cupy.uint8 = "13.3.0", "uint8"
    props = {"name": b"NVIDIA H100 80GB HBM3", "totalGlobalMem": 85017755648, "major": 9, "minor": 0}
    runtime = SimpleNamespace(
        getDeviceCount=lambda: 2, getDeviceProperties=lambda index: props, deviceSynchronize=lambda: None
    )
    cupy.cuda = SimpleNamespace(runtime=runtime, Device=lambda: SimpleNamespace(id=0))
    device = SimpleNamespace(set=lambda host: None, get=lambda out: None)
    cupy.empty = lambda shape, dtype: device
    cupyx.empty_pinned = lambda shape, dtype: _Buffer(shape[0])
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupyx", cupyx)
    monkeypatch.setitem(sys.modules, "torch", _torch())
    result = gpu.probe(size=4096, repeats=2)
    assert result["library"] == "cupy 13.3.0" and result["device"]["name"] == "NVIDIA H100 80GB HBM3"
    assert result["device"]["visible_devices"] == 2 and result["d2h_gb_s"] > 0


def test_without_a_gpu_library_the_probe_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CuPy, and a PyTorch stand-in built without CUDA (no GPU here): no probe, and each reason."""
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "torch", _torch(available=False))
    result = gpu.probe()
    assert result["library"] is None
    assert result["reason"].startswith("cupy is not importable")
    assert "torch 2.5.1+cu124 sees no CUDA device" in result["reason"]


def test_gpu_probe_command_prints_json_and_fails_without_a_library(run_payload) -> None:
    """The command as a host check runs it. This machine has neither CuPy nor PyTorch with a GPU (no GPU here):
    it prints why, as JSON, and exits 3 so a script notices; bad flags exit 2 without a traceback."""
    done = run_payload("gpu-probe", "--mib", "1", timeout=120)
    result = json.loads(done.stdout)
    if result["library"] is not None:  # pragma: no cover - a GPU host
        assert done.returncode == 0 and result["h2d_gb_s"] > 0
        return
    assert done.returncode == 3 and "cupy" in result["reason"] and "torch" in result["reason"]
    bad = run_payload("gpu-probe", "--mib", "0")
    assert bad.returncode == 2 and "--mib must be >= 1" in bad.stderr and "Traceback" not in bad.stderr


def test_a_run_records_gpu_samples_through_nvml(run_payload, tmp_path: Path) -> None:
    """A real payload run (sysbench, no TensorFlow) with the stand-in pynvml on its path (no GPU here): each
    system sample carries both boards, and the record names them."""
    need(shutil.which("sysbench") is not None, "the sysbench program")
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(STANDINS), os.environ.get("PYTHONPATH")) if p)}
    done = run_payload("run", "--workload", "sysbench-cpu", "--time", "1", out=tmp_path / "r.json", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = done.record.metrics
    assert metrics.gpu_sampling == "nvml: 2 GPU(s): NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3"
    assert metrics.system and all(len(s.gpus) == 2 for s in metrics.system)
    assert metrics.system[-1].gpus[1].util_percent == 97.0
