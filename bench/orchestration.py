"""Orchestration benchmark on the local testbed (needs root).

Prints:
  * deploy time for 1, 4 and 8 fresh hosts (cold: the dependencies archive unpacked, a venv per host), and the
    no-op redeploy, each count twice in the order 1, 4, 8, 8, 4, 1 (the mean of the two);
  * per-cell overhead = cell wall time - the payload's own elapsed time, for single and distributed cells,
    with where it goes (connect, prepare, run, fetch).

Goals (recorded for bench/figures.py's table): 8-host deploy within 1.5x of 1 host, no-op redeploy of 8
hosts under 10 s, per-cell overhead <= 0.5 s single and <= 1 s distributed, and never negative.

    sudo python bench/orchestration.py                 # 1, 4, 8 hosts + overhead
    sudo python bench/orchestration.py --hosts 1,4 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from figures import Figure, record

from dlinfra.images.deps_archive import build_deps_archive
from dlinfra.images.wheelhouse import build_wheelhouse
from dlinfra.inventory import load_inventory
from dlinfra.orchestration.cells import Cell, plan
from dlinfra.orchestration.deploy import deploy
from dlinfra.orchestration.launch import Launcher
from dlinfra.providers.base import LayerSpec
from dlinfra.providers.ssh.provider import SshProvider
from dlinfra.record import config_hash
from dlinfra.testbed.local import LocalTestbed


def _targets(state):  # a TestbedState
    return SshProvider("bm").up(LayerSpec("bm", load_inventory(state.inventory), state.inventory))


def bench_deploy(n: int, artifacts: Path) -> tuple[float, float, float]:
    """(testbed up s, cold deploy s, no-op redeploy s) on n fresh hosts."""
    tb = LocalTestbed(f"dlbench{n}")
    tb.down()
    try:
        t0 = time.monotonic()
        state = tb.up(n)
        up_s = time.monotonic() - t0
        targets = _targets(state)
        wh = build_wheelhouse()
        # Each deploy starts with the disk's write-back done, so less of the previous deploy's writes (an
        # unpacked store of ~1 GB, and its removal) is left to slow this one down; see the mirrored order below.
        os.sync()
        t0 = time.monotonic()
        # As a campaign deploys for cells that run no sysbench (the cells below): no sysbench check per host.
        deploy(targets, artifacts_dir=artifacts / f"deploy-{n}", wheelhouse=wh, quiet=True, sysbench=False)
        cold = time.monotonic() - t0
        t0 = time.monotonic()
        again = deploy(targets, artifacts_dir=artifacts / f"redeploy-{n}", wheelhouse=wh, quiet=True, sysbench=False)
        warm = time.monotonic() - t0
        assert again.changed == 0, "redeploy changed something"
        return up_s, cold, warm
    finally:
        tb.down()


def bench_cells(
    repeats: int, artifacts: Path, reuse: str | None = None
) -> list[tuple[str, list[float], dict[str, float]]]:
    tb = LocalTestbed(reuse or "dlbenchcell")
    if not reuse:
        tb.down()
    rows = []
    try:
        state = tb.up(3)
        targets = _targets(state)
        deploy(targets, artifacts_dir=artifacts / "deploy-cells", quiet=True)
        by_name = {t.name: t for t in targets}
        launcher = Launcher("bench-orchestration")
        base = {"layer": "bm", "workload": "mnist-dnn", "warmup_steps": 2, "steps": 20, "batch_size": 64}
        kinds = {
            "single": {**base, "mode": "single", "host": targets[0].physical_host},
            "ps-async 1ps x 2w": {
                **base, "mode": "ps-async", "ps": 1, "workers": 2, "placement": "spread",
                "hosts": [t.physical_host for t in targets],
            },
        }  # fmt: skip
        for label, config in kinds.items():
            names = [targets[0].name] if config["mode"] == "single" else [t.name for t in targets]
            cell = Cell(config=config, hash=config_hash(config), targets=names)
            overheads: list[float] = []
            phases: dict[str, list[float]] = {}
            for r in range(repeats + 1):  # the first run opens the connections: reported apart
                run = launcher.run_cell(cell, r, plan(cell, by_name), timeout=300)
                if run.status != "ok" or run.payload_elapsed_s is None:
                    print(f"  {label} repeat {r} failed: {run.failure_reason}", file=sys.stderr)
                    continue
                overhead = run.wall_s - run.payload_elapsed_s
                if r == 0:
                    print(f"  {label}: first cell (connections opened) overhead {overhead:.2f} s")
                    continue
                overheads.append(overhead)
                for k, v in run.phases.items():
                    phases.setdefault(k, []).append(v)
            rows.append((label, overheads, {k: statistics.median(v) for k, v in phases.items()}))
        launcher.close()
    finally:
        if not reuse:
            tb.down()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1,4,8", help="host counts for the deploy timing (default 1,4,8)")
    parser.add_argument("--repeats", type=int, default=3, help="cells per kind for the overhead (default 3)")
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts/bench-orchestration"))
    parser.add_argument("--skip-deploy", action="store_true", help="only the per-cell overhead")
    parser.add_argument("--reuse-testbed", metavar="NAME", help="measure cells on this running 3-host testbed")
    args = parser.parse_args()
    print("building the wheelhouse (cached)...")
    t0 = time.monotonic()
    wh = build_wheelhouse()
    print(f"wheelhouse: {len(wh.files)} wheels, {sum(f.stat().st_size for f in wh.files) / 1e6:.0f} MB, "
          f"{time.monotonic() - t0:.1f} s")  # fmt: skip
    archive = build_deps_archive(wh)  # built once and cached, like the wheelhouse: not part of a deploy's time
    if archive is not None:
        print(f"dependencies archive: {archive.path.stat().st_size / 1e6:.0f} MB, {time.monotonic() - t0:.1f} s")
    runs: dict[int, list[tuple[float, float]]] = {}
    if not args.skip_deploy:
        counts = [int(x) for x in args.hosts.split(",")]
        # Each count twice, in the order a, b, ..., b, a: the one unpack of a cold deploy writes ~1 GB, and how
        # long that takes drifts with the disk's state from one deploy to the next (3 to 19 s for the same
        # unpack here); the mirrored order gives every count the same share of the drift.
        for n in counts + counts[::-1]:
            up_s, cold, warm = bench_deploy(n, args.artifacts)
            runs.setdefault(n, []).append((cold, warm))
            print(f"deploy {n} host(s): testbed up {up_s:.2f} s, cold deploy {cold:.1f} s, no-op redeploy {warm:.1f} s")
    deploys = {n: (statistics.mean(c for c, _ in r), statistics.mean(w for _, w in r)) for n, r in runs.items()}
    rows = bench_cells(args.repeats, args.artifacts, args.reuse_testbed)
    print()
    print("figure                                   value")
    for n, (cold, _) in deploys.items():
        each = " + ".join(f"{c:.1f}" for c, _ in runs[n])
        print(f"deploy time, {n} host(s), cold         {cold:8.1f} s   (mean of {each})")
    if 1 in deploys and 8 in deploys:
        ratio = deploys[8][0] / deploys[1][0]
        print(f"8-host / 1-host deploy ratio           {ratio:8.2f}   (goal <= 1.5)")
        runs_of = "; ".join(f"{n} host(s): " + ", ".join(f"{c:.1f} s" for c, _ in runs[n]) for n in (1, 8))
        record(Figure("orchestration", "deploy: 8 hosts / 1 host, cold", ratio, "", 1.5, True, runs_of))
        record(Figure("orchestration", "deploy: no-op redeploy of 8 hosts", deploys[8][1], "s", 10.0, True))
    for label, overheads, phases in rows:
        if overheads:
            med = statistics.median(overheads)
            goal = 0.5 if label == "single" else 1.0
            print(f"per-cell overhead, {label:<18}  {med:8.2f} s median of {len(overheads)} "
                  f"(max {max(overheads):.2f}; goal <= {goal} s)")  # fmt: skip
            print("    phases (median s): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
            where = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
            record(Figure("orchestration", f"per-cell overhead, {label} (median)", med, "s", goal, True, where))
            # The controller's wall time must hold the payload's elapsed time: never a negative overhead.
            lowest = min(overheads)
            record(Figure("orchestration", f"cell wall - payload elapsed, {label} (min)", lowest, "s", 0.0, False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
