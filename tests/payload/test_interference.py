"""What else ran on the payload's CPUs: the kernel's counters read on synthetic ``/proc`` and ``/sys`` trees
(the arithmetic checked), a cell's siblings taken out, the verdict against the campaign's bound; then a real CPU
hog pinned to the payload's CPU, which the record must see, name and measure."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from records import make_record
from support import need

from dlinfra.orchestration.interference import InterferencePolicy, assess
from dlinfra.payload.interference import InterferenceMeter, parse_proc_stat, parse_psi_some_us
from dlinfra.record import Interference, RunRecord, Steadiness, foreign_cpu_s, foreign_shares

STAT = """cpu  100 0 50 1000 0 0 0 0 0 0
cpu0 {u0} 0 {s0} 500 0 {i0} 0 {st0} 0 0
cpu1 40 0 10 500 0 0 0 0 0 0
intr 12345
"""
PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"


def test_proc_stat_busy_is_user_nice_system_irq_softirq_and_steal_is_apart() -> None:
    ticks = parse_proc_stat("cpu  1 2 3 4 5 6 7 8 9 10\ncpu3 10 20 30 400 50 6 7 80 90 100\nintr 1 2\n")
    assert list(ticks) == [3]  # the aggregate line is not a CPU
    assert ticks[3].busy == 10 + 20 + 30 + 6 + 7 and ticks[3].irq == 13 and ticks[3].steal == 80
    assert parse_psi_some_us(PSI.format(some=2_500_000)) == 2_500_000
    assert parse_psi_some_us("full avg10=0 total=5\n") is None


def _tree(root: Path, *, u0: int, s0: int, i0: int, st0: int, some: int, freq: int, throttles: int) -> None:
    (root / "proc" / "sys" / "kernel" / "random").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "stat").write_text(STAT.format(u0=u0, s0=s0, i0=i0, st0=st0))
    (root / "proc" / "pressure").mkdir(exist_ok=True)
    (root / "proc" / "pressure" / "cpu").write_text(PSI.format(some=some))
    (root / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text("boot-1\n")
    cpu0 = root / "sys" / "devices" / "system" / "cpu" / "cpu0"
    (cpu0 / "cpufreq").mkdir(parents=True, exist_ok=True)
    (cpu0 / "thermal_throttle").mkdir(exist_ok=True)
    (cpu0 / "cpufreq" / "scaling_cur_freq").write_text(f"{freq}\n")
    (cpu0 / "thermal_throttle" / "core_throttle_count").write_text(f"{throttles}\n")


def test_the_meter_subtracts_its_own_tree_from_the_cpus_busy_time(tmp_path: Path, monkeypatch) -> None:
    """CPU 0 goes 300 ticks busier (of them 20 irq) and steals 50; this process used 1.0 s: others used 2.0 s."""
    from dlinfra.payload import interference

    hz = os.sysconf("SC_CLK_TCK")
    own = iter([5.0, 5.0 + 100 / hz])  # 100 ticks of our own, read at start and at stop
    monkeypatch.setattr(interference, "_own_tree_cpu_s", lambda me: next(own, 0.0))
    monkeypatch.setattr(interference, "_others_cpu_s", lambda pids: {})
    _tree(tmp_path, u0=100, s0=50, i0=0, st0=0, some=1_000_000, freq=2_000_000, throttles=3)
    meter = InterferenceMeter([0], proc=tmp_path / "proc", sys_root=tmp_path / "sys").start()
    _tree(tmp_path, u0=300, s0=130, i0=20, st0=50, some=1_750_000, freq=3_000_000, throttles=5)
    found = meter.stop()
    assert found is not None and found.cpus == [0] and found.boot_id == "boot-1"
    assert found.busy_cpu_s == pytest.approx(300 / hz, abs=1e-3)
    assert found.own_cpu_s == pytest.approx(100 / hz, abs=1e-3)
    assert found.others_cpu_s == pytest.approx(200 / hz, abs=1e-3)
    assert found.irq_cpu_s == pytest.approx(20 / hz, abs=1e-3) and found.steal_s == pytest.approx(50 / hz, abs=1e-3)
    assert found.psi_some_s == pytest.approx(0.75) and found.psi_source == "system"
    assert found.freq_mhz == 2500.0 and found.throttle_events == 2
    # A CPU the kernel does not list (offline) is left out rather than counted as idle.
    assert InterferenceMeter([0, 7], proc=tmp_path / "proc", sys_root=tmp_path / "sys").start().stop().cpus == [0]


def _with(record: RunRecord, **fields) -> RunRecord:
    base = Interference(cpus=[0], wall_s=10.0, busy_cpu_s=10.0, own_cpu_s=6.0, others_cpu_s=4.0, boot_id="b1")
    record.metrics.interference = dataclasses.replace(base, **fields)
    return record


def test_a_cells_own_processes_on_the_same_kernel_are_not_interference() -> None:
    """A worker's CPU time on the chief's CPUs is the experiment: taken out for the share its CPUs overlap."""
    chief = _with(make_record(role="chief"), others_cpu_s=5.0)
    worker = _with(make_record(role="worker"), cpus=[0, 1], own_cpu_s=4.0)  # half of it could be on CPU 0
    guest = _with(make_record(role="worker", task_index=1), own_cpu_s=9.0, boot_id="b2")  # another kernel
    cell = [chief, worker, guest]
    assert foreign_cpu_s(chief, cell) == pytest.approx(5.0 - 4.0 * 0.5)
    assert foreign_shares(chief, cell) == pytest.approx((0.3, 0.0))
    assert foreign_cpu_s(_with(make_record(), others_cpu_s=1.0), [guest]) == 1.0  # the guest has its own kernel
    assert foreign_cpu_s(make_record(), cell) is None  # not measured: no figure, never a zero


def test_the_verdict_flags_a_cell_over_the_bound_names_who_and_not_a_deliberate_one() -> None:
    from dlinfra.record import ForeignProcess

    busy = _with(make_record(), others_cpu_s=3.0, steal_s=1.0, top_others=[ForeignProcess("stress-ng", 2.9)])
    verdict = assess([busy], InterferencePolicy(max_foreign_share=0.10))
    assert verdict.contaminated and verdict.foreign_share == pytest.approx(0.4) and verdict.steal_share == 0.1
    assert "others used 40% of CPU(s) 0" in verdict.detail and "stress-ng 2.9 s" in verdict.detail
    assert not assess([busy], InterferencePolicy(max_foreign_share=0.5)).contaminated
    assert not assess([busy], InterferencePolicy(), deliberate=True).contaminated  # scenario: shared
    quiet = assess([_with(make_record(), others_cpu_s=0.2)], InterferencePolicy())
    assert not quiet.contaminated and quiet.foreign_share == pytest.approx(0.02)
    assert assess([make_record()], InterferencePolicy()).foreign_share is None


def test_irq_time_is_not_others_and_siblings_count_for_the_overlap_of_windows_only() -> None:
    """Of 4 s that are not the payload's own, 1 s was IRQ/softirq (the payload's own network and ticks, as far as
    anyone can say): 3 s are others'. A sibling whose 10 s window overlaps the chief's by 5 s is subtracted by half."""
    chief = _with(make_record(role="chief"), irq_cpu_s=1.0, started=1000.0)
    assert foreign_cpu_s(chief, [chief]) == pytest.approx(3.0)
    worker = _with(make_record(role="worker"), own_cpu_s=2.0, started=1005.0)
    assert foreign_cpu_s(chief, [chief, worker]) == pytest.approx(3.0 - 2.0 * 0.5)
    older = _with(make_record(role="worker"), own_cpu_s=2.0)  # a record from before window times: all of it
    assert foreign_cpu_s(chief, [chief, older]) == pytest.approx(1.0)


def test_a_thermal_throttle_in_the_window_contaminates_and_pressure_is_said() -> None:
    hot = _with(make_record(), others_cpu_s=0.1, throttle_events=3, psi_some_s=2.0, psi_source="cgroup")
    verdict = assess([hot], InterferencePolicy())
    assert verdict.contaminated and "3 thermal throttle event(s)" in verdict.detail
    assert "CPU pressure (cgroup) 20%" in verdict.detail
    pressed = assess(
        [_with(make_record(), others_cpu_s=0.1, psi_some_s=5.0, psi_source="cgroup")], InterferencePolicy()
    )
    assert not pressed.contaminated  # a quota's own stalls are the experiment: pressure alone judges nothing


def test_the_window_opens_at_the_measured_work_and_closes_once(tmp_path: Path, monkeypatch) -> None:
    """Counters read when the phases say the measured work begins, not at the meter's creation; the record built
    afterwards gets the figures of the closed window."""
    from dlinfra.payload import interference
    from dlinfra.payload.measure import Phases

    monkeypatch.setattr(interference, "_own_tree_cpu_s", lambda me: 0.0)
    monkeypatch.setattr(interference, "_others_cpu_s", lambda pids: {})
    hz = os.sysconf("SC_CLK_TCK")
    _tree(tmp_path, u0=100, s0=0, i0=0, st0=0, some=0, freq=2_000_000, throttles=0)
    phases = Phases(time.time())
    phases.window = InterferenceMeter([0], proc=tmp_path / "proc", sys_root=tmp_path / "sys")
    _tree(tmp_path, u0=500, s0=0, i0=0, st0=0, some=0, freq=2_000_000, throttles=0)  # the import: outside
    before = time.time()
    phases.measuring()
    _tree(tmp_path, u0=600, s0=0, i0=0, st0=0, some=0, freq=2_000_000, throttles=0)
    phases.measured()
    _tree(tmp_path, u0=900, s0=0, i0=0, st0=0, some=0, freq=2_000_000, throttles=0)  # after the window
    found = phases.window.stop()
    assert found is not None and found.busy_cpu_s == pytest.approx(100 / hz, abs=1e-3)
    assert before <= found.started <= time.time()


def test_steadiness_is_the_dispersion_of_chunks_of_identical_steps() -> None:
    """1000 steps of 10 ms in chunks of 0.2 s (20 steps): a steady CPU gives 0; one whose chunks ran 10% faster and 10%
    slower in turn gives the chunks' CV and the adjacent log ratios' SD, computed by hand."""
    steady = Steadiness.of([0.01] * 1000)
    assert steady is not None and (steady.chunk_steps, steady.chunks) == (20, 50)
    assert steady.cv_pct == 0 and steady.adjacent_sd_pct == 0 and steady.chunk_s == pytest.approx(0.2)
    alternating = [0.009 if (i // 20) % 2 == 0 else 0.011 for i in range(1000)]  # mean 10 ms: chunks of 20
    found = Steadiness.of(alternating)
    chunks = [0.18, 0.22] * 25
    mean = sum(chunks) / 50
    cv = (sum((c - mean) ** 2 for c in chunks) / 49) ** 0.5 / mean * 100
    assert found is not None and found.cv_pct == pytest.approx(cv, abs=0.01)
    assert found.adjacent_sd_pct == pytest.approx(math.log(0.22 / 0.18) * 100 * (49 / 48) ** 0.5, abs=0.01)
    assert Steadiness.of([0.01] * 4) is None  # too few steps to chunk
    short = Steadiness.of([1.0] * 10)  # steps longer than a chunk: one step a chunk, at least 5 chunks
    assert short is not None and short.chunk_steps == 1 and short.chunks == 10


@pytest.mark.slow  # real processes for a few seconds: no daemon
def test_a_cpu_hog_pinned_to_the_payloads_cpu_is_seen_measured_and_named(run_payload, tmp_path: Path) -> None:
    """A busy loop pinned to the payload's CPU: the record counts at least most of the hog's CPU time as others',
    names it among the busiest, and the campaign's default bound calls the run contaminated."""
    need(shutil.which("sysbench") is not None, "the sysbench program")
    cpu = str(min(os.sched_getaffinity(0)))
    hog = subprocess.Popen(
        ["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"],
        start_new_session=True,
    )
    try:
        time.sleep(0.5)
        done = run_payload(
            "run", "--workload", "sysbench-cpu", "--time", "3", "--cpus", cpu, out=tmp_path / "r.json", timeout=120
        )
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0 and done.record is not None, done.stderr[-2000:]
    found = done.record.metrics.interference
    assert found is not None and found.cpus == [int(cpu)]
    # The scheduler gives the hog about half the CPU: others took at least a third of it, never more than all.
    assert 0.33 * found.wall_s <= found.others_cpu_s <= 1.05 * found.wall_s, found
    assert found.own_cpu_s <= 0.75 * found.wall_s, found
    assert any(p.name.startswith("python") for p in found.top_others), found.top_others
    verdict = assess([done.record], InterferencePolicy())
    assert verdict.contaminated and verdict.foreign_share >= 0.3, verdict
