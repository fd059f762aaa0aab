"""``pack`` vs ``spread`` and mode ``sync`` end to end through ``dlinfra run`` on the local testbed: where the
processes ran and on which CPUs is read back from the stored records, not from the plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import TESTBED, run_cli

from dlinfra.results.export import runs_frame
from dlinfra.results.store import open_store

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_sync_spread_and_pack_through_dlinfra_run(deployed, tmp_path: Path) -> None:
    hosts = [h.name for h in deployed.bed.state.hosts[:2]]
    spec = tmp_path / "placement.yml"
    spec.write_text(
        f"name: placement-it\ninventory: testbed:{TESTBED}\nlayers: [bm]\n"
        "warmup_steps: 2\nsteps: 10\ncell_timeout: 240\n"
        f"workloads:\n  - {{name: mnist-dnn, hosts: [{', '.join(hosts)}], "
        "matrix: {mode: [sync], workers: [2], placement: [spread, pack], batch_size: [32]}}\n"
    )
    db = tmp_path / "placement.db"
    proc = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "pl-it", "--artifacts", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open_store(str(db)) as store:
        frame = runs_frame(store, "pl-it", with_records=True)
    assert (frame["status"] == "ok").all() and set(frame["mode"]) == {"sync"} and set(frame["role"]) == {"worker"}
    placed: dict[str, list[tuple[str, list[int]]]] = {}
    for record in frame["record"]:
        prov = record["provenance"]
        placed.setdefault(prov["cell_config"]["placement"], []).append((prov["physical_host"], prov["cpu_set"]))
    assert sorted(host for host, _ in placed["spread"]) == sorted(hosts)  # one worker per host
    (pack_host,) = {host for host, _ in placed["pack"]}  # both workers on one host...
    first, second = (set(cpus) for _, cpus in placed["pack"])
    assert first and second and not first & second  # ...each on its own CPUs
    assert pack_host == hosts[0]
