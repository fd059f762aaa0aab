"""The payload image holds the same payload as ``bm``: same payload hash, and it records the container's CPU set.

Uses the real wheelhouse (TensorFlow): the first build takes ~2 min per engine,
later runs reuse the cached third-party layer and rebuild only dlinfra's (seconds).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.image import build_payload_image
from dlinfra.providers.containers.playbook import run_container
from dlinfra.providers.containers.run import ContainerSpec, NetworkMode, Resources

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _host_identity() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "dlinfra.payload", "identity"], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout)


def test_container_payload_hash_equals_bm_and_records_its_cpuset(engine: Engine, run_id: str, tmp_path: Path) -> None:
    from dlinfra.images.deps_archive import build_deps_archive
    from dlinfra.images.wheelhouse import build_wheelhouse

    for _attempt in range(3):  # other people may edit dlinfra meanwhile: retry until the sources held still
        before = _host_identity()["payload_hash"]
        wheelhouse = build_wheelhouse()
        archive = build_deps_archive(wheelhouse)
        image = build_payload_image(engine, wheelhouse.path, wheelhouse.lock, deps_archive=archive)
        if _host_identity()["payload_hash"] == before:
            break
    print(f"{engine.kind}: payload image {image.tag} ready in {image.build_s:.1f} s")
    name = f"dlinfra-{run_id}-chief0"
    results = tmp_path / "runs"
    results.mkdir()
    run_container(
        engine,
        ContainerSpec(
            name, image.tag, run_id, NetworkMode("host"), Resources(cpuset="1", memory_bytes=2 * 2**30), str(results)
        ),
    )
    inside = json.loads(engine.run("exec", name, image.python, "-m", "dlinfra.payload", "identity").stdout)
    assert inside["payload_hash"] == before
    assert inside["tf_version"] == _host_identity()["tf_version"]
    # The dependencies are the archive the bm and vm targets unpack (which leaves TensorFlow's headers out),
    # not a pip install of their own, and unpacked over no other copy (one setuptools, the pinned one).
    where = (
        "import importlib.metadata as m, os, tensorflow as tf; d = os.path.dirname(tf.__file__); "
        "print(os.path.isdir(d + '/include'), [x.version for x in m.distributions() if x.name == 'setuptools'])"
    )
    pinned = next(line for line in wheelhouse.lock.read_text().splitlines() if line.startswith("setuptools=="))
    expected = f"False ['{pinned.split('==')[1].split()[0]}']"
    assert engine.run("exec", name, image.python, "-c", where).stdout.strip() == expected
    context = json.dumps({"layer": "ctr", "physical_host": "localhost", "campaign_id": run_id})
    engine.run(
        "exec", name, image.python, "-m", "dlinfra.payload", "run", "--workload", "mnist-dnn", "--data", "synthetic",
        "--warmup-steps", "2", "--steps", "20", "--context-json", context, "--out", "/results/r.json",
        timeout=300,
    )  # fmt: skip
    record = json.loads((results / "r.json").read_text())
    prov = record["provenance"]
    assert prov["cpu_set"] == [1]
    assert prov["payload_hash"] == before
    assert prov["layer"] == "ctr" and prov["status"] == "ok"
    assert record["metrics"]["examples_per_sec"] > 0


def test_a_dependencies_image_rebuilt_under_its_tag_gets_a_payload_image_of_its_own(
    docker: Engine, tiny_wheelhouse: Path, tmp_path: Path
) -> None:
    """Seen in CI: the dependencies image was pruned and rebuilt under its tag (new layers), the payload image keyed
    by that tag was reused, and its top layer no longer sat on the dependencies image a ctr-vm guest holds ("does not
    sit on ... its layers differ"). Built over a base of its own: another line of builds, so the suite's images are
    neither pruned nor rebuilt by this test."""
    from dlinfra.providers.containers.image import base_image, layer_ids, save_layers_above

    base = f"dlinfra-idtest-{secrets.token_hex(3)}:base"
    (tmp_path / "marker").write_text(base)
    cid = docker.run("create", base_image(docker), "true").stdout.strip()
    made, thin = [base], None
    try:
        docker.run("cp", str(tmp_path / "marker"), f"{cid}:/marker")
        docker.run("commit", cid, base)
        first = build_payload_image(docker, tiny_wheelhouse, base=base)
        made += [first.tag, first.deps_tag]
        docker.run("rmi", first.deps_tag)  # untagged, as the pruning did; the payload image keeps the layers
        second = build_payload_image(docker, tiny_wheelhouse, base=base)
        made += [second.tag]
        assert second.deps_tag == first.deps_tag and second.deps_id != first.deps_id  # rebuilt under its tag
        assert second.tag != first.tag  # so the payload image is built again, over the new one
        thin = save_layers_above(docker, second.tag, second.deps_tag)  # raised "does not sit on" before
        below, whole = layer_ids(docker, second.deps_tag), layer_ids(docker, second.tag)
        assert whole[: len(below)] == below and len(whole) > len(below)
    finally:
        docker.run("rm", "-f", cid, check=False)
        for ref in reversed(made):
            docker.run("rmi", ref, check=False)
        if thin is not None:
            shutil.rmtree(thin.parent, ignore_errors=True)  # this throwaway image's cached archives
