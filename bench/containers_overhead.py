"""Throughput of ``mnist-dnn`` single in ``bm`` and in ``ctr`` on this machine, interleaved, with the overhead.

Both run the same payload (the wheelhouse of this checkout) pinned to the same CPU set; the container
gets that set as its cpuset and runs it through ``exec``, as the run engine does. Runs alternate
(bm, ctr, ctr, bm, ...) so drift in a shared machine's load hits both alike.

    python bench/containers_overhead.py --repeats 5 --steps 300 --cpus 1 --engine docker
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlinfra.images.wheelhouse import build_wheelhouse
from dlinfra.providers.containers.engine import Engine, ensure_dockerd
from dlinfra.providers.containers.image import build_payload_image
from dlinfra.providers.containers.playbook import run_container
from dlinfra.providers.containers.run import ContainerSpec, NetworkMode, Resources, remove_run


def _args(out: str, steps: int, cpus: str) -> list[str]:
    return [
        "-m", "dlinfra.payload", "run", "--workload", "mnist-dnn", "--data", "synthetic",
        "--steps", str(steps), "--cpus", cpus, "--out", out,
    ]  # fmt: skip


def _bootstrap_ci(bm: list[float], ctr: list[float], rounds: int = 5000) -> tuple[float, float]:
    rng = random.Random(0)
    draws = []
    for _ in range(rounds):
        b = statistics.median(rng.choices(bm, k=len(bm)))
        c = statistics.median(rng.choices(ctr, k=len(ctr)))
        draws.append((b - c) / b * 100)
    draws.sort()
    return draws[int(0.025 * rounds)], draws[int(0.975 * rounds)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--cpus", default="1")
    parser.add_argument("--engine", choices=["docker", "podman"], default="docker")
    opts = parser.parse_args()

    engine = ensure_dockerd() if opts.engine == "docker" else Engine("podman")
    started = time.monotonic()
    wheelhouse = build_wheelhouse()
    image = build_payload_image(engine, wheelhouse.path, wheelhouse.lock)
    print(f"wheelhouse + image ready in {time.monotonic() - started:.1f} s ({image.tag})")
    run_id = f"bench{secrets.token_hex(2)}"
    results = Path(tempfile.mkdtemp(prefix="dlinfra-bench-"))
    name = f"dlinfra-{run_id}-single"
    t0 = time.monotonic()
    run_container(
        engine,
        ContainerSpec(
            name,
            image.tag,
            run_id,
            NetworkMode("host"),
            Resources(cpuset=opts.cpus),
            volumes=((str(results), "/opt/dlinfra/runs"),),
        ),
    )
    print(f"container start: {time.monotonic() - t0:.2f} s")
    figures: dict[str, list[float]] = {"bm": [], "ctr": []}
    try:
        for i in range(opts.repeats):
            order = ("bm", "ctr") if i % 2 == 0 else ("ctr", "bm")
            for layer in order:
                out = f"{layer}-{i}.json"
                if layer == "bm":
                    cmd = [sys.executable, *_args(str(results / out), opts.steps, opts.cpus)]
                    subprocess.run(cmd, check=True, capture_output=True)
                else:
                    argv = _args(f"/opt/dlinfra/runs/{out}", opts.steps, opts.cpus)
                    engine.run("exec", name, image.python, *argv, timeout=900)
                rate = json.loads((results / out).read_text())["metrics"]["examples_per_sec"]
                figures[layer].append(rate)
                print(f"repeat {i} {layer}: {rate:,.0f} examples/s")
    finally:
        remove_run(engine, run_id)
    bm, ctr = figures["bm"], figures["ctr"]
    mb, mc = statistics.median(bm), statistics.median(ctr)
    lo, hi = _bootstrap_ci(bm, ctr)
    print(f"bm  median {mb:,.0f} examples/s  (min {min(bm):,.0f}, max {max(bm):,.0f}, n={len(bm)})")
    print(f"ctr median {mc:,.0f} examples/s  (min {min(ctr):,.0f}, max {max(ctr):,.0f}, n={len(ctr)})")
    print(f"overhead of ctr vs bm: {(mb - mc) / mb * 100:+.1f}%  (bootstrap 95% CI {lo:+.1f}% .. {hi:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
