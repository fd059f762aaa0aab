"""``dlinfra compare`` and ``dlinfra check`` on real campaigns of the local testbed (real sysbench, real dockerd).

The same campaign twice: every cell "no difference", and neither the rows' nor the targets' metadata (Ansible
facts, engine version) differ. Two campaigns minutes apart on a shared 2-core machine drift by a few percent,
which a tight sysbench interval resolves: the comparison uses ``--threshold 15`` (a change whose whole CI lies
within +-15% is no difference) and the trimmed mean, as a team comparing two dates of one testbed would.
Then the same campaign with a CPU quota on the container, compared with the one just before it: compare finds the
ctr cell slower (its CI excludes 0, the quota of 0.3 CPU costs well over half its speed), bm moved by no more than
the testbed's drift (a CI run of this test saw bm's interval pass -15% between campaigns ten minutes apart, so bm is
held to a change within +-25%, far from ctr's), and the quota in the metadata diff. The targets' testbed
metadata is stored once per target per campaign. Expectations: one that holds passes, one violated makes
``dlinfra check`` exit non-zero with one line naming the cell, the bound and the measured interval.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import TESTBED, run_cli

from dlinfra.results.store import open_store

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone]


def _spec(tmp_path: Path, name: str, ctr_options: str = "") -> Path:
    text = (
        f"name: {name}\ninventory: testbed:{TESTBED}\nlayers: [bm, ctr]\nrepeats: 5\n"
        "warmup_steps: 1\nsteps: 1\ncell_timeout: 120\n"
        f"layer_options:\n  ctr: {{provider: docker, network: host, hosts: ['all[0]']{ctr_options}}}\n"
        "workloads:\n"
        "  - name: sysbench-cpu\n    hosts: ['all[0]']\n    matrix: {mode: [single], time: [1]}\n"
        "expect:\n"
        "  - {workload: sysbench-cpu, layer: ctr, overhead_pct: {max: 25}}\n"
    )
    spec = tmp_path / f"{name}.yml"
    spec.write_text(text)
    return spec


def _run(db: Path, spec: Path, cid: str, tmp_path: Path) -> None:
    result = run_cli("--db", str(db), "run", str(spec), "--campaign-id", cid, "--artifacts", str(tmp_path / cid))
    assert result.returncode == 0, result.stderr[-3000:]


def _compare(db: Path, a: str, b: str) -> dict[str, list[dict]]:
    """The comparison's views (cells, metadata) as lists of rows by column name."""
    result = run_cli(
        "--db", str(db), "compare", a, b, "--format", "json", "--threshold", "15", "--statistic", "trimmed"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    views = json.loads(result.stdout)["views"]
    return {
        name: [dict(zip(view["columns"], row, strict=True)) for row in view["rows"]]
        for name, view in (
            ("cells", views["compare"]),
            ("metadata", views.get("metadata", {"columns": [], "rows": []})),
        )
    }


def test_compare_and_check_two_real_campaigns(deployed, tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    spec = _spec(tmp_path, "cmp")
    _run(db, spec, "cmp-a", tmp_path)
    _run(db, spec, "cmp-b", tmp_path)

    with open_store(str(db)) as store:
        described = store.targets("cmp-a")
    assert {t["layer"] for t in described} == {"bm", "ctr"}
    bm = next(t for t in described if t["layer"] == "bm")["metadata"]
    assert bm["kernel"] and bm["cpu_model"] and int(bm["memory_mb"]) > 0 and bm["governor"]
    assert bm["os"].strip() and "/" in bm["virtualization"] and bm["kernel_cmdline"]
    ctr = next(t for t in described if t["layer"] == "ctr")["metadata"]
    # The container's machine facts are its host's, read once for both layers.
    assert {k: ctr[k] for k in ("kernel", "os", "cpu_model")} == {k: bm[k] for k in ("kernel", "os", "cpu_model")}
    assert ctr["engine"] == "docker" and ctr["engine_version"] not in ("", "unknown")

    same = _compare(db, "cmp-a", "cmp-b")
    assert [c["verdict"] for c in same["cells"]] == ["no difference", "no difference"], same["cells"]
    assert same["metadata"] == [], same["metadata"]

    check = run_cli("--db", str(db), "check", "cmp-b")
    assert check.returncode == 0, check.stdout + check.stderr

    quota = _spec(tmp_path, "cmp", ", cpus: 0.3")
    _run(db, quota, "cmp-c", tmp_path)
    moved = _compare(db, "cmp-b", "cmp-c")
    by_layer = {c["layer"]: c for c in moved["cells"]}
    ctr, bm = by_layer["ctr"], by_layer["bm"]
    assert ctr["verdict"] == "slower" and ctr["ci_high_pct"] < 0 and ctr["change_pct"] < -50, f"{ctr}"
    assert abs(bm["change_pct"]) < 25, f"bm moved beyond the drift: {bm}"
    changed = {(m["layer"], m["field"]) for m in moved["metadata"]}
    assert any(layer == "ctr" and "limits" in field for layer, field in changed), changed

    violated = run_cli("--db", str(db), "check", "cmp-c")
    assert violated.returncode == 1, violated.stdout + violated.stderr
    failures = [line for line in violated.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failures) == 1 and "sysbench-cpu" in failures[0] and "ctr" in failures[0], violated.stdout
    assert "CI [" in failures[0] and "25" in failures[0]
