#!/usr/bin/python
"""Ansible module: the OS, kernel, CPU, memory, NUMA and GPU facts dlinfra keeps per target, read in one round trip.

Why a module and not setup's ``platform`` and ``hardware`` subsets plus one task per file: on a loaded 2-core
testbed each task is a round trip of a second or more, the hardware subset walks every mount and block device
(dlinfra keeps none of it), and the platform subset resolves the host's FQDN, which waits out the resolver's
timeout (10 s) on a host without DNS. The distribution, kernel command line and virtualisation facts come from
setup's own collectors, called here: a second module (setup with those subsets) cost one more Python start per
target, 23 s of an emulated guest's bring-up. This reads uname, /proc and /sys once and asks NVML (the ``pynvml``
module of nvidia-ml-py, where the Python that runs the module has it) or else nvidia-smi about the GPUs. Reads
only. The GPU readers are plain functions so ``scripts/gpu-check.py`` can call them without Ansible.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: dlinfra_target_facts
short_description: OS, kernel, CPU, memory, NUMA and GPU facts of a benchmark target, read in one round trip
description:
  - The distribution, the kernel command line and the virtualisation role and type, as setup's C(distribution),
    C(cmdline) and C(virtual) subsets report them (the same collectors).
  - Reads C(uname), C(/proc/cpuinfo), C(/proc/meminfo) and C(/sys/devices/system) and the GPUs' model, driver,
    CUDA version, memory, PCIe link and maximum clocks, through NVML (C(pynvml)) where it is importable, else
    C(nvidia-smi) where it is on the PATH. Changes nothing.
options:
  flags:
    description: The CPU flags to report when present (the rest are left out).
    type: list
    elements: str
    default: []
author: dlinfra
"""

RETURN = r"""
os: {description: Distribution and version (setup's distribution_version), type: str, returned: always}
kernel_cmdline: {description: The kernel command line (setup's proc_cmdline), type: dict, returned: always}
virtualization: {description: setup's virtualization_role/virtualization_type, type: str, returned: always}
kernel: {description: The kernel release (uname -r), type: str, returned: always}
architecture: {description: The machine (uname -m), type: str, returned: always}
python: {description: The version of the Python that runs Ansible's modules there, type: str, returned: always}
cpu_model: {description: The first CPU's model name, type: str, returned: always}
logical_cpus:
  description: "Logical CPUs the kernel lists, every one (the payload identity's cpu_count is its pinned set)"
  type: int
  returned: always
threads_per_core: {description: Hardware threads per core (siblings / cpu cores), type: int, returned: always}
cpu_flags: {description: The asked-for flags this CPU has, type: list, returned: always}
microcode: {description: Microcode revision, or unknown, type: str, returned: always}
governor: {description: cpu0's frequency governor, or none, type: str, returned: always}
smt: {description: SMT state from sysfs (1, 0), or unknown, type: str, returned: always}
numa_nodes: {description: NUMA nodes sysfs lists (0 when it lists none), type: int, returned: always}
memory_mb: {description: MemTotal in MiB, type: int, returned: always}
gpus:
  description:
    - One mapping per GPU, by NVML index - index, model, driver, cuda, memory_mb, pcie_gen and pcie_width (the
      most GPU and slot allow; the link now is left out, as an idle GPU trains it down and compare would flag
      it), sm_clock_max_mhz, mem_clock_max_mhz and source (nvml or nvidia-smi). A value not given is null.
    - Empty without a GPU, or where neither NVML nor nvidia-smi answers.
  type: list
  elements: dict
  returned: always
"""


