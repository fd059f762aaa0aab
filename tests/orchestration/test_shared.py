"""Seed 002's shared-resource scenario: a cell next to a background job on the same physical host.

The spec checks and the placement are pure; the last test runs a real campaign on the local testbed: a
cell next to a CPU hog is reported slower than alone (CI excluding 0), and no background job is left.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import TESTBED, need_binary, run_cli

from dlinfra.errors import SpecError
from dlinfra.orchestration.cells import expand, plan
from dlinfra.orchestration.launch import Launcher
from dlinfra.orchestration.spec import load_spec
from dlinfra.report.frame import METRICS
from dlinfra.report.views import shared_view
from dlinfra.results.store import open_store
from dlinfra.target import Target
from dlinfra.transport import CommandResult, Transport, TransportPool

SHARED = (
    "background: {workload: sysbench-cpu, threads: 2}\n"
    "workloads:\n"
    "  - {name: mnist-dnn, hosts: ['all[0]'], matrix: {scenario: [alone, shared]}}\n"
)


def _spec(tmp_path: Path, body: str, layers: str = "[bm]") -> Path:
    path = tmp_path / "c.yml"
    path.write_text(f"name: c\ninventory: hosts.yml\nlayers: {layers}\nsteps: 3\nwarmup_steps: 1\n" + body)
    return path


def _targets(layer: str, per_host: int) -> list[Target]:
    return [
        Target(layer, f"{layer}@h{h}#{i}", f"h{h}", f"10.0.0.{h}", cpu_set=[0, 1])
        for h in (1, 2)
        for i in range(per_host)
    ]


def test_shared_cell_runs_its_background_next_to_it_on_bm(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, SHARED))
    alone, shared = expand(spec, {"bm": _targets("bm", 1)})
    assert alone.config["scenario"] == "alone" and "background" not in alone.config and alone.background is None
    assert shared.config["background"] == {"workload": "sysbench-cpu", "threads": 2}
    # bm: the target is the host, so the job is a second process on the cell's own target.
    assert shared.background == shared.targets[0] == "bm@h1#0"
    assert alone.hash != shared.hash


def test_shared_cell_on_a_container_needs_a_second_one_on_its_host(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, SHARED, layers="[ctr]"))
    with pytest.raises(SpecError, match="second ctr instance on host h1") as info:
        expand(spec, {"ctr": _targets("ctr", 1)})
    assert "processes_per_host: 2" in (info.value.hint or "")
    _alone, shared = expand(spec, {"ctr": _targets("ctr", 2)})
    assert shared.targets == ["ctr@h1#0", "ctr@h1#1"] and shared.background == "ctr@h1#1"
    (only,) = plan(shared, {"ctr@h1#0": _targets("ctr", 2)[0], "ctr@h1#1": _targets("ctr", 2)[1]})
    assert only.target.name == "ctr@h1#0"  # the measured process is not on the background's container


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "workloads:\n  - {name: mnist-dnn, matrix: {scenario: [shared]}}\n",
            r"c.yml:7: workloads.0.matrix.scenario: scenario shared needs the campaign's background job",
        ),
        ("background: {workload: mnist-dnn}\nworkloads: [mnist-dnn]\n", r"c.yml:6: background: no cell has"),
        (SHARED.replace("threads: 2", "steps: 5"), r"c.yml:6: background.steps: steps is not the background"),
        (SHARED.replace("threads: 2", "thread: 2"), r"c.yml:6: background.thread: unknown field"),
        (SHARED.replace("threads: 2", "batch_size: 2"), r"background.batch_size: batch_size does not apply"),
        (SHARED.replace("sysbench-cpu", "sysbench-cpus"), r"background.workload: unknown workload"),
        (SHARED.replace("[alone, shared]", "[alone, share]"), r"matrix.scenario.1: scenario 'share' is not"),
        (
            SHARED.replace("scenario: [alone, shared]", "scenario: [shared], mode: [ps-async]"),
            r"scenario shared runs a single-instance cell",
        ),
    ],
)
def test_bad_shared_scenarios_name_file_line_and_key(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(_spec(tmp_path, body))


def test_shared_view_compares_with_the_same_cell_alone() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for scenario, mean in (("alone", 100.0), ("shared", 60.0)):
        config = {"mode": "single", "batch_size": 64, "scenario": scenario}
        if scenario == "shared":
            config["background"] = {"workload": "alexnet", "batch_size": 512}
        for value in rng.normal(mean, 2.0, 5):
            rows.append(
                {"workload": "alexnet", "layer": "bm", "value": value, "ok": True, "config": config, "mode": "single"}
            )
    view = shared_view(pd.DataFrame(rows), METRICS["throughput"], seed=0)
    (row,) = view.to_dict("records")
    assert row["config"] == "batch_size=64 mode=single" and row["background"] == "batch_size=512 workload=alexnet"
    assert row["runs_alone"] == row["runs_shared"] == 5
    assert 35 < row["degradation_pct"] < 45 and row["ci_low_pct"] > 0 and row["verdict"] == "slower"


def _background_processes(campaign_id: str) -> list[str]:
    """Command lines on this machine (the testbed hosts share its PID space) of background jobs of a campaign."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ".background" in cmd and campaign_id in cmd:
            found.append(cmd)
    return found


