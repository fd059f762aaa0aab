"""One campaign, one host, three OCI runtimes: runc, crun and gVisor's runsc, each a row of its own.

The ctr layer makes a container per runtime on the testbed host (``runtime: [runc, crun, runsc]``); each
runtime's sysbench-cpu cell is its own cell. What a user checks: every row ran under the runtime it names (the
engine's record, and from inside: gVisor answers uname and dmesg itself, runc and crun show the host's kernel),
the payload hash is the same in all three, and the report and ``results show`` label them ctr, ctr[crun] and
ctr[runsc].
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from support import TESTBED, need_binary, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_ID = "itrt"


def _spec(tmp_path: Path, host: str) -> Path:
    spec = tmp_path / "runtimes.yml"
    spec.write_text(
        f"name: ctr-runtimes\ninventory: testbed:{TESTBED}\nlayers: [ctr]\ncell_timeout: 300\n"
        "layer_options:\n"
        f"  ctr: {{provider: docker, hosts: [{host}], network: host, run_id: {RUN_ID},\n"
        "         runtime: [runc, crun, runsc]}\n"
        "workloads:\n"
        f"  - name: sysbench-cpu\n    hosts: [{host}]\n    matrix: {{time: [1]}}\n"
    )
    return spec


def test_runc_crun_and_runsc_cells_on_one_host(deployed, tmp_path: Path) -> None:
    need_binary("dockerd")
    need_binary("crun")
    need_binary("runsc")
    host = deployed.bed.state.hosts[0]
    db = tmp_path / "r.db"
    proc = run_cli(
        "--db", str(db), "run", str(_spec(tmp_path, host.name)), "--campaign-id", "rt-it",
        "--artifacts", str(tmp_path / "art"), timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 ok, 0 failed" in proc.stdout
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    runs = conn.execute("SELECT * FROM runs WHERE campaign_id = 'rt-it'").fetchall()
    conn.close()
    assert len(runs) == 3 and len({r["payload_hash"] for r in runs}) == 1  # the same bytes under each runtime
    provs = [json.loads(r["record_json"])["provenance"] for r in runs]
    by_runtime = {p["target_details"]["runtime"]["name"]: p for p in provs}
    assert sorted(by_runtime) == ["crun", "runc", "runsc"]
    host_kernel = os.uname().release  # the testbed's hosts are namespaces of this machine: its kernel
    for name, p in by_runtime.items():
        runtime, seen = p["target_details"]["runtime"], p["target_details"]["runtime"]["seen"]
        assert runtime["version"] != "unknown", runtime
        assert p["cell_config"].get("runtime") == (None if name == "runc" else name)
        assert p["kernel"].startswith(host_kernel) == (name != "runsc"), p["kernel"]  # as the payload saw it
        if name == "runsc":
            assert runtime["platform"] == "ptrace"
            assert "gVisor" in seen["kernel_log"] and seen["kernel_release"] != host_kernel, seen
        else:
            assert seen["kernel_release"] == host_kernel and "gVisor" not in seen["kernel_log"], seen
    shown = run_cli("--db", str(db), "results", "show", "rt-it")
    assert shown.returncode == 0, shown.stderr
    for label in ("ctr[crun]", "ctr[runsc]"):
        assert label in shown.stdout
    report = run_cli("--db", str(db), "report", "--campaign", "rt-it", "--metric", "elapsed", "--baseline", "ctr")
    assert report.returncode == 0, report.stdout + report.stderr
    assert "ctr[crun]" in report.stdout and "ctr[runsc]" in report.stdout
