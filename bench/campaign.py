"""Whole-campaign figures on the local testbed (needs root): campaign efficiency and the warm ``make demo``.

Prints, and records for bench/figures.py's table:
  * campaign efficiency of ``campaigns/bm-vs-ctr.yml`` (the payloads' measured time over the campaign's wall
    time, first-time builds left out: the line ``dlinfra run`` prints at its end), on a fresh testbed and on
    a second run over the same testbed (host caches warm); goal >= 0.8;
  * ``scripts/demo.sh`` run twice; the second is the warm demo (every cache built); goal <= 180 s.

Why runs, not a model of them: the efficiency is lost in bring-up, deploy, image loads and tear-down, which
only a real campaign on real hosts shows; the same numbers a user reads at the end of ``dlinfra run``.

    sudo python bench/campaign.py                  # both
    sudo python bench/campaign.py --no-demo        # the efficiency only
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import Figure, record
from rich.console import Console

from dlinfra.orchestration.campaign import run_campaign
from dlinfra.orchestration.spec import preflight
from dlinfra.results.store import open_store
from dlinfra.testbed.local import LocalTestbed

REPO = Path(__file__).resolve().parent.parent
EFFICIENCY_GOAL = 0.8
WARM_DEMO_GOAL_S = 180.0


def bench_efficiency(spec: Path, testbed: str, work: Path) -> list[tuple[str, float, str]]:
    """Run ``spec`` twice on a fresh 3-host testbed: (label, efficiency, where the time went) per run."""
    tb = LocalTestbed(testbed)
    tb.down()
    rows = []
    try:
        tb.up(3)
        for label in ("fresh testbed", "second run"):
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
            rows.append((label, result.efficiency, where))
    finally:
        tb.down()
    return rows


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
        if proc.returncode != 0:
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
        if not args.no_demo:
            print("make demo's campaign (scripts/demo.sh), twice")
            times = bench_demo(work)
            if times:
                note = f"first run (caches as found) {times[0]:.0f} s"
                record(Figure("campaign", "demo, warm (second run)", times[1], "s", WARM_DEMO_GOAL_S, True, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
