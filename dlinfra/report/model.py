"""The report as data: what every renderer draws from, so formats cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dlinfra.report.stats import INTERVAL
from dlinfra.report.warnings import ReportWarning

#: view name -> title, in the order every format shows them.
VIEW_TITLES = {
    "overhead": "Overhead against the baseline",
    "expectations": "Expectations of the campaign spec",
    "scaling": "Scaling against 1 worker",
    "ps": "Effect of the parameter-server count",
    "shared": "Shared host: each layer next to a background job, against the same cell alone",
    "sync_async": "Sync vs async: time to accuracy",
    "run_times": "Best and worst total run times per layer",
    "system": "System view per role",
    "series": "Per-node CPU, memory and network over time",
    "step_times": "Step-time distribution",
    "seed": "Against the seed's published figures",
    "drift": "Drift across repeats",
    "compare": "Cell by cell: the second campaign against the first",
    "metadata": "Metadata that differs between the two campaigns",
}


@dataclass
class Report:
    """Everything one ``dlinfra report`` prints, in any format."""

    campaign_id: str
    campaign_name: str
    baseline: str
    metric: str
    unit: str
    higher_is_better: bool
    seed: int
    views: dict[str, pd.DataFrame]
    warnings: list[ReportWarning]
    notes: list[str] = field(default_factory=list)
    #: Raw per-step times for the HTML plots ("workload|config|layer" -> seconds); not serialised.
    step_samples: dict[str, list[float]] = field(default_factory=dict)
    #: How runs are summarised: "mean" (every run) or "trimmed" (fastest and slowest dropped, >= 3 runs).
    statistic: str = "mean"
    #: More top-level JSON fields (what ``dlinfra compare`` compared); the text formats ignore them.
    extra: dict[str, Any] = field(default_factory=dict)
    #: The +- band (percent) the campaign aimed its intervals at (``repeats.ci_pct``), drawn on the overhead
    #: plot; None when it set none. Not serialised.
    band_pct: float | None = None

    @property
    def title(self) -> str:
        return f"dlinfra report: campaign {self.campaign_id} ({self.campaign_name})"

    @property
    def subtitle(self) -> str:
        better = "higher" if self.higher_is_better else "lower"
        return (
            f"metric {self.metric} ({self.unit}, {better} is better); baseline {self.baseline}; overhead > 0 means "
            f"worse than {self.baseline}; {INTERVAL} over repeats; "
            f"{STATISTICS[self.statistic]}"
        )


#: --statistic -> what the header says about it.
STATISTICS = {
    "mean": "statistic mean: every run counts",
    "trimmed": "statistic trimmed: the fastest and slowest run of each layer dropped where it has >= 3 runs",
}
