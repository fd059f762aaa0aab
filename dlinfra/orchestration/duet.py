"""Duet scheduling (``schedule: duet``): a config's baseline cell and its other layer's cell at the same time.

Why: on a shared machine the CPU's speed drifts within and between runs (another tenant of the physical host, an
SMT sibling) and no counter inside it shows it. Two runs measured at the same time, one per half of the host's
CPUs, see the same drift; the ratio of the pair cancels it (Bulej et al., "Duet Benchmarking", ICPE 2020). On a
2-vCPU cloud machine, 10 mnist-dnn pairs correlated at 0.72 and the paired log-ratio's variance was 2.6x lower
than the same runs' one after the other.

How: the cells of one config on one host (bm and ctr, the same workload and parameters) form a duet; the CPUs
their targets share are split in halves, each side's processes pinned to its half (the payload's ``--cpus``),
and the halves are swapped every repeat (rotated, with more sides), so that neither layer always gets the same
CPUs. Both sides are prepared, then started together (a barrier); each side's measured window is read back from
its record, and the pair's overlap is stored with its pair id (a pair whose windows do not overlap is said, and
the report leaves it out of the pairs). What it assumes: both sides see the same outside interference, and each
loads the other symmetrically (the swaps average out which half is the better one). Where a duet cannot apply
(no partner, too few CPUs, a target that did not come up), those cells run one at a time, and one line says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from dlinfra.layers import BASELINE
from dlinfra.orchestration.cells import Cell, Process, plan
from dlinfra.orchestration.interference import InterferencePolicy, Verdict, assess
from dlinfra.orchestration.launch import CellRun, Launcher
from dlinfra.payload.cpuset import format_cpuset, split_cpuset
from dlinfra.record import RunRecord, config_hash
from dlinfra.runtime.progress import phase, say
from dlinfra.target import Target

#: Phases of a run in the order they happen (a record's ``phases_s`` is stored with its keys sorted).
PHASE_ORDER = ("start", "import", "build", "warmup", "measure", "evaluate", "finish")
#: Config keys that differ between the sides of a duet: everything else is the same config.
SIDE_KEYS = ("layer", "provider")


@dataclass
class Duet:
    """The cells of one config x repeat that run together, the baseline's first, and each one's CPUs."""

    key: str
    repeat: int
    members: list[Cell]
    cpus: list[list[int]]

    def pair_id(self, attempt: int) -> str:
        return f"{self.key[:12]}-r{self.repeat}-{attempt}"

    def label(self) -> str:
        first = self.members[0]
        on = zip(self.members, self.cpus, strict=True)
        sides = ", ".join(f"{c.layer} on CPU {format_cpuset(cpus)}" for c, cpus in on)
        where = first.config.get("host", "")
        return f"duet {first.workload}/{first.mode} {where} #{self.repeat} ({sides})"


def duet_key(cell: Cell) -> str:
    """What the sides of a duet share: the cell's config without its layer and provider."""
    return config_hash({k: v for k, v in cell.config.items() if k not in SIDE_KEYS})


def plan_duets(
    todo: list[tuple[Cell, int]], unusable: dict[str, str], by_name: dict[str, Target]
) -> dict[tuple[str, int], Duet]:
    """The duet of each (cell hash, repeat) of ``todo`` that runs in one; the others run one at a time, and one
    line per reason says which and why."""
    groups: dict[tuple[str, int], list[Cell]] = {}
    for cell, repeat in todo:
        groups.setdefault((duet_key(cell), repeat), []).append(cell)
    duets: dict[tuple[str, int], Duet] = {}
    alone: dict[str, set[str]] = {}
    for (key, repeat), cells in groups.items():
        cells.sort(key=lambda c: (c.layer != BASELINE, c.layer))
        shared, why = _shared_cpus(cells, unusable, by_name)
        if why:
            alone.setdefault(why, set()).update(c.label() for c in cells)
            continue
        halves = split_cpuset(shared, len(cells))
        cpus = [halves[(i + repeat) % len(cells)] for i in range(len(cells))]
        duet = Duet(key, repeat, cells, cpus)
        for cell in cells:
            duets[(cell.hash, repeat)] = duet
    for why, labels in alone.items():
        say(f"[yellow]schedule duet: {', '.join(sorted(labels))} fell back to sequential: {why}[/yellow]")
    return duets


def _shared_cpus(cells: list[Cell], unusable: dict[str, str], by_name: dict[str, Target]) -> tuple[list[int], str]:
    """The CPUs every side's target may use, or why these cells cannot run as a duet."""
    if len(cells) < 2 or cells[0].layer != BASELINE:
        return [], "no partner to pair with (its other side is stored already, or was not planned)"
    if any(c.mode != "single" or c.background for c in cells):
        return [], "a duet runs single-process cells that run alone"
    names = [c.targets[0] for c in cells]
    if any(n in unusable or n not in by_name for n in names):
        return [], "a side's target did not come up"
    shared = sorted(set.intersection(*(set(by_name[n].cpu_set) for n in names)))
    if len(shared) < len(cells):
        host = cells[0].config.get("host", "?")
        return [], f"host {host}: the sides share {len(shared)} CPU(s), a duet needs at least one per side"
    wanted = max(int(c.config.get("threads") or 0) for c in cells)
    if wanted > len(shared) // len(cells):
        return [], f"the cells ask for {wanted} threads, more than the {len(shared) // len(cells)} CPU(s) of a side"
    return shared, ""


