"""Whether a cell's measurement was contaminated: others' CPU time on the payload's CPUs, judged per cell.

Each process's record carries what the kernel counted on its CPUs (:class:`dlinfra.record.Interference`); the
cell's other processes on the same kernel (another role, a testbed's other host on one machine) are part of
that, and are not interference: they are the experiment (:func:`dlinfra.record.foreign_cpu_s` takes them out).
This module gives the cell its foreign share (others' CPU time, steal included, over what the payload's CPUs
could give, in the window of the measured work) and judges it against the campaign's ``interference`` policy; a
thermal throttle event in the window contaminates the run too. CPU pressure (PSI) is said in the detail line but
judges nothing: a container's own quota and the payload's own threads stall there as much as a neighbour does.
The campaign stores a contaminated attempt as such and runs the cell again, within the policy's bound; the report
leaves contaminated runs out and counts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlinfra.payload.cpuset import format_cpuset
from dlinfra.record import Interference, RunRecord, foreign_cpu_s, foreign_shares

#: The default share of the payload's CPU capacity that others may take before a run counts as contaminated.
DEFAULT_MAX_FOREIGN_SHARE = 0.10
#: The environment variable that sets this controller's default of ``max_foreign_share`` (a spec's value wins).
MAX_FOREIGN_SHARE_ENV = "DLINFRA_MAX_FOREIGN_SHARE"
#: The default number of extra attempts of a contaminated cell.
DEFAULT_RERUNS = 2


@dataclass(frozen=True)
class InterferencePolicy:
    """The spec's ``interference:`` mapping."""

    #: Others' share of the payload CPUs' capacity above which a run is contaminated (0..1).
    max_foreign_share: float = DEFAULT_MAX_FOREIGN_SHARE
    #: Extra attempts of a contaminated cell (0: flag only).
    reruns: int = DEFAULT_RERUNS


@dataclass(frozen=True)
class Verdict:
    """One cell attempt's interference, judged."""

    #: The largest foreign share of the cell's processes (others plus steal, over capacity); None: not measured.
    foreign_share: float | None
    #: The largest steal share (a guest's vCPUs waiting for the host) of the cell's processes.
    steal_share: float | None
    contaminated: bool
    #: One line for the console and the store: who took how much of which CPUs.
    detail: str = ""


def _describe(interference: Interference, foreign_s: float, share: float) -> str:
    steal = f", steal {interference.steal_s:.1f} s" if interference.steal_s > 0 else ""
    who = ", ".join(f"{p.name} {p.cpu_s:.1f} s" for p in interference.top_others)
    return (
        f"others used {share:.0%} of CPU(s) {format_cpuset(interference.cpus)} "
        f"({foreign_s:.1f} of {interference.capacity_s:.1f} CPU-s{steal})"
        + (f"; busiest: {who}" if who else "")
        + _evidence(interference)
    )


def _evidence(interference: Interference) -> str:
    """What else the kernel saw in the window: CPU pressure (PSI) and thermal throttling, where there was some."""
    found = ""
    if interference.psi_some_s and interference.wall_s > 0:
        found += f"; CPU pressure ({interference.psi_source}) {interference.psi_some_s / interference.wall_s:.0%}"
    if interference.throttle_events:
        found += f"; {interference.throttle_events} thermal throttle event(s)"
    return found


def throttled(records: list[RunRecord]) -> bool:
    """Whether the CPUs of a process were thermally throttled while it measured: their speed was cut by heat,
    not by the layer, so the run is contaminated whatever others used."""
    return any((r.metrics.interference.throttle_events or 0) > 0 for r in records if r.metrics.interference)


def assess(records: list[RunRecord], policy: InterferencePolicy, deliberate: bool = False) -> Verdict:
    """The cell attempt's verdict: contaminated when a process's foreign share is over the policy's bound.

    ``deliberate``: the cell runs beside its campaign's background job (``scenario: shared``): the load is the
    experiment, so the shares are kept and nothing is flagged.
    """
    worst: tuple[float, RunRecord] | None = None
    steal_worst = 0.0
    for record in records:
        shares = foreign_shares(record, records)
        if shares is None:
            continue
        steal_worst = max(steal_worst, shares[1])
        if worst is None or shares[0] > worst[0]:
            worst = (shares[0], record)
    if worst is None:
        return Verdict(None, None, False)
    share, record = worst
    interference = record.metrics.interference
    assert interference is not None  # foreign_shares gave a figure
    hot = throttled(records)
    detail = _describe(interference, foreign_cpu_s(record, records) or 0.0, share)
    if hot and "throttle" not in detail:
        detail += "; a cell process's CPUs were thermally throttled"
    return Verdict(
        foreign_share=round(share, 4),
        steal_share=round(steal_worst, 4),
        contaminated=not deliberate and (share > policy.max_foreign_share or hot),
        detail=detail,
    )
