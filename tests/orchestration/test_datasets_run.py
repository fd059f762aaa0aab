"""A generated JPEG data set through ``dlinfra run`` on the local testbed: built once, shipped by Ansible to the
host (the bm target, and the host whose container mounts it read-only), read and decoded by the payload on bm
and in the container; the records say generated with the content hash; a second run ships nothing; a copy
changed on the host is refused, naming it."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from support import TESTBED, need_binary, run_cli

from dlinfra.orchestration.datasets import DatasetSpec, build
from dlinfra.payload.dataset_files import content_hash

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Tiny on purpose: the plumbing is under test, not the I/O rate (2 classes x 6 images of 48-64 px).
DATASET = {"classes": 2, "images_per_class": 6, "long_side": [48, 64], "seed": 3}


def _records(db: Path, campaign: str) -> list[dict]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT status, failure_reason, record_json FROM runs WHERE campaign_id = ?", (campaign,))
        return [{"status": s, "failure_reason": f, "record": json.loads(r) if r else None} for s, f, r in rows]
    finally:
        conn.close()


def _cells(db: Path, campaign: str) -> list[tuple[str, str | None]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT status, failure_reason FROM cells WHERE campaign_id = ? ORDER BY layer", (campaign,)
        ).fetchall()
    finally:
        conn.close()


def test_generated_jpegs_shipped_checked_and_read_on_bm_and_ctr(deployed, tmp_path: Path) -> None:
    need_binary("dockerd")
    host = deployed.bed.state.hosts[0]
    fields = ", ".join(f"{k}: {json.dumps(v)}" for k, v in DATASET.items())
    spec = tmp_path / "data.yml"
    spec.write_text(
        f"name: data-it\ninventory: testbed:{TESTBED}\nlayers: [bm, ctr]\n"
        "warmup_steps: 1\nsteps: 3\ncell_timeout: 300\n"
        f"datasets:\n  tiny: {{{fields}}}\n"
        f"layer_options:\n  ctr: {{provider: docker, hosts: [{host.name}], run_id: itdata}}\n"
        "workloads:\n"
        f"  - {{name: alexnet, hosts: [{host.name}], "
        "matrix: {mode: [single], batch_size: [4], image_size: [32], data: [generated:tiny]}}\n"
    )
    built = build(DatasetSpec("tiny", **{**DATASET, "long_side": tuple(DATASET["long_side"])}))
    db, artifacts = tmp_path / "data.db", str(tmp_path / "a")

    first = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "data-1", "--artifacts", artifacts)
    assert first.returncode == 0, first.stdout + first.stderr
    copy = Path(host.home) / "datasets" / built.folder
    assert content_hash(copy) == built.hash  # on the host, as the controller built it
    assert (Path(host.home) / "datasets" / f"{built.folder}.sha256").read_text().strip() == built.hash
    records = _records(db, "data-1")
    assert {r["record"]["provenance"]["layer"] for r in records} == {"bm", "ctr"}
    for row in records:
        prov, extra = row["record"]["provenance"], row["record"]["metrics"]["extra"]
        assert row["status"] == "ok", row["failure_reason"]
        assert prov["data"]["generated"] is True and prov["data"]["hash"] == built.hash
        assert "not ImageNet" in prov["data"]["note"]
        assert prov["cell_config"]["data"] == "generated:tiny" and prov["cell_config"]["dataset"]["classes"] == 2
        # The payload read the generated set (its manifest), on bm from the host, in the container from the mount.
        assert extra["data_source"].startswith("generated:") and extra["data_generated"]["generated"] is True
        assert extra["train_examples"] + extra["test_examples"] == 12
    ctr = next(r for r in records if r["record"]["provenance"]["layer"] == "ctr")
    assert ctr["record"]["metrics"]["extra"]["data_source"] == f"generated:/opt/dlinfra/datasets/{built.folder}"

    again = run_cli(
        "--db", str(db), "run", str(spec), "--layer", "bm", "--campaign-id", "data-2", "--artifacts", artifacts
    )
    assert again.returncode == 0, again.stdout + again.stderr
    shipped = re.findall(r"every data set on every target that reads it \(changed=(\d+)\)", again.stderr)
    assert shipped == ["0"], again.stderr[-2000:]  # the host holds that hash already: nothing is shipped

    image = next((copy / "class-0000").iterdir())
    original = image.read_bytes()
    image.write_bytes(original[:-1] + b"\0")  # a changed copy keeps its marker: only the hash tells
    try:
        tampered = run_cli(
            "--db", str(db), "run", str(spec), "--layer", "bm", "--campaign-id", "data-3", "--artifacts", artifacts
        )
    finally:
        image.write_bytes(original)
    assert tampered.returncode != 0
    ((status, reason),) = _cells(db, "data-3")
    assert status == "failed" and "data set hash mismatch" in reason and host.name in reason, reason
    assert built.hash[:12] in reason