def run_together(
    launcher: Launcher, duet: Duet, by_name: dict[str, Target], timeout: float, stop: threading.Event
) -> list[CellRun]:
    """Every side of the duet on a thread of its own, pinned to its CPUs, started together."""
    barrier = threading.Barrier(len(duet.members))
    runs: list[CellRun | None] = [None] * len(duet.members)

    def one(i: int, cell: Cell, processes: list[Process]) -> None:
        try:
            runs[i] = launcher.run_cell(cell, duet.repeat, processes, timeout, stop, start_together=barrier)
        except Exception as exc:  # noqa: BLE001 - a bug on one side must still fail it with its reason
            now = datetime.now(UTC).isoformat(timespec="milliseconds")
            runs[i] = CellRun("failed", f"{type(exc).__name__}: {exc}", [], now, now, 0.0)
        finally:
            barrier.abort()  # a side that ended before the barrier frees the others (after it, this changes nothing)

    threads = []
    for i, (cell, cpus) in enumerate(zip(duet.members, duet.cpus, strict=True)):
        processes = plan(cell, by_name)
        for p in processes:
            p.cpus = list(cpus)
        threads.append(threading.Thread(target=one, args=(i, cell, processes), name=f"dlinfra-duet-{cell.layer}"))
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # in slices: a signal's handler runs on this thread only between them
            thread.join(timeout=0.2)
    lost = CellRun("failed", "its thread ended without a result", [], "", "", 0.0)
    return [r if r is not None else lost for r in runs]


def measured_window(record: RunRecord) -> tuple[float, float] | None:
    """(start, end) of the record's measured work in seconds since the epoch: its ``measure`` phase, or for a
    workload without one (sysbench) from the end of its import to its end; None where the record cannot say."""
    phases = record.metrics.extra.get("phases_s")
    elapsed = record.metrics.elapsed_s
    if not isinstance(phases, dict) or elapsed is None:
        return None
    try:
        started = datetime.fromisoformat(record.provenance.start_utc).timestamp()
    except ValueError:
        return None
    before = PHASE_ORDER[: PHASE_ORDER.index("measure")] if "measure" in phases else ("start", "import")
    begin = started + sum(float(phases.get(name, 0.0)) for name in before)
    end = begin + float(phases["measure"]) if "measure" in phases else started + float(elapsed)
    return (begin, end) if end > begin else None


def overlap_s(runs: list[CellRun]) -> float | None:
    """Seconds during which every side was measuring (0: their windows did not overlap); None when a side's window
    is unknown."""
    windows = [measured_window(r) for run in runs for r in run.records]
    if not windows or any(w is None for w in windows):
        return None
    known = [w for w in windows if w is not None]
    return max(0.0, min(end for _, end in known) - max(begin for begin, _ in known))


def _unpinned(duet: Duet, runs: list[CellRun]) -> bool:
    """Whether a side's process ended on CPUs other than its half (something reset its affinity mid-run, such as
    a shield being removed on the same kernel): the pair was not a duet throughout, and is stored unpaired."""
    moved = [
        f"{cell.layer} pinned to CPU {format_cpuset(cpus)} ended on {format_cpuset(r.provenance.cpu_set)}"
        for cell, cpus, run in zip(duet.members, duet.cpus, runs, strict=True)
        for r in run.records
        if set(r.provenance.cpu_set) - set(cpus)
    ]
    if moved:
        say(f"[yellow]{duet.label()}: {'; '.join(moved)}: stored unpaired, out of the paired interval[/yellow]")
    return bool(moved)


#: ``save(cell, repeat, run, verdict, pair_id, overlap_s)``: how the campaign stores one side's attempt.
Save = Callable[[Cell, int, CellRun, Verdict, str | None, float | None], None]


def run_duet(
    duet: Duet,
    launcher: Launcher,
    by_name: dict[str, Target],
    policy: InterferencePolicy,
    timeout: float,
    stop: threading.Event,
    save: Save,
) -> dict[str, tuple[CellRun, Verdict | None]]:
    """Run the duet and store every side; returns each side's (by cell hash) last run and verdict. While a side is
    contaminated (within ``policy.reruns``), the whole pair is stored so, the clean side as its partner's, and
    runs again: a pair's sides are always one attempt, measured together."""
    for attempt in range(policy.reruns + 1):
        again = f" (again, {attempt}/{policy.reruns}: contaminated)" if attempt else ""
        with phase(duet.label() + again) as running:
            runs = run_together(launcher, duet, by_name, timeout, stop)
            sides = [(c, r, assess(r.records, policy)) for c, r in zip(duet.members, runs, strict=True)]
            overlap = overlap_s(runs)
            failed = [f"{c.layer}: {r.failure_reason}" for c, r, _ in sides if r.status != "ok"]
            dirty = [f"{c.layer}: {v.detail}" for c, r, v in sides if r.status == "ok" and v.contaminated]
            if failed:
                running.failure = "stored as failed: " + "; ".join(failed)
            elif dirty:
                running.failure = "contaminated: " + "; ".join(dirty)
            else:
                running.outcome = "ok, measured together for " + ("?" if overlap is None else f"{overlap:.1f} s")
        if overlap is not None and overlap <= 0 and not failed:
            say(f"[yellow]{duet.label()}: the sides' measured windows did not overlap; the report leaves the pair "
                "out of the paired interval[/yellow]")  # fmt: skip
        pair_id = None if _unpinned(duet, runs) else duet.pair_id(attempt + 1)
        repeat_pair = bool(dirty) and not failed and attempt < policy.reruns and not stop.is_set()
        for cell, run, verdict in sides:
            if repeat_pair and not verdict.contaminated:
                why = f"its duet partner was contaminated ({'; '.join(dirty)})"
                verdict = Verdict(verdict.foreign_share, verdict.steal_share, True, why)
            save(cell, duet.repeat, run, verdict, pair_id, overlap)
        if not repeat_pair:
            break
    return {c.hash: (r, v) for c, r, v in sides}
