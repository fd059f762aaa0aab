"""GPU readings through NVML, and a probe of the host-device path, both without TensorFlow.

Why NVML (``nvidia-ml-py``, module ``pynvml``) and not ``nvidia-smi``: one library call per reading instead of
a process a second beside the measured one. Every GPU library here is optional, imported inside a function: a
target without it (or without a GPU) samples no GPU, and the record says why. The probe moves pinned buffers
with whichever of CuPy or PyTorch is importable, so a host's GPU path can be checked before a campaign
installs TensorFlow there (``python -m dlinfra.payload gpu-probe``). See docs/gpu.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from dlinfra.record import GpuSample

#: Bytes each probe copy moves: large enough that the copy, not its launch, dominates the time.
PROBE_BYTES = 256 << 20


def text(value: Any) -> str:
    """NVML and CUDA return bytes in older bindings and str in newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def load_nvml() -> tuple[Any | None, str]:
    """pynvml, initialised, or None and why not (the caller shuts it down)."""
    try:
        import pynvml  # optional: nvidia-ml-py, on GPU hosts only; the payload runs without it
    except ImportError as exc:
        return None, f"pynvml is not importable ({exc}); install nvidia-ml-py to sample GPUs"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:  # no driver, or libnvidia-ml.so is missing
        return None, f"NVML did not start: {text(exc)}"
    return pynvml, ""


def reading(nvml: Any, call: Callable[..., Any], *args: Any) -> Any:
    """One NVML reading, or None where the device does not support it (power on some boards)."""
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


