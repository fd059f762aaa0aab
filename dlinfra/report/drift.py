"""Drift across repeats: does a layer's metric trend with the repeat index (a machine warming up, throttling,
filling its disk) rather than scatter around one value?

The test is Mann-Kendall's: Kendall's S between the repeat index and the run's value, with a two-sided
permutation p-value (exact over every order up to 8 runs, else 20,000 seeded random orders), so no
normality and no large-sample approximation is assumed. A group is flagged when p < 0.05. Fewer than
5 runs are not tested: with 4, even a perfectly monotone series has p = 1/12 and could never be flagged.

Repeats run in repeat order (repeat-major, or shuffled within each repeat), so the repeat index is the
time axis. Each group is tested on its own: over 20 groups about one false warning is expected by
chance, which is why this is a warning, not a verdict.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from dlinfra.report.stats import stable_seed
from dlinfra.report.warnings import ReportWarning

MIN_RUNS = 5
ALPHA = 0.05
EXACT_UP_TO = 8
N_PERM = 20_000
COLUMNS = ["workload", "config", "layer", "runs", "kendall_tau", "p_value", "trend"]


def _s(values: np.ndarray) -> np.ndarray:
    """Kendall's S of each row of ``values`` against its position: concordant minus discordant pairs."""
    i, j = np.triu_indices(values.shape[-1], k=1)
    return np.sign(values[..., j] - values[..., i]).sum(axis=-1)


def mann_kendall(values: list[float], seed: int) -> tuple[float, float]:
    """(tau, two-sided permutation p-value) of a trend of ``values`` over their order."""
    x = np.asarray(values, dtype=float)
    n = x.size
    s = float(_s(x))
    tau = s / (n * (n - 1) / 2)
    if n <= EXACT_UP_TO:
        perms = np.array(list(itertools.permutations(range(n))))
    else:
        rng = np.random.default_rng(seed)
        perms = np.argsort(rng.random((N_PERM, n)), axis=1)
    null = _s(x[perms])
    p = float((np.abs(null) >= abs(s) - 1e-9).mean())
    return tau, p


def drift_view(values: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, list[ReportWarning]]:
    """Per workload x config x layer with >= MIN_RUNS successful runs: Kendall's tau over repeats, p, trend."""
    good = values[values["ok"] & values["value"].notna()]
    rows, warnings = [], []
    for (workload, config, layer), group in good.groupby(["workload", "config_label", "layer"], sort=True):
        if len(group) < MIN_RUNS:
            continue
        ordered = group.sort_values("repeat", kind="stable")["value"].tolist()
        tau, p = mann_kendall(ordered, stable_seed(seed, "drift", workload, config, layer))
        trend = ("rising" if tau > 0 else "falling") if p < ALPHA else "none"
        rows.append(
            {
                "workload": workload,
                "config": config,
                "layer": layer,
                "runs": len(group),
                "kendall_tau": tau,
                "p_value": p,
                "trend": trend,
            }
        )
        if trend != "none":
            warnings.append(
                ReportWarning(
                    "drift",
                    f"the metric is {trend} over the repeats (Kendall tau {tau:.2f}, p {p:.3f} < {ALPHA:g}): "
                    "something changed during the campaign; consider order: shuffled and more repeats",
                    workload,
                    config,
                    layer,
                )
            )
    return pd.DataFrame(rows, columns=COLUMNS), warnings
