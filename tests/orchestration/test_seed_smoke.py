"""Each seed campaign (campaigns/seed-00N.yml) end to end at smoke scale on the session testbed, through the real
CLI, and its ``--compare-seed`` report lists every figure of the study (a value or a dash).

Smoke scale is the file as is with ``--set`` only: 1 warm-up and 2 measured steps, one repeat, the bm layer
(the ctr layer would build the payload image on each host: minutes), each matrix cut to one or two cells, and
of several models of a kind one (``SMOKE`` says which). The deploy is a no-op after the session fixture's (it
still checks every host's payload hash and ships seed 002's data set). What the smoke runs can match, they must:
``VALUES`` names the figures that get a number from these cells.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pandas as pd
import pytest
from support import TESTBED, run_cli

from dlinfra.report.seeds import load_figures

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# No --skip-deploy: the deploy is a no-op after the session's (a second or two), and it ships seed 002's data set.
COMMON = ("--layer", "bm", "--set", "steps=2", "--set", "warmup_steps=1", "--set", "repeats=1")


def _ctr_only(*workloads: int) -> tuple[str, ...]:
    """Leave these workloads to the ctr layer, so ``--layer bm`` runs none of their cells: the smoke run keeps
    one model of a kind (building a model's graph costs 5-20 s on the testbed; 2 steps do not)."""
    return tuple(f"workloads.{i}.layers=[ctr]" for i in workloads)


#: Per seed: the --set overrides that cut the file to its cheapest cells (measured on a 2-core machine).
SMOKE: dict[str, tuple[str, ...]] = {
    # every workload: 4 sysbench tests and mnist-dnn single (the ps-async cells are ctr's already)
    "000": ("matrix.time=[1]", "workloads.3.matrix.file_total_size=[8M]"),
    # the kernels (one size each, the GRU), the all-reduce and one Fathom model (alexnet) of eight
    "001": (
        "workloads.0.matrix.size=[64x64x64]",
        "workloads.1.matrix={size: [56x56x64x8x64x3x3], stride: [1]}",
        "workloads.2.matrix.cell=[gru]",
        "workloads.11.matrix.size=['1000']",
        *_ctr_only(3, 4, 5, 6, 7, 8, 10),
    ),
    # alexnet single, distributed (1 worker) and the shared-resource pair; not resnet50 and inception3
    "002": ("workloads.3.matrix.workers=[1]", *_ctr_only(1, 2, 4, 5)),
    # single and ps-async with 1 ps x 1 worker (the efficiency figures need 4 and 8 workers: minutes)
    "003": ("workloads.0.matrix.batch_size=[100]", "workloads.1.matrix.ps=[1]", "workloads.1.matrix.workers=[1]"),
    # logreg single, async and sync with 2 workers; alexnet single and sync with 2 workers at batch 64
    "004": (
        "workloads.1.matrix.workers=[2]",
        "workloads.2.matrix.workers=[2]",
        *(f"workloads.{i}.matrix.{kv}" for i in (3, 4) for kv in ("batch_size=[64]", "steps=[2]", "warmup_steps=[1]")),
        "workloads.4.matrix.workers=[2]",
    ),
}
#: Figures these smoke cells produce. The others are listed with a dash: 000's and 001's need the ctr layer,
#: 002's ctr, vm and ctr-vm, 003's 4 and 8 workers or 2 ps.
VALUES: dict[str, set[str]] = {
    "000": set(),
    "001": set(),
    "002": set(),
    "003": set(),
    "004": {
        "s3.5.4-tta",  # the async and sync pair to 85% on the real MNIST sample, run as is (max 3000 steps)
        "t3-async-cluster-time",
        "t4-sync-cluster-time",
        "t3-async-cluster-mem",
        "t3-async-cluster-rx",
        "t3-async-cluster-tx",
        "t5-single-64",
        "t6-single-64-cpu",
        "t6-single-64-mem",
        "t6-cluster-64-cpu",
        "t6-cluster-64-mem",
    },
}


@pytest.mark.parametrize("seed", sorted(SMOKE))
def test_seed_campaign_at_smoke_scale(seed: str, deployed, tmp_path: Path) -> None:
    db, campaign_id = tmp_path / "smoke.db", f"seed-{seed}-smoke"
    overrides = [arg for given in SMOKE[seed] for arg in ("--set", given)]
    started = time.monotonic()
    run = run_cli(
        "--db", str(db), "run", f"campaigns/seed-{seed}.yml", "--inventory", f"testbed:{TESTBED}", *COMMON,
        *overrides, "--campaign-id", campaign_id, "--artifacts", str(tmp_path / "art"), timeout=600,
    )  # fmt: skip
    ran_s = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " 0 failed" in run.stdout, run.stdout[-2000:]
    report = run_cli(
        "--db", str(db), "report", "--campaign", campaign_id, "--metric", "elapsed", "--compare-seed", seed,
        "--format", "csv", "--view", "seed",
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    table = pd.read_csv(io.StringIO(report.stdout), comment="#", keep_default_na=False).set_index("figure")
    figures = [f"{seed}:{fig['id']}" for fig in load_figures()[seed]["figures"]]
    assert list(table.index) == figures, "every figure of the study, in its order"
    valued = table["campaign_value"] != ""
    assert {f.split(":", 1)[1] for f in table.index[valued]} >= VALUES[seed], table.loc[~valued, "matched"]
    print(f"seed {seed}: smoke run {ran_s:.0f} s, {int(valued.sum())} of {len(figures)} figures with a value")
