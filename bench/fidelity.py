"""Can dlinfra tell a 3% overhead from noise? bm against ctr on one pinned CPU of a local testbed, with known truths.

In one run on one machine (needs root: a testbed, dockerd, the shield), each a real campaign on bm and on ctr
(Docker), interleaved repeat by repeat. First ``sysbench-cpu`` cells:

- A/A: the container without limits (truth: about 0);
- an injected 3% (the container's CPU quota at 0.97) and an injected 10% (0.90), quiet;
- the same beside a noisy neighbour the bench starts itself (one unpinned busy process per CPU), with the
  campaign's ``shield: true`` and without it.

The sysbench 3% case runs 10 blocks of repeats of one campaign; the report's interval of each block must hold the
true 3% at least 9 times in 10.

Then the TensorFlow payload itself (``mnist-dnn``, and ``cifar10-cnn``, a convolutional model small enough for 2
cores), each case its own campaign sized by the noise (``repeats: {min, max, ci_pct}``, the report's interval at its
sequential level):

- the truth of each quota, measured, not assumed: a longer campaign of bm against ctr at the quota, and one of bm
  against ctr unlimited (the quota's own effect on TensorFlow, both containers, is printed beside it);
- A/A, 3% and 10%, quiet; 3% beside the neighbour, shielded;
- the 3% calibration: N **independent** campaigns (each its own bring-up, container and processes), the coverage of
  the truth by their 95% intervals printed with its Wilson interval.

Goals, printed beside each figure and recorded for ``make bench``'s table (bench/figures.py):

- sysbench: the 95% CI is calibrated (>= 9 of 10 blocks hold 3%); A/A "no difference"; 3% found as 3 +- 1 with
  the CI excluding 0; 10% as 10 +- 1.5; the same beside the neighbour with the shield; without it, every
  contaminated run flagged, none averaged in;
- TensorFlow: 3% found within the measured truth +- 1.5 with the CI excluding 0, in at most 20 minutes of campaign;
  the CI holds the truth in at least 9 of 10 independent campaigns; A/A "no difference"; where a campaign could not
  reach its ``ci_pct`` by ``max``, it said so before its end (the forecast);
- the whole bench within 20 minutes (sysbench) plus the TensorFlow part's own time, printed.

    sudo python bench/fidelity.py [--blocks 10] [--repeats 5] [--time 1]

Sizes of the TensorFlow part, by environment variable (a small run: ``FIDELITY_TF_CAMPAIGNS=2
FIDELITY_TF_MIN=3 FIDELITY_TF_MAX=3 FIDELITY_TF_STEPS=300 FIDELITY_TF_WORKLOADS=mnist-dnn``):
``FIDELITY_TF_CAMPAIGNS`` (independent 3% campaigns, 10), ``FIDELITY_TF_MIN``/``FIDELITY_TF_MAX``/
``FIDELITY_TF_CI`` (the repeat rule, 6/20/1.5), ``FIDELITY_TF_STEPS`` (mnist-dnn steps, 3000; cifar10-cnn takes a
tenth), ``FIDELITY_TF_WORKLOADS`` (mnist-dnn,cifar10-cnn); ``FIDELITY_TF=0`` skips the TensorFlow part,
``FIDELITY_SYSBENCH=0`` the sysbench part.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from figures import Figure, record

from dlinfra.report import stats
from dlinfra.report.frame import METRICS, interval_options, leave_out_contaminated, load_runs, run_values, sequential
from dlinfra.results.store import CONTAMINATED, open_store
from dlinfra.testbed.local import LocalTestbed

REPO = Path(__file__).resolve().parent.parent
BENCH = "fidelity"
WHOLE_GOAL_S = 20 * 60.0
#: The neighbour: always busy. (At 50% duty, two of them ended up sharing the other CPU of a 2-CPU machine, and the
#: payload's CPU saw too little of them to flag: 0 attempts flagged in two runs of this bench.)
HOG = "while True:\n    pass\n"


@contextlib.contextmanager
def neighbour() -> Iterator[None]:
    """Another user's job on a shared host: one unpinned busy process per CPU of the machine, so that the scheduler
    puts one on the payload's CPU too, unless a shield keeps them off it."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def pinned_inventory(testbed_inventory: Path, work: Path) -> tuple[Path, str]:
    """The testbed's first host, pinned to the machine's last CPU: the payload's, the one a shield keeps for it."""
    inventory = yaml.safe_load(testbed_inventory.read_text())
    (group,) = inventory["all"]["children"].values()
    name = next(iter(group["hosts"]))
    cpu = str(max(int(c) for c in str(group["hosts"][name]["dlinfra_cpus"]).replace("-", ",").split(",")))
    group["hosts"] = {name: {**group["hosts"][name], "dlinfra_cpus": cpu}}
    path = work / "pinned.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path, name