def _read(path: str, default: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or default
    except OSError:
        return default


def _first_cpu(cpuinfo: str) -> dict[str, str]:
    """The fields of the first processor block of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


#: nvidia-smi's names of the fields of a GPU fact, in the order of its CSV columns.
SMI_FIELDS = (
    ("index", "index"),
    ("name", "model"),
    ("driver_version", "driver"),
    ("memory.total", "memory_mb"),
    ("pcie.link.gen.max", "pcie_gen"),
    ("pcie.link.width.max", "pcie_width"),
    ("clocks.max.sm", "sm_clock_max_mhz"),
    ("clocks.max.mem", "mem_clock_max_mhz"),
)
_TEXT_FACTS = ("model", "driver")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_gpu(nvml: Any, index: int, driver: str, cuda: str | None) -> dict[str, Any]:
    """One GPU's facts through NVML; a reading the board does not support is None."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def read(call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(handle, *args)
        except nvml.NVMLError:
            return None

    memory = read(nvml.nvmlDeviceGetMemoryInfo)
    return {
        "index": index,
        "model": _text(read(nvml.nvmlDeviceGetName) or ""),
        "driver": driver,
        "cuda": cuda,
        "memory_mb": None if memory is None else int(memory.total) // (1024 * 1024),
        "pcie_gen": read(nvml.nvmlDeviceGetMaxPcieLinkGeneration),
        "pcie_width": read(nvml.nvmlDeviceGetMaxPcieLinkWidth),
        "sm_clock_max_mhz": read(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": read(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_MEM),
        "source": "nvml",
    }


def gpus_nvml() -> list[dict[str, Any]] | None:
    """The GPUs' facts through NVML, or None where pynvml is not importable or NVML does not start."""
    try:
        import pynvml  # optional: nvidia-ml-py on a GPU host; nvidia-smi is asked otherwise
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):  # no driver, or libnvidia-ml.so is missing
        return None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            version = int(pynvml.nvmlSystemGetCudaDriverVersion())  # 12040 for CUDA 12.4
            cuda: str | None = f"{version // 1000}.{version % 1000 // 10}"
        except pynvml.NVMLError:
            cuda = None
        return [_nvml_gpu(pynvml, i, driver, cuda) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:  # already down
            pass


def _smi_value(fact: str, value: str) -> Any:
    """A CSV cell of nvidia-smi (``--format=csv,noheader,nounits``) as a fact: null for [N/A] and the like."""
    value = value.strip()
    if not value or value.startswith("[") or value in ("N/A", "Unknown"):
        return None
    if fact in _TEXT_FACTS:
        return value
    try:
        return int(float(value))
    except ValueError:
        return None


def gpus_smi(run: Callable[[list[str]], tuple[int, str, str]]) -> list[dict[str, Any]]:
    """The GPUs' facts from nvidia-smi: one CSV query, and its banner for the CUDA version (the query has none)."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = "--query-gpu=" + ",".join(name for name, _ in SMI_FIELDS)
    rc, out, _ = run(["nvidia-smi", query, "--format=csv,noheader,nounits"])
    if rc != 0:
        return []
    rc, banner, _ = run(["nvidia-smi"])
    found = re.search(r"CUDA Version:\s*([0-9.]+)", banner) if rc == 0 else None
    gpus = []
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(SMI_FIELDS):
            continue
        gpu = {fact: _smi_value(fact, cells[i]) for i, (_, fact) in enumerate(SMI_FIELDS)}
        gpu.update(cuda=found.group(1) if found else None, source="nvidia-smi")
        gpus.append(gpu)
    return gpus


def gpu_facts(run: Callable[[list[str]], tuple[int, str, str]]) -> list[dict[str, Any]]:
    """NVML first (no process, and it answers where nvidia-smi is not on the PATH), nvidia-smi second."""
    found = gpus_nvml()
    return found if found else gpus_smi(run)


def os_facts(module: AnsibleModule) -> dict[str, Any]:
    """The distribution, kernel command line and virtualisation, read by setup's own collectors."""
    from ansible.module_utils.facts.system.cmdline import CmdLineFactCollector
    from ansible.module_utils.facts.system.distribution import DistributionFactCollector
    from ansible.module_utils.facts.virtual.linux import LinuxVirtualCollector

    found: dict[str, Any] = {}
    for collector in (DistributionFactCollector(), CmdLineFactCollector(), LinuxVirtualCollector()):
        found.update(collector.collect(module=module, collected_facts=found))
    return {
        "os": f"{found.get('distribution', '')} {found.get('distribution_version', '')}",
        "kernel_cmdline": found.get("proc_cmdline", {}),
        "virtualization": f"{found.get('virtualization_role', '')}/{found.get('virtualization_type', '')}",
    }


def main() -> None:
    module = AnsibleModule(argument_spec={"flags": {"type": "list", "elements": "str", "default": []}},
                           supports_check_mode=True)  # fmt: skip
    cpuinfo = _read("/proc/cpuinfo", "")
    first = _first_cpu(cpuinfo)
    siblings, cores = int(first.get("siblings", "1") or 1), int(first.get("cpu cores", "1") or 1)
    meminfo = _read("/proc/meminfo", "").splitlines()
    mem_kb = next((line.split()[1] for line in meminfo if line.startswith("MemTotal:")), "0")
    have = set(first.get("flags", "").split())
    module.exit_json(
        changed=False,
        **os_facts(module),
        kernel=os.uname().release,
        architecture=os.uname().machine,
        python=platform.python_version(),
        cpu_model=first.get("model name", ""),
        logical_cpus=sum(1 for line in cpuinfo.splitlines() if line.startswith("processor")),
        threads_per_core=max(siblings // max(cores, 1), 1),
        cpu_flags=[flag for flag in module.params["flags"] if flag in have],
        microcode=first.get("microcode", "unknown"),
        governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "none"),
        smt=_read("/sys/devices/system/cpu/smt/active", "unknown"),
        numa_nodes=len(glob.glob("/sys/devices/system/node/node[0-9]*")),
        memory_mb=int(mem_kb) // 1024,
        gpus=gpu_facts(module.run_command),
    )


if __name__ == "__main__":
    main()
