"""A stand-in for nvidia-ml-py's ``pynvml``, because no GPU runs where the tests run (CI, this machine).

It answers the calls dlinfra makes with the types and values the real bindings give (nvidia-ml-py 12.x: str
names, ctypes-like structs with ``.gpu``/``.used``/``.total``, power in mW, an ``NVMLError`` whose str is
NVML's message), with the values of two NVIDIA H100 80GB HBM3 (SXM5) boards on driver 550.54.15 (CUDA 12.4),
the second under load: typical figures of that board written by hand, not captured (no GPU has been lent to
this work yet; issue 37 asks for recordings from a lent machine to replace them).
Tests put it on sys.path (or into sys.modules) as ``pynvml``.

``SCENARIO`` (or the environment's ``DLINFRA_STANDIN_NVML``) picks a case the real library also produces:
``h100x2`` (default), ``no-driver`` (nvmlInit fails as on a host without the kernel module), ``no-gpu``
(NVML starts and counts 0 devices, as in a container given none) and ``no-power`` (a board that does not
report power: NVML_ERROR_NOT_SUPPORTED, as many vGPU and older boards).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

SCENARIO: str | None = None
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_VIDEO = 0, 1, 2, 3
NVML_ERROR_UNINITIALIZED, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_DRIVER_NOT_LOADED = 1, 3, 9
_MESSAGES = {1: "Uninitialized", 3: "Not Supported", 9: "Driver Not Loaded"}

#: Per board: what nvidia-smi -q and the NVML calls below would give (memory in bytes, power in mW; typical values).
DEVICES = (
    {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-5b3c1f0e-8a2d-4c71-9e3b-2f6a7d9c0e11",
        "total": 85520809984,
        "used": 562102272,
        "util": 0,
        "power_mw": 71234,
        "clocks": {NVML_CLOCK_SM: 345, NVML_CLOCK_MEM: 2619},
        "max_clocks": {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619},
        "pcie_max": (5, 16),
        "pcie_now": (1, 16),
    },
    {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-c1d2e3f4-0a1b-4c2d-8e3f-405162738495",
        "total": 85520809984,
        "used": 20963131392,
        "util": 97,
        "power_mw": 612345,
        "clocks": {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619},
        "max_clocks": {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619},
        "pcie_max": (5, 16),
        "pcie_now": (5, 16),
    },
)
DRIVER, CUDA_DRIVER = "550.54.15", 12040
calls: list[str] = []
_initialised = 0


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


def _scenario() -> str:
    return SCENARIO or os.environ.get("DLINFRA_STANDIN_NVML", "h100x2")


def _check() -> None:
    if _initialised <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlInit() -> None:
    global _initialised
    calls.append("nvmlInit")
    if _scenario() == "no-driver":
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    _initialised += 1


def nvmlShutdown() -> None:
    global _initialised
    calls.append("nvmlShutdown")
    _check()
    _initialised -= 1


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return DRIVER


def nvmlSystemGetCudaDriverVersion() -> int:
    _check()
    return CUDA_DRIVER


def nvmlDeviceGetCount() -> int:
    _check()
    return 0 if _scenario() == "no-gpu" else len(DEVICES)


def nvmlDeviceGetHandleByIndex(index: int) -> SimpleNamespace:
    _check()
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
    return SimpleNamespace(board=DEVICES[index])


def nvmlDeviceGetName(handle: SimpleNamespace) -> str:
    return handle.board["name"]


def nvmlDeviceGetUUID(handle: SimpleNamespace) -> str:
    return handle.board["uuid"]


def nvmlDeviceGetMemoryInfo(handle: SimpleNamespace) -> SimpleNamespace:
    b = handle.board
    return SimpleNamespace(total=b["total"], used=b["used"], free=b["total"] - b["used"])


def nvmlDeviceGetUtilizationRates(handle: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(gpu=handle.board["util"], memory=handle.board["util"] // 3)


def nvmlDeviceGetPowerUsage(handle: SimpleNamespace) -> int:
    if _scenario() == "no-power":
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return handle.board["power_mw"]


def nvmlDeviceGetClockInfo(handle: SimpleNamespace, clock: int) -> int:
    return handle.board["clocks"][clock]


def nvmlDeviceGetMaxClockInfo(handle: SimpleNamespace, clock: int) -> int:
    return handle.board["max_clocks"][clock]


def nvmlDeviceGetMaxPcieLinkGeneration(handle: SimpleNamespace) -> int:
    return handle.board["pcie_max"][0]


def nvmlDeviceGetMaxPcieLinkWidth(handle: SimpleNamespace) -> int:
    return handle.board["pcie_max"][1]


def nvmlDeviceGetCurrPcieLinkGeneration(handle: SimpleNamespace) -> int:
    return handle.board["pcie_now"][0]


def nvmlDeviceGetCurrPcieLinkWidth(handle: SimpleNamespace) -> int:
    return handle.board["pcie_now"][1]
