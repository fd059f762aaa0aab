"""``schedule: duet``: a config's bm and ctr cells measured at the same time on halves of the host's CPUs.

The spec's checks, the pairing and swapping, and the measured windows' overlap are pure; the last test runs a real
duet campaign on the local testbed (sysbench on bm and in a Docker container of the same namespace host, 2
repeats): the two sides' measured windows overlap, their CPUs swap between repeats, the pairs are stored, and the
report's interval is the paired one.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from support import TESTBED, run_cli

from dlinfra.errors import SpecError
from dlinfra.orchestration.cells import expand, run_order
from dlinfra.orchestration.duet import _unpinned, measured_window, overlap_s, plan_duets
from dlinfra.orchestration.launch import CellRun
from dlinfra.orchestration.spec import load_spec
from dlinfra.record import Metrics, Provenance, RunRecord
from dlinfra.report.paired import paired_ci
from dlinfra.results.store import open_store
from dlinfra.target import Target

DUET = "schedule: duet\nrepeats: 2\nworkloads:\n  - {name: sysbench-cpu, matrix: {time: [1]}}\n"


def _spec(tmp_path: Path, body: str, layers: str = "[bm, ctr]") -> Path:
    path = tmp_path / "d.yml"
    path.write_text(f"name: d\ninventory: hosts.yml\nlayers: {layers}\n" + body)
    return path


def _targets(cpus: list[int], ctr_cpus: list[int] | None = None) -> dict[str, list[Target]]:
    return {
        "bm": [Target("bm", "h1", "h1", "10.0.0.1", cpu_set=cpus)],
        "ctr": [Target("ctr", "c1", "h1", "10.0.0.1", cpu_set=cpus if ctr_cpus is None else ctr_cpus)],
    }


def test_a_duet_pairs_each_config_and_swaps_the_halves_every_repeat(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, DUET))
    assert spec.schedule == "duet"
    targets = _targets([0, 1, 2, 3])
    cells = expand(spec, targets)
    by_name = {t.name: t for ts in targets.values() for t in ts}
    duets = plan_duets(run_order(cells, 2), {}, by_name)
    bm, ctr = cells
    first, second = duets[(bm.hash, 0)], duets[(bm.hash, 1)]
    assert first is duets[(ctr.hash, 0)] and [c.layer for c in first.members] == ["bm", "ctr"]
    assert first.cpus == [[0, 1], [2, 3]] and second.cpus == [[2, 3], [0, 1]]  # swapped on the next repeat
    assert first.pair_id(1) != second.pair_id(1) and first.pair_id(1) != first.pair_id(2)


def test_a_duet_falls_back_to_sequential_where_it_cannot_apply(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, DUET))
    one_cpu = _targets([1])
    by_name = {t.name: t for ts in one_cpu.values() for t in ts}
    cells = expand(spec, one_cpu)
    assert plan_duets(run_order(cells, 2), {}, by_name) == {}
    # No partner: the ctr side is stored already (a --resume), so bm runs alone.
    targets = _targets([0, 1])
    by_name = {t.name: t for ts in targets.values() for t in ts}
    bm = expand(spec, targets)[0]
    assert plan_duets([(bm, 0)], {}, by_name) == {}
    assert plan_duets(run_order(expand(spec, targets), 1), {"c1": "layer ctr failed"}, by_name) == {}
    # A cell that needs every CPU: sysbench with 2 threads, on a host of 2.
    wide = load_spec(_spec(tmp_path, DUET.replace("time: [1]", "time: [1], threads: [2]")))
    assert plan_duets(run_order(expand(wide, targets), 2), {}, by_name) == {}


@pytest.mark.parametrize(
    ("body", "layers", "message"),
    [
        ("schedule: duets\n" + DUET.split("\n", 1)[1], "[bm, ctr]", "schedule: must be one of sequential, duet"),
        (DUET, "[bm, vm]", "schedule: duet pins each side to half of the host's CPUs, which layer vm"),
        (DUET, "[bm]", "schedule: duet runs bm and ctr side by side"),
        (DUET.replace("repeats: 2", "repeats: 1"), "[bm, ctr]", "schedule: duet swaps the sides every repeat"),
        (
            DUET.replace("matrix: {time: [1]}", "matrix: {mode: [ps-async]}").replace("sysbench-cpu", "mnist-dnn"),
            "[bm, ctr]",
            "schedule: duet runs single-process cells alone side by side; workload mnist-dnn (line 7) has mode",
        ),
    ],
)
def test_a_duet_that_cannot_apply_is_refused_naming_the_field(
    tmp_path: Path, body: str, layers: str, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_spec(tmp_path, body, layers))
    assert message in str(info.value), str(info.value)


def _record(start: str, phases: dict[str, float], elapsed: float) -> RunRecord:
    prov = Provenance(
        "c", {}, "h", 0, "bm", "h1", "a", "single", 0, "w", "single", "cpu", [0], 1, "", "3", "p", start, start, "ok"
    )
    return RunRecord(prov, Metrics(elapsed_s=elapsed, extra={"phases_s": phases}))


def _run(*records: RunRecord) -> CellRun:
    return CellRun("ok", None, list(records), "", "", 1.0)


def test_the_measured_windows_and_their_overlap() -> None:
    # A model: its measure phase, after start, import, build and warm-up (stored with sorted keys).
    model = _record(
        "2026-01-01T00:00:00.000+00:00", {"warmup": 1, "start": 1, "measure": 4, "import": 2, "build": 1}, 9
    )
    begin, end = measured_window(model)
    assert (begin % 60, end - begin) == (5.0, 4.0)
    # sysbench: from the end of its import to its end.
    bench = _record("2026-01-01T00:00:03.000+00:00", {"start": 0.5, "import": 0.0, "finish": 3.0}, 3.5)
    b_begin, b_end = measured_window(bench)
    assert (b_begin % 60, b_end % 60) == (3.5, 6.5)
    assert overlap_s([_run(model), _run(bench)]) == pytest.approx(1.5)
    late = _record("2026-01-01T00:00:20.000+00:00", {"start": 0.5, "import": 0.0, "finish": 3.0}, 3.5)
    assert overlap_s([_run(model), _run(late)]) == 0.0
    unknown = RunRecord(model.provenance, Metrics(elapsed_s=1.0))  # no phases: its window cannot be told
    assert measured_window(unknown) is None and overlap_s([_run(model), _run(unknown)]) is None


def test_a_side_whose_affinity_was_reset_mid_run_leaves_the_pair_unpaired(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, DUET))
    targets = _targets([0, 1])
    cells = expand(spec, targets)
    duet = plan_duets(run_order(cells, 1), {}, {t.name: t for ts in targets.values() for t in ts})[(cells[0].hash, 0)]
    pinned = _record("2026-01-01T00:00:00+00:00", {}, 1.0)  # its cpu_set: [0], bm's half
    assert not _unpinned(duet, [_run(pinned), _run(RunRecord(replace(pinned.provenance, cpu_set=[1]), pinned.metrics))])
    reset = RunRecord(replace(pinned.provenance, cpu_set=[0, 1]), pinned.metrics)
    assert _unpinned(duet, [_run(reset), _run(RunRecord(replace(pinned.provenance, cpu_set=[1]), pinned.metrics))])


def test_the_paired_interval_is_a_t_interval_of_the_mean_log_ratio() -> None:
    # Layer at 0.97x the baseline in every pair, the pairs' level drifting by 30%: the pairs cancel the drift.
    pairs = [(100.0, 97.0), (130.0, 126.0), (80.0, 77.8), (115.0, 111.4)]
    point, low, high = paired_ci(pairs, higher_is_better=True)
    logs = [math.log(x / b) for b, x in pairs]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 3)
    half = 3.182446305284263 * sd / 2  # t(0.975, 3 df) x sd / sqrt(4)
    assert point == pytest.approx((1 - math.exp(mean)) * 100)
    assert (low, high) == (
        pytest.approx((1 - math.exp(mean + half)) * 100),
        pytest.approx((1 - math.exp(mean - half)) * 100),
    )
    assert 2.5 < low < point < high < 3.5
    # Time (lower is better): the sign turns; one pair or no spread gives no interval, only a point.
    assert paired_ci([(1.0, 1.1), (2.0, 2.2)], higher_is_better=False)[0] == pytest.approx(10.0)
    assert all(math.isnan(v) for v in paired_ci([(1.0, 1.1), (2.0, 2.2)], higher_is_better=False)[1:])
    assert math.isnan(paired_ci([(1.0, 1.1)], higher_is_better=True)[1])


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.alone  # two sides measured at once: another worker's load (or shield) on one CPU is what it would see
def test_a_duet_campaign_measures_both_sides_together_and_reports_the_pairs(deployed, tmp_path: Path) -> None:
    spec = tmp_path / "duet.yml"
    spec.write_text(
        f"name: duet\ninventory: testbed:{TESTBED}\nlayers: [bm, ctr]\nschedule: duet\nrepeats: 2\n"
        "cell_timeout: 120\ninterference: {max_foreign_share: 1, reruns: 0}\n"
        "layer_options:\n  ctr: {provider: docker, network: host, hosts: ['all[0]']}\n"
        "workloads:\n  - name: sysbench-cpu\n    hosts: ['all[0]']\n    matrix: {mode: [single], time: [2]}\n"
    )
    db = tmp_path / "r.db"
    ran = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "duet-it", "--artifacts", str(tmp_path / "a"))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "duet sysbench-cpu/single" in ran.stderr and "measured together for" in ran.stderr, ran.stderr[-3000:]
    with open_store(str(db)) as store:
        cells = store.cells("duet-it")
        runs = store.runs("duet-it")
    assert len(cells) == 4 and all(c["status"] == "ok" for c in cells), cells
    for repeat in (0, 1):
        bm, ctr = (next(c for c in cells if c["layer"] == layer and c["repeat"] == repeat) for layer in ("bm", "ctr"))
        assert bm["pair_id"] == ctr["pair_id"] and bm["pair_id"], (bm, ctr)
        assert bm["pair_overlap_s"] > 1.0, bm  # 2 s each, started together
    cpus = {(r["layer"], r["repeat"]): r["cpu_set"] for r in runs}
    assert cpus[("bm", 0)] != cpus[("ctr", 0)] and cpus[("bm", 0)] == cpus[("ctr", 1)], cpus  # swapped
    assert cpus[("ctr", 0)] == cpus[("bm", 1)]

    report = run_cli("--db", str(db), "report", "--campaign", "duet-it", "--format", "json")
    assert report.returncode == 0, report.stderr[-3000:]
    data = json.loads(report.stdout)
    assert any("schedule duet" in n and "2 pair(s)" in n for n in data["notes"]), data["notes"]
    view = data["views"]["overhead"]
    (row,) = [
        dict(zip(view["columns"], r, strict=True)) for r in view["rows"] if r[view["columns"].index("layer")] == "ctr"
    ]
    # The report's interval is the paired one: the same figures from the stored pairs (sysbench's events/s).
    value = {(r["layer"], r["repeat"]): r["examples_per_sec"] for r in runs}
    expected = paired_ci([(value[("bm", k)], value[("ctr", k)]) for k in (0, 1)], higher_is_better=True)
    assert row["overhead_pct"] == pytest.approx(expected[0], abs=1e-6), (row, expected)
    if not math.isnan(expected[1]):
        assert (row["ci_low_pct"], row["ci_high_pct"]) == (pytest.approx(expected[1]), pytest.approx(expected[2]))
