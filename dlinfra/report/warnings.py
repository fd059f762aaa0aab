"""Report warnings: everything that limits what the numbers can be trusted for.

Every renderer prints all of them (see docs/report.md); a row they concern
carries their codes in its ``flags`` column, so a copied row keeps its caveat.
Two of them *refuse* a comparison instead of qualifying it: payload hashes that
differ, and an emulated guest against a real one. Numbers across those are not
a virtualisation overhead, whatever they say.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from dlinfra.report.stats import CV_LIMIT_PCT, MIN_REPEATS

#: code -> one line of what it means (docs/report.md explains each).
CODES = {
    "payload-mismatch": "payload hashes differ between the layers compared: comparison refused",
    "emulated": "emulated guest (software CPU): its numbers are not a virtualisation overhead",
    "emulated-mismatch": "emulated against real hardware: comparison refused",
    "generated-data": "reads a generated JPEG data set (dlinfra), not ImageNet: the file reading and decoding "
    "are real, the pictures are not",
    "few-repeats": f"fewer than {MIN_REPEATS} successful repeats: the interval is unreliable",
    "high-cv": f"coefficient of variation above {CV_LIMIT_PCT:g}%: too noisy to conclude much",
    "no-variation": "every run gave the same value: a zero-width interval is no evidence, so no verdict",
    "failed-cells": "failed cells were left out",
    "contaminated": "runs with other programs on their CPUs (over the campaign's interference bound) were left out",
    "no-baseline": "no baseline run for this workload and config: no overhead",
    "no-metric": "no run of this workload recorded the metric",
    "cpu-model-differs": "the layers report different CPU models",
    "runtime-differs": "the layers ran different Python or TensorFlow builds: part of the difference is theirs",
    "seed-unmatched": "no run matches any published figure of the seed",
    "drift": "the metric trends over the repeats (Mann-Kendall, p < 0.05)",
    "expectation-failed": "an expectation of the spec does not hold: its interval is not inside the bound",
    "expectation-no-data": "an expectation of the spec could not be checked: insufficient data",
}
REFUSING = frozenset({"payload-mismatch", "emulated-mismatch"})


@dataclass(frozen=True)
class ReportWarning:
    """One caveat, with the rows it concerns (empty fields = the whole report)."""

    code: str
    message: str
    workload: str = ""
    config: str = ""
    layer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def where(self) -> str:
        parts = [p for p in (self.workload, self.config if self.config != "-" else "", self.layer) if p]
        return " / ".join(parts)

    def line(self) -> str:
        """One line for any text format."""
        where = f"[{self.where}] " if self.where else ""
        return f"{self.code}: {where}{self.message}"


def refusal_reasons(base: pd.DataFrame, other: pd.DataFrame) -> list[str]:
    """Why two layers' runs must not be compared at all (empty list = comparable)."""
    reasons = []
    base_hashes = set(",".join(base["payload_hashes"]).split(","))
    other_hashes = set(",".join(other["payload_hashes"]).split(","))
    if len(base_hashes | other_hashes) > 1:
        reasons.append("payload-mismatch")
    if base["emulated"].any() != other["emulated"].any() or (
        base["emulated"].nunique() > 1 or other["emulated"].nunique() > 1
    ):
        reasons.append("emulated-mismatch")
    return reasons


def dedupe(warnings: list[ReportWarning]) -> list[ReportWarning]:
    """Drop exact repeats, keep first-seen order (stable output for stable input)."""
    seen: set[ReportWarning] = set()
    out = []
    for w in warnings:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out
