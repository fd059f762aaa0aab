#!/usr/bin/python
"""Ansible module: the kernel, CPU, memory, NUMA and GPU facts dlinfra keeps per target, read in one round trip.

Why a module and not setup's ``platform`` and ``hardware`` subsets plus one task per file: on a loaded 2-core
testbed each task is a round trip of a second or more, the hardware subset walks every mount and block device
(dlinfra keeps none of it), and the platform subset resolves the host's FQDN, which waits out the resolver's
timeout (10 s) on a host without DNS. This reads uname, /proc and /sys once and asks nvidia-smi where there is
one. Reads only.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: dlinfra_target_facts
short_description: Kernel, CPU, memory, NUMA and GPU facts of a benchmark target, read in one round trip
description:
  - Reads C(uname), C(/proc/cpuinfo), C(/proc/meminfo) and C(/sys/devices/system) and, where C(nvidia-smi) is on the
    PATH, the GPUs' model, driver and clocks. Changes nothing.
options:
  flags:
    description: The CPU flags to report when present (the rest are left out).
    type: list
    elements: str
    default: []
author: dlinfra
"""

RETURN = r"""
kernel: {description: The kernel release (uname -r), type: str, returned: always}
architecture: {description: The machine (uname -m), type: str, returned: always}
python: {description: The version of the Python that runs Ansible's modules there, type: str, returned: always}
cpu_model: {description: The first CPU's model name, type: str, returned: always}
cpu_count: {description: Logical CPUs the kernel lists, type: int, returned: always}
threads_per_core: {description: Hardware threads per core (siblings / cpu cores), type: int, returned: always}
cpu_flags: {description: The asked-for flags this CPU has, type: list, returned: always}
microcode: {description: Microcode revision, or unknown, type: str, returned: always}
governor: {description: cpu0's frequency governor, or none, type: str, returned: always}
smt: {description: SMT state from sysfs (1, 0), or unknown, type: str, returned: always}
numa_nodes: {description: NUMA nodes sysfs lists (0 when it lists none), type: int, returned: always}
memory_mb: {description: MemTotal in MiB, type: int, returned: always}
gpus: {description: One CSV line per GPU (name, driver, max SM clock, max memory clock), type: list, returned: always}
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


def _gpus(module: AnsibleModule) -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    query = "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem"
    rc, out, _ = module.run_command(["nvidia-smi", query, "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines() if line.strip()] if rc == 0 else []


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
        kernel=os.uname().release,
        architecture=os.uname().machine,
        python=platform.python_version(),
        cpu_model=first.get("model name", ""),
        cpu_count=sum(1 for line in cpuinfo.splitlines() if line.startswith("processor")),
        threads_per_core=max(siblings // max(cores, 1), 1),
        cpu_flags=[flag for flag in module.params["flags"] if flag in have],
        microcode=first.get("microcode", "unknown"),
        governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "none"),
        smt=_read("/sys/devices/system/cpu/smt/active", "unknown"),
        numa_nodes=len(glob.glob("/sys/devices/system/node/node[0-9]*")),
        memory_mb=int(mem_kb) // 1024,
        gpus=_gpus(module),
    )


if __name__ == "__main__":
    main()
