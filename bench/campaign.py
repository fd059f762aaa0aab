"""Whole-campaign figures on the local testbed (needs root): campaign efficiency and the warm ``make demo``.

Prints, and records for bench/figures.py's table:
  * campaign efficiency of ``campaigns/bm-vs-ctr.yml`` (the payloads' measured time over the campaign's wall
    time, first-time builds left out: the line ``dlinfra run`` prints at its end), on a fresh testbed and on
    a second run over the same testbed (host caches warm); goal >= 0.8;
  * ``scripts/demo.sh`` run twice; the second is the warm demo (every cache built); goal <= 180 s;
  * from the stores of all three, the per-cell overhead (wall time less the payload's elapsed time) of each
    layer and kind they ran: bm and ctr single cells (14 each) in bm-vs-ctr; bm and ctr single and
    distributed (3 each) in ``bench/cell-overhead.yml``, on a fresh testbed; and the demo's one cell of each
    of bm, ctr, vm single and bm distributed; goals <= 0.5 s single, <= 1 s distributed.

Why runs, not a model of them: the efficiency is lost in bring-up, deploy, image loads and tear-down, which
only a real campaign on real hosts shows; the same numbers a user reads at the end of ``dlinfra run``.

    sudo python bench/campaign.py                  # all
    sudo python bench/campaign.py --no-demo        # the efficiency and the per-layer overheads
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path

from figures import Figure, record
from rich.console import Console

from dlinfra.orchestration.campaign import run_campaign
from dlinfra.orchestration.plan import preflight
from dlinfra.results.store import open_store
from dlinfra.testbed.local import LocalTestbed

REPO = Path(__file__).resolve().parent.parent
EFFICIENCY_GOAL = 0.8
WARM_DEMO_GOAL_S = 180.0
#: The issue's per-cell overhead goals (as bench/orchestration.py's, which measures bm only).
OVERHEAD_GOALS_S = {"single": 0.5, "distributed": 1.0}


def bench_efficiency(
    spec: Path, testbed: str, work: Path, labels: tuple[str, ...] = ("fresh testbed", "second run")
) -> list[tuple[str, float, str]]:
    """Run ``spec`` once per label on a fresh 3-host testbed: (label, efficiency, where the time went) per run."""
    tb = LocalTestbed(testbed)
    tb.down()
    rows = []
    try:
        tb.up(3)
        for label in labels:
            checked = preflight(spec, inventory=f"testbed:{testbed}")
            with open_store(str(work / "bench.db")) as store:
                result = run_campaign(checked, store, artifacts=work / "artifacts", console=Console(stderr=True))
            if result.efficiency is None or result.failed:
                print(f"  {label}: {len(result.failed)} failed cell(s); no efficiency", file=sys.stderr)
                continue
            where = (
                f"payloads {result.payload_s:.0f} s of {result.wall_s - result.build_s:.0f} s "
                f"(builds {result.build_s:.0f} s left out; deploy {result.deploy_s:.1f} s)"
            )
            print(f"  {label}: efficiency {result.efficiency:.2f}: {where}")
            for layer in dict.fromkeys(c.cell.layer for c in result.ran):  # where each layer's cell overhead goes
                runs = [c.run for c in result.ran if c.cell.layer == layer]
                phases = {k: statistics.median(r.phases.get(k, 0.0) for r in runs) for k in runs[0].phases}
                print(f"    {layer} cells, median s: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
            rows.append((label, result.efficiency, where))
    finally:
        tb.down()
    return rows


def cell_overheads(db: Path) -> dict[tuple[str, str], list[float]]:
    """Per layer and kind (single, distributed): each stored ok cell's wall time less its payload's elapsed
    time (its longest process), read back from the campaign's store as ``dlinfra report`` would. A layer whose
    runs were emulated (a guest under QEMU TCG) is named so: its figure says nothing of real hardware."""
    with open_store(str(db)) as store:
        cells = {(c["campaign_id"], c["cell_hash"], c["repeat"]): c for c in store.cells() if c["status"] == "ok"}
        elapsed: dict[tuple[str, str, int], float] = {}
        emulated: set[tuple[str, str, int]] = set()
        for run in store.runs():
            key = (run["campaign_id"], run["cell_hash"], run["repeat"])
            record = json.loads(run["record_json"])
            value = record["metrics"].get("elapsed_s")
            if key in cells and value is not None:
                elapsed[key] = max(elapsed.get(key, 0.0), float(value))
            if record["provenance"].get("emulated"):
                emulated.add(key)
    found: dict[tuple[str, str], list[float]] = {}
    for key, cell in cells.items():
        if key in elapsed:
            wall = (
                datetime.fromisoformat(cell["ended_utc"]) - datetime.fromisoformat(cell["started_utc"])
            ).total_seconds()
            kind = "single" if cell["config"].get("mode", "single") == "single" else "distributed"
            layer = f"{cell['layer']} (emulated guest)" if key in emulated else cell["layer"]
            found.setdefault((layer, kind), []).append(wall - elapsed[key])
    return found


def record_overheads(db: Path, source: str) -> None:
    """Print and record the median per-cell overhead of each layer and kind the campaigns in ``db`` ran."""
    for (layer, kind), values in sorted(cell_overheads(db).items()):
        name = f"per-cell overhead, {layer} {kind} ({source}, median)"
        where = f"{len(values)} cells, {min(values):.2f} .. {max(values):.2f} s"
        print(f"  {name}: {statistics.median(values):.2f} s ({where})")
        record(Figure("campaign", name, statistics.median(values), "s", OVERHEAD_GOALS_S[kind], True, where))


def bench_demo(work: Path) -> list[float]:
    """Wall seconds of two ``scripts/demo.sh`` runs (the first fills every cache), each with its own store."""
    times = []
    for i in range(2):
        env = {**os.environ, "DLINFRA_DB": str(work / f"demo-{i}.db"), "DLINFRA_DEMO_REPORT": str(work / f"{i}.html")}
        started = time.monotonic()
        proc = subprocess.run(["scripts/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
        times.append(time.monotonic() - started)
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"  demo run {i + 1}: {times[-1]:.0f} s, exit {proc.returncode}: {last}")
        if proc.returncode != 0:  # what it said before its last line names the cause
            print(textwrap.indent("\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:]), "    "))
            return []
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=REPO / "campaigns/bm-vs-ctr.yml")
    parser.add_argument("--testbed", default="dlbenchcamp", help="the local testbed to bring up (default dlbenchcamp)")
    parser.add_argument("--no-demo", action="store_true", help="skip the two demo runs (about 10 min)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlinfra-bench-campaign-") as tmp:
        work = Path(tmp)
        print(f"campaign efficiency: {args.spec.name}, twice on a fresh testbed")
        for label, efficiency, where in bench_efficiency(args.spec, args.testbed, work):
            name = f"campaign efficiency, {args.spec.stem} ({label})"
            record(Figure("campaign", name, efficiency, "", EFFICIENCY_GOAL, False, where))
        record_overheads(work / "bench.db", args.spec.stem)
        print("per-cell overhead of single and distributed cells on bm and ctr: bench/cell-overhead.yml")
        layers_work = work / "cell-overhead"
        layers_work.mkdir()
        bench_efficiency(REPO / "bench/cell-overhead.yml", args.testbed, layers_work, ("fresh testbed",))
        record_overheads(layers_work / "bench.db", "cell-overhead")
        if not args.no_demo:
            print("make demo's campaign (scripts/demo.sh), twice")
            times = bench_demo(work)
            if times:
                note = f"first run (caches as found) {times[0]:.0f} s"
                record(Figure("campaign", "demo, warm (second run)", times[1], "s", WARM_DEMO_GOAL_S, True, note))
                record_overheads(work / "demo-1.db", "demo, warm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