class GpuSampler:
    """NVML opened once for a run: :meth:`read` gives one reading per GPU NVML sees; :meth:`close` ends it.

    ``note`` is what the record keeps in ``gpu_sampling``: the GPUs sampled, or why none are.
    """

    def __init__(self) -> None:
        self._nvml, why = load_nvml()
        self._devices: list[tuple[int, str, Any]] = []
        if self._nvml is None:
            self.note = f"no GPU sampling: {why}"
            return
        nvml = self._nvml
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                self._devices.append((index, text(reading(nvml, nvml.nvmlDeviceGetUUID, handle) or ""), handle))
            names = [text(reading(nvml, nvml.nvmlDeviceGetName, h) or "?") for _, _, h in self._devices]
        except nvml.NVMLError as exc:
            self.close()
            self.note = f"no GPU sampling: NVML could not list the GPUs: {text(exc)}"
            return
        if not self._devices:
            self.close()
            self.note = "no GPU sampling: NVML sees no GPU"
            return
        self.note = f"nvml: {len(names)} GPU(s): {', '.join(names)}"

    @property
    def active(self) -> bool:
        return bool(self._devices)

    def read(self) -> list[GpuSample]:
        """Utilisation, memory used, power and SM/memory clocks of each GPU, now."""
        nvml = self._nvml
        if nvml is None:
            return []
        out = []
        for index, uuid, handle in self._devices:
            util = reading(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = reading(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = reading(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
            out.append(
                GpuSample(
                    index=index,
                    uuid=uuid,
                    util_percent=None if util is None else float(util.gpu),
                    memory_used_bytes=None if memory is None else int(memory.used),
                    power_w=None if power_mw is None else round(power_mw / 1000.0, 3),
                    sm_clock_mhz=reading(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
                    mem_clock_mhz=reading(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
                )
            )
        return out

    def close(self) -> None:
        nvml, self._nvml, self._devices = self._nvml, None, []
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:  # already down: nothing to release
                pass


# -- the host-device probe ----------------------------------------------------------------------------------


class _Torch:
    """PyTorch's CUDA device 0 (the first of CUDA_VISIBLE_DEVICES)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.library = f"torch {torch.__version__}"

    def identity(self) -> dict[str, Any]:
        props = self.torch.cuda.get_device_properties(0)
        return {
            "name": props.name,
            "memory_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}",
            "visible_devices": int(self.torch.cuda.device_count()),
        }

    def buffers(self, size: int) -> tuple[Any, Any]:
        host = self.torch.empty(size, dtype=self.torch.uint8, pin_memory=True)
        return host, self.torch.empty(size, dtype=self.torch.uint8, device="cuda")

    def to_device(self, host: Any, device: Any) -> None:
        device.copy_(host, non_blocking=True)

    def to_host(self, host: Any, device: Any) -> None:
        host.copy_(device, non_blocking=True)

    def sync(self) -> None:
        self.torch.cuda.synchronize()


class _CuPy:
    """CuPy's current device (device 0 of CUDA_VISIBLE_DEVICES unless set otherwise)."""

    def __init__(self, cupy: Any, cupyx: Any) -> None:
        self.cupy, self.cupyx = cupy, cupyx
        self.library = f"cupy {cupy.__version__}"

    def identity(self) -> dict[str, Any]:
        runtime = self.cupy.cuda.runtime
        props = runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        return {
            "name": text(props["name"]),
            "memory_bytes": int(props["totalGlobalMem"]),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "visible_devices": int(runtime.getDeviceCount()),
        }

    def buffers(self, size: int) -> tuple[Any, Any]:
        host = self.cupyx.empty_pinned((size,), dtype=self.cupy.uint8)
        return host, self.cupy.empty((size,), dtype=self.cupy.uint8)

    def to_device(self, host: Any, device: Any) -> None:
        device.set(host)

    def to_host(self, host: Any, device: Any) -> None:
        device.get(out=host)

    def sync(self) -> None:
        self.cupy.cuda.runtime.deviceSynchronize()


def gpu_library() -> tuple[Any | None, str]:
    """A probe backend over CuPy, else PyTorch, with a usable CUDA device; or None and why neither is."""
    why = []
    try:
        import cupy  # optional: a GPU host's library; the payload runs without it
        import cupyx  # optional: CuPy's pinned host memory

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return _CuPy(cupy, cupyx), ""
        why.append("cupy sees no CUDA device")
    except ImportError as exc:
        why.append(f"cupy is not importable ({exc})")
    except RuntimeError as exc:  # CUDARuntimeError: no driver, no device
        why.append(f"cupy found no usable CUDA device ({text(exc)})")
    try:
        import torch  # optional: a GPU host's library; the payload runs without it
    except ImportError as exc:
        why.append(f"torch is not importable ({exc})")
    else:
        if torch.cuda.is_available():
            return _Torch(torch), ""
        why.append(f"torch {torch.__version__} sees no CUDA device")
    return None, "; ".join(why)


def _rates(
    backend: Any, copy: Callable[[Any, Any], None], buffers: tuple[Any, Any], size: int, repeats: int
) -> list[float]:
    """GB/s of ``repeats`` timed copies of ``size`` bytes, each after the one before has finished."""
    host, device = buffers
    copy(host, device)  # the first copy pays for page mapping and lazy context set-up
    backend.sync()
    rates = []
    for _ in range(repeats):
        began = time.perf_counter()
        copy(host, device)
        backend.sync()
        rates.append(size / max(time.perf_counter() - began, 1e-9) / 1e9)
    return rates


def measure(backend: Any, size: int = PROBE_BYTES, repeats: int = 5) -> dict[str, Any]:
    """Host-to-device and device-to-host bandwidth (GB/s, 1e9 bytes) over pinned buffers, with the device's
    identity: best (what the link gives) and median (what a run sees) of ``repeats`` copies each way."""
    buffers = backend.buffers(size)
    out: dict[str, Any] = {"library": backend.library, "device": backend.identity(), "bytes": size}
    for name, copy in (("h2d", backend.to_device), ("d2h", backend.to_host)):
        rates = _rates(backend, copy, buffers, size, max(repeats, 1))
        out[f"{name}_gb_s"] = round(max(rates), 3)
        out[f"{name}_gb_s_median"] = round(statistics.median(rates), 3)
    return out


def probe(size: int = PROBE_BYTES, repeats: int = 5) -> dict[str, Any]:
    """What ``gpu-probe`` prints: the bandwidth and identity of the first GPU, or why there is none to probe."""
    backend, why = gpu_library()
    if backend is None:
        return {"library": None, "reason": why}
    return measure(backend, size, repeats)