#: The noise-sized repeats of the CPU-hog campaign: at most this many, until the degradation is known to +-CI_PCT.
MAX_REPEATS, CI_PCT = 6, 15


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.alone
def test_a_cpu_hog_on_the_same_host_is_reported_slower_and_is_gone_after(deployed, tmp_path: Path) -> None:
    host = deployed.bed.state.hosts[0]
    spec = tmp_path / "shared.yml"
    # cifar10-cnn's convolutions use every CPU of the host: the job next to it takes some of them. (A workload
    # bound to one thread, such as mnist-dnn, hardly notices: each SSH session is its own scheduler autogroup,
    # and a second group gets the otherwise idle CPU.) Repeats are sized by the noise, as a user on a busy
    # machine would: three runs of a few seconds each could not always tell a 45% degradation from noise here.
    spec.write_text(
        f"name: shared-it\ninventory: testbed:{TESTBED}\nlayers: [bm]\nwarmup_steps: 3\nsteps: 60\n"
        f"repeats: {{min: 3, max: {MAX_REPEATS}, ci_pct: {CI_PCT}}}\n"
        "cell_timeout: 240\nbackground: {workload: sysbench-cpu, threads: 4}\n"
        f"workloads:\n  - {{name: cifar10-cnn, hosts: [{host.name}], matrix: {{scenario: [alone, shared], "
        "batch_size: [64]}}\n"
        # A cell that fails (no such data on the host) after its background job started: the job goes too.
        f"  - {{name: cifar10-cnn, hosts: [{host.name}], matrix: {{scenario: [shared], data: [/no/such/cifar]}}}}\n"
    )
    db = tmp_path / "shared.db"
    started = time.monotonic()
    proc = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "shared-it", "--artifacts", str(tmp_path / "a"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    took = time.monotonic() - started
    with open_store(str(db)) as store:
        cells = store.cells("shared-it")
    ran = 1 + max(c["repeat"] for c in cells)
    failed = [c for c in cells if c["status"] != "ok"]
    assert 3 <= ran <= MAX_REPEATS and len(cells) == 3 * ran and len(failed) == ran, [
        (c["config"], c["failure_reason"]) for c in cells
    ]
    assert all(c["config"]["data"] == "/no/such/cifar" and "cifar" in c["failure_reason"] for c in failed)
    assert not _background_processes("shared-it")
    assert not list((Path(host.home) / "runs" / "shared-it").glob("*.background"))
    # The campaign says why it stopped repeating: the degradation's interval is what it judged.
    flat = " ".join(proc.stdout.split())  # the console wraps long lines
    assert "repeats: " in flat, proc.stdout
    stopping = flat[flat.index("repeats: ") :]
    assert "against alone" in stopping, proc.stdout
    report = run_cli("--db", str(db), "report", "--campaign", "shared-it", "--format", "json")
    assert report.returncode == 0, report.stderr
    view = json.loads(report.stdout)["views"]["shared"]
    (row,) = [dict(zip(view["columns"], values, strict=True)) for values in view["rows"]]
    runs = _throughputs(db)
    assert row["layer"] == "bm" and row["background"] == "threads=4 workload=sysbench-cpu"
    assert row["runs_alone"] == row["runs_shared"] == ran, (row, runs)
    if ran < MAX_REPEATS:
        assert f"stopped after {ran} repeats" in stopping and row["detectable_pct"] <= CI_PCT, (stopping, row)
    assert row["ci_low_pct"] > 0 and row["verdict"] == "slower", (row, runs, stopping)
    print(f"shared-resource campaign: {took:.0f} s, {ran} repeats; degradation {row['degradation_pct']:.1f}% {row}")


def _throughputs(db: Path) -> list[tuple[str, int, float | None, float | None]]:
    """Each run's scenario, repeat, examples/s and foreign share: what a failed assertion shows."""
    with open_store(str(db)) as store:
        return [
            (
                r["record"]["provenance"]["cell_config"].get("scenario"),
                r["repeat"],
                r["examples_per_sec"],
                r["foreign_share"],
            )
            for r in store.runs("shared-it")
        ]


class _LocalTransport(Transport):
    """This machine as a target: commands run here (the launcher quotes argv; no shell parses a value)."""

    name = "local"

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_stdout: Callable[[str], None] | None = None,
    ) -> CommandResult:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if on_stdout is not None:  # all at once, at the end: the cell's clock then stops at the exit
            on_stdout(done.stdout)
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def read(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def put(self, local: str, remote: str) -> None:
        shutil.copyfile(local, remote)

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_an_interrupted_shared_cell_stops_its_background_job(tmp_path: Path) -> None:
    need_binary("sysbench")
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    python = home / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    spec = load_spec(_spec(tmp_path, SHARED.replace("threads: 2", "threads: 1")))
    target = Target("bm", "h1", "h1", "127.0.0.1", cpu_set=[0], home=str(home))
    (_alone, shared) = expand(spec, {"bm": [target]})
    shared.config["steps"] = 10_000_000  # runs until interrupted
    launcher = Launcher("interrupt-it")
    launcher.pool = TransportPool(lambda _target: _LocalTransport())
    cancel = threading.Event()
    threading.Timer(20, cancel.set).start()
    try:
        run = launcher.run_cell(shared, 0, plan(shared, {"h1": target}), 120, cancel, background=target)
    finally:
        launcher.close()
    assert run.status == "failed" and "interrupted" in (run.failure_reason or ""), run.failure_reason
    assert run.outcomes[0].killed  # the cell ran (so its background job had begun) when Ctrl-C came
    assert not _background_processes("interrupt-it")
    assert not list((home / "runs" / "interrupt-it").glob("*.background"))
