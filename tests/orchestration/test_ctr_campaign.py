"""bm and ctr cells in one campaign on the real testbed: real dockerd per host namespace, real TF.

The ctr layer runs two containers per host (``spread``, seed 000's "Docker
Multiple"), each pinned to one of the host's CPUs, in the host's own network.
The same campaign measures bm on the same hosts, so every row can be compared:
same payload hash, and each container row records the CPU set the container
was given. Teardown is checked on each host's dockerd afterwards.
"""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import TESTBED, need_binary, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_ID = "itctr"


def _runs(db: Path, campaign: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT * FROM runs WHERE campaign_id = ?", (campaign,)).fetchall()
    finally:
        conn.close()


def _spec(
    tmp_path: Path,
    hosts: list[str],
    *,
    layers: str = "[bm, ctr]",
    network: str = "host",
    single: bool = True,
    per_host: int = 2,
) -> Path:
    """mnist-dnn ps-async 1x2 across ``hosts`` (and a single cell on the first host unless ``single`` is off),
    ``per_host`` containers on each host."""
    names = ", ".join(hosts)
    text = (
        f"name: bm-ctr\ninventory: testbed:{TESTBED}\nlayers: {layers}\n"
        "warmup_steps: 5\nsteps: 30\ncell_timeout: 300\npeer_timeout: 90\n"
        "layer_options:\n"
        f"  ctr: {{provider: docker, hosts: [{names}], placement: spread, processes_per_host: {per_host},\n"
        f"         network: {network}, run_id: {RUN_ID}}}\n"
        "workloads:\n"
    )
    if single:
        text += "  - name: mnist-dnn\n    hosts: ['all[0]']\n    matrix: {mode: [single], batch_size: [64]}\n"
    text += (
        f"  - name: mnist-dnn\n    hosts: [{names}]\n"
        "    matrix: {mode: [ps-async], batch_size: [64], ps: [1], workers: [2], placement: [spread]}\n"
    )
    spec = tmp_path / "bm-ctr.yml"
    spec.write_text(text)
    return spec


def _payload_image_loads(hosts: list[Any]) -> dict[tuple[str, str], str]:
    """(host, payload image) -> when that host's dockerd last tagged it: a load tags it again."""
    from dlinfra.providers.containers.engine import ensure_dockerd
    from dlinfra.testbed.dockerd import stop_dockerd

    times = {}
    for host in hosts:
        engine = ensure_dockerd(host.netns, host=host.name)
        try:
            listed = engine.run(
                "images", "--filter", "label=dlinfra.kind=payload", "--format", "{{.Repository}}:{{.Tag}}"
            )
            for image in listed.stdout.split():
                when = engine.run("image", "inspect", "--format", "{{.Metadata.LastTagTime}}", image, what="inspect")
                times[(host.name, image)] = when.stdout.strip()
        finally:
            stop_dockerd(host.netns)
    return times


def _image(runs: list[sqlite3.Row]) -> str:
    (image,) = {json.loads(r["record_json"])["provenance"]["target_details"].get("image") for r in runs} - {None}
    return image


def _assert_nothing_left(hosts: list[Any], runs: list[sqlite3.Row]) -> None:
    """Each host's dockerd holds no container or network of the run; the payload image stays, as the testbed
    host's image cache (keep_images' default there), so the next campaign loads nothing."""
    from dlinfra.providers.containers.engine import ensure_dockerd
    from dlinfra.providers.containers.run import RUN_LABEL
    from dlinfra.testbed.dockerd import stop_dockerd

    for host in hosts:
        engine = ensure_dockerd(host.netns, host=host.name)
        try:
            label = f"label={RUN_LABEL}={RUN_ID}"
            assert engine.run("ps", "-a", "--quiet", "--filter", label, what="ps").stdout.strip() == ""
            assert engine.run("network", "ls", "--quiet", "--filter", label, what="networks").stdout.strip() == ""
            tags = engine.run("images", "--format", "{{.Repository}}:{{.Tag}}", what="images").stdout.split()
            assert _image(runs) in tags, f"{host.name} lost its cached payload image"
        finally:
            stop_dockerd(host.netns)


def test_bm_and_ctr_cells_in_one_campaign(deployed, tmp_path: Path) -> None:
    need_binary("dockerd")
    from dlinfra.payload.cpuset import parse_cpuset

    hosts = deployed.bed.state.hosts[:2]
    db = tmp_path / "r.db"
    # From another folder and with the default, relative artifacts folder, as a user runs it: every playbook
    # (they run from ansible-runner's own folder) must still find its inventory.
    proc = run_cli(
        "--db", str(db), "run", str(_spec(tmp_path, [h.name for h in hosts])), "--campaign-id", "bm-ctr-it",
        timeout=1500, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((tmp_path / "artifacts" / "bm-ctr-it").iterdir())
    assert "4 ok, 0 failed" in proc.stdout
    runs = _runs(db, "bm-ctr-it")
    assert len(runs) == 2 + 2 * 4  # a single row per layer, chief + ps + 2 workers per layer
    assert all(r["status"] == "ok" for r in runs)
    # The very bytes the bm hosts run are what the image carries.
    assert {r["payload_hash"] for r in runs} == {deployed.result.payload_hash}
    assert len({(r["python_version"], r["tf_version"]) for r in runs}) == 1  # same runtime, not only same bytes

    records = [json.loads(r["record_json"]) for r in runs]
    ctr = [rec["provenance"] for rec in records if rec["provenance"]["layer"] == "ctr"]
    bm = [rec["provenance"] for rec in records if rec["provenance"]["layer"] == "bm"]
    assert len(ctr) == len(bm) == 5
    for p in ctr:
        details = p["target_details"]
        assert details["engine"] == "docker" and details["network"] == "host"
        assert details["container"].startswith(f"dlinfra-{RUN_ID}-")
        given = parse_cpuset(details["limits"]["cpuset"])
        assert len(given) == 1  # two containers per host, one CPU each
        assert set(p["cpu_set"]) == set(given), (details["container"], p["cpu_set"], given)
        assert details["limits"]["cap_drop"] and not details["limits"]["privileged"]
        assert p["physical_host"] in {h.name for h in hosts}
    # ps-async across two hosts in both layers: each process in its own container for ctr.
    for rows in (ctr, bm):
        dist = [p for p in rows if p["mode"] == "ps-async"]
        assert sorted((p["role"], p["task_index"]) for p in dist) == [
            ("chief", 0),
            ("ps", 0),
            ("worker", 0),
            ("worker", 1),
        ]
        assert {p["physical_host"] for p in dist} == {h.name for h in hosts}
    assert len({p["target_details"]["container"] for p in ctr if p["mode"] == "ps-async"}) == 4

    # Teardown: nothing of the run is left on either host's dockerd.
    _assert_nothing_left(hosts, runs)


def test_ps_async_across_hosts_on_bridge_networks(deployed, tmp_path: Path) -> None:
    """Seed 002's case: containers on each host's own bridge network reach the other host's through published ports.

    One container per host for the cell's four processes (ps, 2 workers, the chief), as seed 000 and 002 run
    locally: one container holds two of them and the chief's control port, so it publishes three ports
    without being told to (ports_per_container's default follows the campaign's largest cell)."""
    need_binary("dockerd")
    hosts = deployed.bed.state.hosts[:2]
    db = tmp_path / "r.db"
    spec = _spec(tmp_path, [h.name for h in hosts], layers="[ctr]", network="bridge", single=False, per_host=1)
    cached = _payload_image_loads(hosts)  # what the test before left in the hosts' image cache
    proc = run_cli(
        "--db", str(db), "run", str(spec), "--campaign-id", "ctr-bridge-it", "--artifacts", str(tmp_path / "art"),
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 ok, 0 failed" in proc.stdout
    runs = _runs(db, "ctr-bridge-it")
    assert len(runs) == 4 and all(r["status"] == "ok" for r in runs)
    assert {r["payload_hash"] for r in runs} == {deployed.result.payload_hash}
    provs = [json.loads(r["record_json"])["provenance"] for r in runs]
    by_host = {h.name: h.address for h in hosts}
    for p in provs:
        details = p["target_details"]
        assert details["network"] == "bridge" and details["published_ports"]
        assert p["target_address"] == by_host[p["physical_host"]]  # peers came in through the host's published port
        assert p["hostname"] != socket.gethostname()  # its own UTS and network namespace, not the host's
    assert {p["physical_host"] for p in provs} == set(by_host)
    assert len({p["hostname"] for p in provs}) == 2, "one container per host, two processes in one of them"
    _assert_nothing_left(hosts, runs)
    reloaded = [key for key, when in _payload_image_loads(hosts).items() if key in cached and cached[key] != when]
    assert not reloaded, f"the cached image was loaded again: {reloaded}"
