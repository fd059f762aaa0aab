#!/usr/bin/env python3
"""Check dlinfra's GPU paths on a real GPU host, against nvidia-smi, in a few minutes; print one JSON summary.

Why: dlinfra's GPU code (NVML samples, GPU facts, the host-device probe) is tested in CI with stand-ins only, as
no GPU runs there. This runs the real thing once on a host: it loads the first GPU with a matmul loop, runs the
payload's system sampler and the facts module's GPU readers meanwhile, reads ``nvidia-smi --query-gpu`` in the
same run and compares, runs the bandwidth probe against the link's nominal rate, and says whether /dev/kvm,
docker and podman are there (for the vm and ctr layers).

Needs python3 with PyTorch or CuPy (CUDA) and nvidia-ml-py; no TensorFlow, no dlinfra install (it puts this
checkout on sys.path and imports only dlinfra.payload modules that need neither TensorFlow nor NumPy), no
Ansible (the facts module is loaded with a stand-in of Ansible's module base where Ansible is missing):

    python3 scripts/gpu-check.py [--seconds 60] > gpu-check.json

Exit status: 0 when every comparison agrees within its tolerance, 1 when one does not, 2 when no GPU library
or no GPU could be used (the summary says why).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlinfra.payload import gpu  # noqa: E402 - after the checkout is on sys.path

#: nvidia-smi's live readings, as ``--query-gpu`` names them, and the sampler's fields they match (nvidia-smi gives
#: memory in MiB, the sampler in bytes).
LIVE = (
    ("uuid", "uuid"),
    ("utilization.gpu", "util_percent"),
    ("memory.used", "memory_used_bytes"),
    ("power.draw", "power_w"),
    ("clocks.sm", "sm_clock_mhz"),
    ("clocks.mem", "mem_clock_mhz"),
    ("pcie.link.gen.current", "pcie_gen_now"),
    ("pcie.link.width.current", "pcie_width_now"),
)
#: How far the sampler's reading may be from nvidia-smi's nearest in time: utilisation is an average over a
#: window each tool picks itself; NVML's memory "used" counts the driver's reserved memory, nvidia-smi's does not.
TOLERANCE = {"util_percent": 15.0, "memory_used_mib": 1024.0, "power_w": 0.15, "sm_clock_mhz": 0.05}
#: Theoretical GB/s per direction of a x16 link, by PCIe generation (the raw rate: 64 for gen5, 32 for gen4).
NOMINAL_X16 = {1: 4.0, 2: 8.0, 3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


def say(text: str) -> None:
    print(f"gpu-check: {text}", file=sys.stderr, flush=True)


def smi(query: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits``; [] when it fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        say(f"nvidia-smi --query-gpu={query} failed: {exc}")
        return []
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # [N/A], [Not Supported]
        return None


def facts_module() -> types.ModuleType:
    """playbooks/library/dlinfra_target_facts.py, with a stand-in of Ansible's module base if Ansible is missing
    (only its main() uses it; the GPU readers are plain functions)."""
    try:
        import ansible.module_utils.basic  # noqa: F401 - only whether it is there
    except ImportError:
        for name in ("ansible", "ansible.module_utils", "ansible.module_utils.basic"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["ansible.module_utils.basic"].AnsibleModule = None  # type: ignore[attr-defined]
    path = REPO / "playbooks" / "library" / "dlinfra_target_facts.py"
    spec = importlib.util.spec_from_file_location("dlinfra_target_facts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_command(argv: list[str]) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


class Load:
    """A matmul loop on the first CUDA device, in a thread, until stopped: the GPU is busy while we read it."""

    def __init__(self, backend: Any, n: int = 8192) -> None:
        self.backend, self.n, self.iterations, self.error = backend, n, 0, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="matmul", daemon=True)

    def _loop(self) -> None:
        try:
            if hasattr(self.backend, "torch"):
                torch = self.backend.torch
                a = torch.randn(self.n, self.n, device="cuda", dtype=torch.float16)
                step, sync = (lambda: a @ a), torch.cuda.synchronize
            else:
                cupy = self.backend.cupy
                a = cupy.random.rand(self.n, self.n).astype(cupy.float16)
                step, sync = (lambda: a @ a), cupy.cuda.runtime.deviceSynchronize
            self.began = time.perf_counter()
            while not self._stop.is_set():
                for _ in range(10):
                    step()
                sync()
                self.iterations += 10
            self.seconds = time.perf_counter() - self.began
        except Exception as exc:  # noqa: BLE001 - reported in the summary, whatever the library raised
            self.error = f"{type(exc).__name__}: {exc}"

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(60)
        out: dict[str, Any] = {"matrix": self.n, "iterations": self.iterations, "error": self.error or None}
        if self.iterations and getattr(self, "seconds", 0):
            out["tflop_s"] = round(2 * self.n**3 * self.iterations / self.seconds / 1e12, 1)
        return out


def sample_during(seconds: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """The sampler's GPU readings (once a second) and nvidia-smi's live readings (every 5 s), over ``seconds``."""
    try:
        from dlinfra.payload.measure import SystemSampler  # needs psutil; the GPU sampler alone otherwise
    except ImportError:
        SystemSampler = None
    began = time.time()
    sampler = SystemSampler(began).start() if SystemSampler else None
    plain = None if sampler else gpu.GpuSampler()
    note = sampler.gpu_note if sampler else plain.note  # type: ignore[union-attr]
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    next_smi = 0.0
    while (t := time.time() - began) < seconds:
        if plain is not None:
            ours += [{"t": t, **vars(g)} for g in plain.read()]
        if t >= next_smi:
            next_smi = t + 5.0
            for row in smi(",".join(q for q, _ in LIVE)):
                theirs.append(
                    {"t": t, **{f: row[i] if f == "uuid" else number(row[i]) for i, (_, f) in enumerate(LIVE)}}
                )
        time.sleep(1.0)
    if sampler is not None:
        ours = [{"t": s.elapsed_s, **vars(g)} for s in sampler.stop() for g in s.gpus]
    if plain is not None:
        plain.close()
    return ours, theirs, note


def compare_live(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric: the largest gap between the sampler and nvidia-smi at the nearest moment, per GPU."""
    gaps: dict[str, list[float]] = {k: [] for k in TOLERANCE}
    for reading in theirs:
        same = [o for o in ours if o["uuid"] == reading["uuid"]]
        if not same:
            continue
        near = min(same, key=lambda o: abs(o["t"] - reading["t"]))
        if reading["util_percent"] is not None and near["util_percent"] is not None:
            gaps["util_percent"].append(abs(near["util_percent"] - reading["util_percent"]))
        if reading["memory_used_bytes"] is not None and near["memory_used_bytes"] is not None:
            gaps["memory_used_mib"].append(abs(near["memory_used_bytes"] / 2**20 - reading["memory_used_bytes"]))
        for key in ("power_w", "sm_clock_mhz"):
            if reading[key] and near[key] is not None:
                gaps[key].append(abs(near[key] - reading[key]) / reading[key])
    out = {}
    for key, values in gaps.items():
        worst = max(values) if values else None
        out[key] = {
            "worst_gap": worst,
            "tolerance": TOLERANCE[key],
            "agree": worst is not None and worst <= TOLERANCE[key],
        }
    out["readings"] = {"sampler": len(ours), "nvidia_smi": len(theirs)}
    out["busy_gpus_seen"] = sorted({o["index"] for o in ours if (o["util_percent"] or 0) >= 50})
    return out


