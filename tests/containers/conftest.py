"""Fixtures for the container tests: a real dockerd and real podman, and payload images built once (cached).

Two images: ``tiny`` (the base + psutil + dlinfra: seconds to build, save and load,
used for placement/network/resource checks) and ``full`` (the real wheelhouse with
TensorFlow: the payload-hash check). Both come from build_payload_image, so both
are built with no network and no pip index.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import component, need, need_binary

from dlinfra.cache import cache_dir
from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.image import PayloadImage, build_payload_image, split_lock
from dlinfra.providers.containers.run import remove_run

TINY = ("psutil", "dlinfra")


def _root() -> bool:
    return os.geteuid() == 0


@pytest.fixture(scope="session")
def docker() -> Engine:
    component("dockerd")
    need_binary("dockerd")
    need(_root(), "root (to start dockerd)")
    from dlinfra.providers.containers.provider import controller_engine

    return controller_engine("docker")  # prepared by the docker_host role, as a campaign does


@pytest.fixture(scope="session")
def podman() -> Engine:
    component("podman")
    need_binary("podman")
    need(_root(), "root (rootful podman)")
    engine = Engine("podman", host="localhost")
    engine.check_available()
    return engine


@pytest.fixture(params=["docker", "podman"])
def engine(request: pytest.FixtureRequest) -> Engine:
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def wheelhouse():
    from dlinfra.images.wheelhouse import build_wheelhouse

    return build_wheelhouse()


@pytest.fixture(scope="session")
def tiny_wheelhouse(wheelhouse) -> Path:
    """psutil + dlinfra from the real wheelhouse, with their lock lines (same hashes)."""
    deps, own = split_lock(wheelhouse.lock.read_text())
    lines = [line for line in deps + own if line.split("==")[0].strip().lower() in TINY]
    folder = cache_dir("test-wheelhouse-tiny", {"lines": lines})
    if not (folder / "requirements.lock").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for wheel in wheelhouse.files:
            name = wheel.name.split("-")[0].replace("_", "-").lower()
            if name in TINY and not (folder / wheel.name).exists():
                shutil.copy2(wheel, folder / wheel.name)
        tmp = folder / "requirements.lock.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(folder / "requirements.lock")
    return folder


def _image(engine: Engine, folder: Path) -> PayloadImage:
    return build_payload_image(engine, folder)


@pytest.fixture(scope="session")
def docker_tiny(docker: Engine, tiny_wheelhouse: Path) -> PayloadImage:
    return _image(docker, tiny_wheelhouse)


@pytest.fixture(scope="session")
def podman_tiny(podman: Engine, tiny_wheelhouse: Path) -> PayloadImage:
    return _image(podman, tiny_wheelhouse)


@pytest.fixture
def tiny(engine: Engine, request: pytest.FixtureRequest) -> PayloadImage:
    return request.getfixturevalue(f"{engine.kind}_tiny")


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh run id; everything labelled with it is removed after the test, on both engines."""
    rid = f"t{secrets.token_hex(3)}"
    yield rid
    for kind in ("docker", "podman"):
        if (
            f"{kind}_tiny" in request.fixturenames
            or kind in request.fixturenames
            or ("engine" in request.fixturenames and request.getfixturevalue("engine").kind == kind)
        ):
            remove_run(request.getfixturevalue(kind), rid)
