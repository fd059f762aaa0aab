"""DeepBench's all-reduce (seed 001) through ``dlinfra run``: two processes on two testbed hosts, one TF
collective all-reduce per message size, time and bandwidth per size in each process's record."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import TESTBED, run_cli

from dlinfra.errors import SpecError
from dlinfra.orchestration.spec import load_spec
from dlinfra.results.export import runs_frame
from dlinfra.results.store import open_store


def test_allreduce_runs_in_mode_sync_only(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("name: c\ninventory: hosts.yml\nworkloads:\n  - {name: allreduce, matrix: {size: ['1000']}}\n")
    only_sync = r"c.yml:4: workloads.0.matrix.mode: allreduce is a kernel: it runs in mode sync only"
    with pytest.raises(SpecError, match=only_sync):
        load_spec(path)
    path.write_text(
        "name: c\ninventory: hosts.yml\nworkloads:\n  - {name: allreduce, matrix: {mode: [sync], workers: [2]}}\n"
    )
    assert load_spec(path).workloads[0].matrix["mode"] == ["sync"]


@pytest.mark.integration
@pytest.mark.slow
def test_allreduce_reports_bandwidth_per_size_across_two_hosts(deployed, tmp_path: Path) -> None:
    hosts = [h.name for h in deployed.bed.state.hosts[:2]]
    spec = tmp_path / "allreduce.yml"
    spec.write_text(
        f"name: allreduce-it\ninventory: testbed:{TESTBED}\nlayers: [bm]\n"
        "warmup_steps: 2\nsteps: 5\ncell_timeout: 240\n"
        f"workloads:\n  - {{name: allreduce, hosts: [{', '.join(hosts)}], "
        "matrix: {mode: [sync], workers: [2], size: ['1000x100000']}}\n"
    )
    db = tmp_path / "allreduce.db"
    proc = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "ar-it", "--artifacts", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open_store(str(db)) as store:
        frame = runs_frame(store, "ar-it", with_records=True)
    assert sorted(frame["physical_host"]) == sorted(hosts) and set(frame["role"]) == {"worker"}
    for record in frame["record"]:
        assert record["provenance"]["status"] == "ok"
        extra = record["metrics"]["extra"]
        assert extra["processes"] == 2
        sizes = {f["floats"]: f for f in extra["allreduce"]}
        assert set(sizes) == {1000, 100_000}
        for figure in sizes.values():
            assert figure["time_per_op_s"] > 0 and figure["busbw_gbytes_per_sec"] > 0
            assert figure["bytes"] == 4 * figure["floats"]