def _run_spec(work: Path, name: str, spec: dict[str, Any]) -> tuple[str, str, float]:
    """Run one campaign spec (its own bring-up and tear-down); returns its id, what it printed and its wall time."""
    path = work / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec))
    cid = f"{name}-bench"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dlinfra", "--db", str(work / "fidelity.db"), "run", str(path), "--campaign-id", cid,
         "--artifacts", str(work / "artifacts" / name)],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "DLINFRA_MAX_FOREIGN_SHARE": "0.10"}, check=False,
    )  # fmt: skip
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{name}: dlinfra run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return cid, proc.stdout + proc.stderr, time.monotonic() - started


def _ctr(name: str, quota: float | None) -> dict[str, Any]:
    ctr: dict[str, Any] = {"provider": "docker", "network": "host", "run_id": f"fid{name[:8]}"}
    if quota is not None:
        ctr["cpus"] = quota
    return ctr


def campaign(work: Path, inventory: Path, host: str, name: str, quota: float | None, repeats: int, seconds: int,
             shield: bool) -> str:  # fmt: skip
    """Run one bm-vs-ctr campaign of sysbench-cpu cells; returns its id."""
    spec = {
        "name": name, "inventory": str(inventory), "layers": ["bm", "ctr"], "repeats": repeats, "cell_timeout": 120,
        "order": "shuffled", "layer_options": {"ctr": _ctr(name, quota)},
        "interference": {"max_foreign_share": 0.10, "reruns": 1}, "shield": shield,
        "workloads": [{"name": "sysbench-cpu", "hosts": [host], "matrix": {"time": [seconds]}}],
    }  # fmt: skip
    return _run_spec(work, name, spec)[0]


@dataclass(frozen=True)
class TfCase:
    """How the TensorFlow campaigns are sized (environment variables: the module's docstring)."""

    workload: str
    steps: int
    repeats: dict[str, float]
    campaigns: int

    @property
    def batch(self) -> int:
        return 32 if self.workload == "cifar10-cnn" else 64