def compare_facts(module: types.ModuleType) -> dict[str, Any]:
    """The facts module's NVML reader against its nvidia-smi reader, field by field (both on this host)."""
    by_nvml = module.gpus_nvml() or []
    by_smi = module.gpus_smi(run_command)
    differ = [
        {"index": a.get("index"), "field": k, "nvml": a.get(k), "nvidia_smi": b.get(k)}
        for a, b in zip(by_nvml, by_smi, strict=False)
        for k in a
        if k != "source" and a.get(k) != b.get(k)
    ]
    return {
        "nvml": by_nvml,
        "nvidia_smi": by_smi,
        "differ": differ,
        "agree": bool(by_nvml) and len(by_nvml) == len(by_smi) and not differ,
    }


def bandwidth(facts: list[dict[str, Any]], live: list[dict[str, Any]]) -> dict[str, Any]:
    """The probe's host-device rates against the nominal rate of the first GPU's link (as the facts give it)."""
    result = gpu.probe()
    if not result.get("library") or not facts:
        return result
    link = facts[0]
    gen, width = link.get("pcie_gen"), link.get("pcie_width")
    nominal = NOMINAL_X16.get(gen or 0, 0.0) * (width or 0) / 16 or None
    result["nominal_gb_s"] = nominal
    result["pcie"] = {"gen_max": gen, "width_max": width}
    under_load = [r for r in live if r["uuid"] and r.get("pcie_gen_now")]
    if under_load:
        result["pcie"].update(
            gen_under_load=under_load[-1]["pcie_gen_now"], width_under_load=under_load[-1]["pcie_width_now"]
        )
    if nominal:
        result["h2d_of_nominal"] = round(result["h2d_gb_s"] / nominal, 3)
        result["d2h_of_nominal"] = round(result["d2h_gb_s"] / nominal, 3)
    return result


def host() -> dict[str, Any]:
    return {
        "dev_kvm": os.path.exists("/dev/kvm"),
        "docker": shutil.which("docker"),
        "podman": shutil.which("podman"),
        "nvidia_smi": shutil.which("nvidia-smi"),
        "python": sys.version.split()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the load runs (default 60; max 420)")
    args = parser.parse_args()
    seconds = min(max(args.seconds, 10.0), 420.0)  # the whole check stays under 10 minutes
    summary: dict[str, Any] = {"host": host()}
    backend, why = gpu.gpu_library()
    if backend is None:
        summary.update(ok=False, reason=why)
        print(json.dumps(summary, indent=2, sort_keys=True, default=str))
        return 2
    module = facts_module()
    say(f"loading the GPU for {seconds:.0f} s with {backend.library}; sampling meanwhile")
    load = Load(backend).start()
    time.sleep(3)  # the load ramps up before the first readings
    ours, theirs, note = sample_during(seconds)
    summary["facts"] = compare_facts(module)  # under load: the link is at its working rate
    summary["load"] = load.stop()
    summary["sampler"] = {"gpu_sampling": note, **compare_live(ours, theirs)}
    say("probing host-device bandwidth")
    summary["probe"] = bandwidth(summary["facts"]["nvml"] or summary["facts"]["nvidia_smi"], theirs)
    checks = [
        summary["facts"]["agree"],
        *(v["agree"] for k, v in summary["sampler"].items() if isinstance(v, dict) and "agree" in v),
    ]
    summary["ok"] = all(checks) and not summary["load"]["error"] and bool(summary["sampler"]["busy_gpus_seen"])
    print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
