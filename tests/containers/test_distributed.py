"""A real distributed TF cell across containers on a user-defined bridge network (seed 000's "Docker Multiple").

One container per process (spread): ps0, worker0, chief, each reaching the others at its container
address on the run's bridge network. Every role must finish and agree on the global step.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.playbook import run_container
from dlinfra.providers.containers.run import (
    ContainerSpec,
    NetworkMode,
    Resources,
    container_address,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]
PORT = 2222


def test_ps_async_across_containers_on_the_bridge_network(docker: Engine, run_id: str, tmp_path: Path) -> None:
    from dlinfra.images.deps_archive import build_deps_archive
    from dlinfra.images.wheelhouse import build_wheelhouse
    from dlinfra.providers.containers.image import build_payload_image

    wheelhouse = build_wheelhouse()
    # With the dependencies archive, as the ctr provider builds it: the suite's other tests' image, not a third
    # dependencies image (pip-installed TensorFlow, minutes) that pushed theirs out of the engine.
    image = build_payload_image(docker, wheelhouse.path, wheelhouse.lock, deps_archive=build_deps_archive(wheelhouse))
    roles = [("ps", 0), ("worker", 0), ("chief", 0)]
    addresses = {}
    for role, index in roles:
        name = f"dlinfra-{run_id}-{role}{index}"
        out = tmp_path / name
        out.mkdir()
        record = run_container(
            docker,
            ContainerSpec(name, image.tag, run_id, NetworkMode("bridge"), Resources(memory_bytes=3 * 2**30), str(out)),
        )
        addresses[(role, index)] = container_address(record, NetworkMode("bridge"), "unused")
    cluster = [
        "--ps", f"{addresses[('ps', 0)]}:{PORT}",
        "--workers", f"{addresses[('worker', 0)]}:{PORT}",
        "--chief", f"{addresses[('chief', 0)]}:{PORT}",
    ]  # fmt: skip

    def launch(role: str, index: int) -> subprocess.CompletedProcess[str]:
        name = f"dlinfra-{run_id}-{role}{index}"
        context = json.dumps({"layer": "ctr", "physical_host": "localhost", "campaign_id": run_id})
        return docker.run(
            "exec", name, image.python, "-m", "dlinfra.payload", "run", "--workload", "mnist-dnn",
            "--data", "synthetic", "--mode", "ps-async", "--warmup-steps", "2", "--steps", "20",
            *cluster, "--role", role, "--task-index", str(index), "--peer-timeout", "120",
            "--context-json", context, "--out", "/results/r.json",
            check=False, timeout=600,
        )  # fmt: skip

    with ThreadPoolExecutor(len(roles)) as pool:
        results = list(pool.map(lambda r: launch(*r), roles))
    for (role, index), result in zip(roles, results, strict=True):
        assert result.returncode == 0, f"{role}{index}: {result.stderr[-1500:]}"
    records = {
        role: json.loads((tmp_path / f"dlinfra-{run_id}-{role}{index}" / "r.json").read_text()) for role, index in roles
    }
    assert {r["provenance"]["status"] for r in records.values()} == {"ok"}
    assert {r["provenance"]["layer"] for r in records.values()} == {"ctr"}
    steps = {r["metrics"].get("global_step") for r in records.values()}
    assert len(steps - {None}) == 1, steps