def tf_sizes() -> list[TfCase]:
    """The TensorFlow cases the environment asks for."""
    steps = int(os.environ.get("FIDELITY_TF_STEPS", "3000"))
    low, high = int(os.environ.get("FIDELITY_TF_MIN", "6")), int(os.environ.get("FIDELITY_TF_MAX", "20"))
    rule = {"min": low, "max": max(low, high), "ci_pct": float(os.environ.get("FIDELITY_TF_CI", "1.5"))}
    campaigns = int(os.environ.get("FIDELITY_TF_CAMPAIGNS", "10"))
    names = [w.strip() for w in os.environ.get("FIDELITY_TF_WORKLOADS", "mnist-dnn,cifar10-cnn").split(",") if w]
    return [TfCase(w, steps if w == "mnist-dnn" else max(20, steps // 10), rule, campaigns) for w in names]


def tf_campaign(work: Path, inventory: Path, host: str, name: str, case: TfCase, quota: float | None,
                shield: bool = False, scale: int = 1) -> tuple[str, str, float]:  # fmt: skip
    """One bm-vs-ctr campaign of ``case``'s workload, sized by its noise (``scale`` x the repeats: a truth)."""
    rule = {k: (int(v) * scale if k != "ci_pct" else v) for k, v in case.repeats.items()}
    spec = {
        "name": name, "inventory": str(inventory), "layers": ["bm", "ctr"], "repeats": rule,
        "warmup_steps": 20, "steps": case.steps, "cell_timeout": 900, "order": "shuffled",
        "layer_options": {"ctr": _ctr(name, quota)}, "interference": {"max_foreign_share": 0.10, "reruns": 1},
        "shield": shield,
        "workloads": [{"name": case.workload, "hosts": [host],
                       "matrix": {"mode": ["single"], "batch_size": [case.batch], "data": ["synthetic"]}}],
    }  # fmt: skip
    return _run_spec(work, name, spec)


def overhead(work: Path, cid: str, repeats: range | None = None) -> tuple[float, float, float, int, int]:
    """(point, low, high) overhead of ctr against bm (throughput: events/s or examples/s), as the report computes it
    (at its sequential level for a campaign sized by its noise), the clean runs used, and the contaminated runs
    left out; ``repeats`` takes one block of the repeats only."""
    with open_store(str(work / "fidelity.db")) as store:
        runs, left_out, _ = leave_out_contaminated(load_runs(store, cid))
        rule = store.campaign_spec(cid).get("repeats")
    values = sequential(run_values(runs, METRICS["throughput"]), rule)
    if repeats is not None:
        values = values[values["repeat"].isin(list(repeats))]
    ok = values[values["ok"] & values["value"].notna()]
    bm, ctr = ok[ok["layer"] == "bm"], ok[ok["layer"] == "ctr"]
    point, low, high = stats.overhead_ci(
        bm["value"].to_numpy(), ctr["value"].to_numpy(), True, **interval_options(bm, ctr)
    )
    return point, low, high, len(ok), left_out


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95%): what ``hits`` of ``n`` says of the coverage."""
    if n == 0:
        return (math.nan, math.nan)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def flagged_attempts(work: Path, cid: str) -> int:
    with open_store(str(work / "fidelity.db")) as store:
        return sum(c["status"] == CONTAMINATED for c in store.cells(cid, all_attempts=True))


def show(name: str, value: float, unit: str, goal: float, at_most: bool, note: str = "") -> None:
    figure = Figure(BENCH, name, value, unit, goal, at_most, note)
    record(figure)
    print(f"  {name}: {value:.2f} {unit} (goal {'<=' if at_most else '>='} {goal:g}) "
          f"{'met' if figure.met else 'NOT MET'}{'; ' + note if note else ''}")  # fmt: skip


def found_as(label: str, truth: float, tolerance: float, result: tuple[float, float, float, int, int]) -> None:
    point, low, high, n, left_out = result
    note = f"{point:+.2f}% CI {low:+.2f}..{high:+.2f} over {n} runs ({left_out} contaminated left out)"
    show(f"{label}: |found - {truth:g}%|", abs(point - truth), "points", tolerance, True, note)
    if truth:
        show(f"{label}: CI excludes 0 (1 = yes)", float(low > 0), "", 1, False)


def sysbench_part(work: Path, inventory: Path, host: str, args: argparse.Namespace) -> None:
    """The sysbench-cpu cases: A/A, 3% (calibrated over blocks of one campaign), 10%, beside the neighbour."""
    r, s = args.repeats, args.time
    print(f"fidelity: bm against ctr, sysbench-cpu {s} s cells on {host}'s pinned CPU")
    aa = campaign(work, inventory, host, "aa", None, r, s, False)
    point, low, high, n, _ = overhead(work, aa)
    verdict = stats.verdict(low, high)
    show("A/A: verdict is 'no difference' (1 = yes)", float(verdict == stats.SAME), "", 1, False,
         f"{point:+.2f}% CI {low:+.2f}..{high:+.2f} over {n} runs")  # fmt: skip
    calib = campaign(work, inventory, host, "three", 0.97, r * args.blocks, s, False)
    hits = []
    for b in range(args.blocks):
        _, low, high, _, _ = overhead(work, calib, range(b * r, (b + 1) * r))
        hits.append(low <= 3 <= high)
    show(f"3%: CI holds the true 3% ({args.blocks} blocks of {r})", float(np.mean(hits)) * 10, "/10", 9,
         False, stats.INTERVAL)  # fmt: skip
    found_as("3% quiet", 3, 1, overhead(work, calib))
    found_as("10% quiet", 10, 1.5, overhead(work, campaign(work, inventory, host, "ten", 0.90, r, s, False)))
    with neighbour():
        shielded3 = campaign(work, inventory, host, "threeshield", 0.97, r, s, True)
        shielded10 = campaign(work, inventory, host, "tenshield", 0.90, r, s, True)
        open3 = campaign(work, inventory, host, "threeopen", 0.97, r, s, False)
    found_as("3% beside a neighbour, shielded", 3, 1, overhead(work, shielded3))
    found_as("10% beside a neighbour, shielded", 10, 1.5, overhead(work, shielded10))
    flagged = flagged_attempts(work, open3)
    point, low, high, n, _ = overhead(work, open3)
    kept = (f"what was kept: {point:+.2f}% CI {low:+.2f}..{high:+.2f} over {n} runs" if n
            else "no clean run was left to average")  # fmt: skip
    show("3% beside a neighbour, unshielded: contaminated attempts flagged", float(flagged), "", 1, False,
         f"{flagged} attempt(s) flagged and left out of the figure; {kept}")  # fmt: skip


def forecast_said(output: str, result: tuple[float, float, float, int, int], ci_pct: float) -> None:
    """Where a campaign ended wider than its ``ci_pct``, whether it said so before its end (the forecast)."""
    _, low, high, _, _ = result
    if math.isnan(low) or (high - low) / 2 <= ci_pct:
        return
    said = "past max" in output
    line = next((x.strip() for x in output.splitlines() if "past max" in x), "no forecast was printed")
    show("  too noisy for ci_pct: said before its end (1 = yes)", float(said), "", 1, False, line[:300])


def tf_truth(work: Path, inventory: Path, host: str, case: TfCase, quota: float, unlimited: float) -> float:
    """The truth of a quota on ``case``'s workload, measured: a campaign of twice the repeats, bm against ctr at the
    quota; beside it, the quota's own effect against ctr unlimited (both containers, each against its bm)."""
    tag = f"{case.workload[:5]}{round((1 - quota) * 100)}"
    cid, _, _ = tf_campaign(work, inventory, host, f"truth{tag}", case, quota, scale=2)
    point, low, high, n, _ = overhead(work, cid)
    effect = 1 - (1 - point / 100) / (1 - unlimited / 100)
    print(f"  truth of the quota {quota:g} on {case.workload}: {point:+.2f}% (CI {low:+.2f}..{high:+.2f}, {n} runs); "
          f"against ctr unlimited ({unlimited:+.2f}%): the quota's own effect {effect * 100:+.2f}%")  # fmt: skip
    return point


def tf_part(work: Path, inventory: Path, host: str, case: TfCase) -> None:
    """One TensorFlow workload's cases: truths, A/A, 3% and 10%, 3% shielded beside the neighbour, calibration."""
    w, ci = case.workload, float(case.repeats["ci_pct"])
    print(f"fidelity: bm against ctr, {w} {case.steps} steps, repeats {case.repeats}, on {host}'s pinned CPU")
    aa, out, wall = tf_campaign(work, inventory, host, f"aa{w[:5]}", case, None, scale=2)
    point, low, high, n, _ = result = overhead(work, aa)
    show(f"{w} A/A: verdict is 'no difference' (1 = yes)", float(stats.verdict(low, high) == stats.SAME), "", 1,
         False, f"{point:+.2f}% CI {low:+.2f}..{high:+.2f} over {n} runs in {wall / 60:.1f} min")  # fmt: skip
    forecast_said(out, result, ci)
    truth3 = tf_truth(work, inventory, host, case, 0.97, point)
    truth10 = tf_truth(work, inventory, host, case, 0.90, point)
    cid, out, wall = tf_campaign(work, inventory, host, f"three{w[:5]}", case, 0.97)
    found_as(f"{w} 3% quiet (truth {truth3:+.2f})", truth3, 1.5, result := overhead(work, cid))
    show(f"{w} 3% quiet: campaign time", wall / 60, "min", 20, True)
    forecast_said(out, result, ci)
    cid, out, _ = tf_campaign(work, inventory, host, f"ten{w[:5]}", case, 0.90)
    found_as(f"{w} 10% quiet (truth {truth10:+.2f})", truth10, 1.5, result := overhead(work, cid))
    forecast_said(out, result, ci)
    with neighbour():
        cid, out, _ = tf_campaign(work, inventory, host, f"shield{w[:5]}", case, 0.97, shield=True)
    found_as(f"{w} 3% beside a neighbour, shielded", truth3, 1.5, result := overhead(work, cid))
    hits = 0
    for i in range(case.campaigns):  # each its own bring-up: container, processes, everything
        cid, _, _ = tf_campaign(work, inventory, host, f"cal{i}{w[:5]}", case, 0.97)
        _, low, high, _, _ = overhead(work, cid)
        hits += low <= truth3 <= high
    lo, hi = wilson(hits, case.campaigns)
    show(f"{w} 3%: CI holds the truth ({case.campaigns} independent campaigns)", hits / max(1, case.campaigns),
         "", 0.9, False, f"{hits} of {case.campaigns}; coverage 95% Wilson interval {lo:.2f}..{hi:.2f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=10, help="3%% blocks for the calibration (default 10)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per block and per other case (default 5)")
    parser.add_argument("--time", type=int, default=1, help="seconds of each sysbench cell (default 1)")
    parser.add_argument("--testbed", default="dlbenchfid")
    args = parser.parse_args()
    started = time.monotonic()
    tb = LocalTestbed(args.testbed)
    tb.down()
    with tempfile.TemporaryDirectory(prefix="dlinfra-bench-fidelity-") as tmp:
        work = Path(tmp)
        try:
            state = tb.up(1)
            inventory, host = pinned_inventory(Path(state.inventory), work)
            if os.environ.get("FIDELITY_SYSBENCH", "1") != "0":
                sysbench_part(work, inventory, host, args)
                show("the sysbench part", (time.monotonic() - started) / 60, "min", WHOLE_GOAL_S / 60, True)
            tf_started = time.monotonic()
            for case in tf_sizes() if os.environ.get("FIDELITY_TF", "1") != "0" else []:
                tf_part(work, inventory, host, case)
            print(f"  the TensorFlow part: {(time.monotonic() - tf_started) / 60:.1f} min")
        finally:
            tb.down()
    print(f"  the whole bench: {(time.monotonic() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
