"""The payload image: a base image plus the shipped wheelhouse, built once, shipped as a tarball.

No registry is involved anywhere. The base image is either one the user names
(it must already be on the engine) or the debootstrap rootfs imported with
``docker/podman import``. The dependencies are the controller's dependencies
archive (:mod:`dlinfra.images.deps_archive`) unpacked into the image's venv,
where it fits the image's interpreter: the very files every ``bm`` and ``vm``
target unpacks. Elsewhere they, and dlinfra's own wheel always, are installed
from the wheelhouse with ``pip install --no-index --require-hashes``. Either
runs inside a build container that has no network at all (``--network none``).
Two layers: the dependencies (rebuilt only when their pins change) and dlinfra itself (seconds),
each tagged by a hash of its inputs, so an unchanged image is never rebuilt.
Images are saved with ``save`` and cached on the controller keyed by the image
id, then loaded on each host where it is missing by the payload_image role (the containers' up playbook).
A host whose engine already holds the dependencies image (a ctr-vm guest: its image has it baked in) gets only
the layers above it (:func:`save_layers_above`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dlinfra import cancel
from dlinfra.cache import building, cache_dir, cache_key, keep_recent
from dlinfra.errors import DlinfraError, TargetError
from dlinfra.images.deps_archive import PROBE, DepsArchive
from dlinfra.images.rootfs import RootfsSpec, build_rootfs
from dlinfra.providers.containers.engine import Engine
from dlinfra.runtime.runs_registry import machine_lock

BASE_REPO = "dlinfra-base"
DEPS_REPO = "dlinfra-deps"
PAYLOAD_REPO = "dlinfra-payload"
#: The id of the base image a dependencies or payload image was built over: its line of builds, for pruning.
BASE_LABEL = "dlinfra.base"
VENV = "/opt/dlinfra/venv"
PYTHON = f"{VENV}/bin/python"
SELF_PACKAGE = "dlinfra"
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class PayloadImage:
    """A built payload image: its tag (the reference containers run) and what it was built from."""

    tag: str
    image_id: str
    lock_sha256: str
    python: str = PYTHON
    build_s: float = 0.0
    #: The dependencies image it sits on (its layers, all but dlinfra's own): what a ctr-vm guest image holds.
    deps_tag: str = ""
    #: That image's id: an engine holding ``deps_tag`` under another id (another build) cannot take the top layer.
    deps_id: str = ""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split_lock(lock_text: str) -> tuple[list[str], list[str]]:
    """Split a hashed requirements lock into (third-party entries, dlinfra entries).

    Entries may span lines with ``\\`` continuations (pip-compile style); comments are dropped.
    """
    joined = re.sub(r"\\\s*\n", " ", lock_text)
    deps: list[str] = []
    own: list[str] = []
    for line in joined.splitlines():
        entry = line.split(" #", 1)[0].strip()
        if not entry or entry.startswith("#"):
            continue
        match = _REQ_NAME.match(entry)
        if not match:
            continue
        (own if _normalise(match.group(1)) == SELF_PACKAGE else deps).append(entry)
    return deps, own


def base_image(engine: Engine, named: str | None = None, spec: RootfsSpec | None = None) -> str:
    """The base image reference: the user's (must exist on the engine) or the imported debootstrap rootfs."""
    if named:
        if not engine.exists("image", named):
            raise TargetError(
                f"{engine.label}: base image {named!r} is not present",
                "load it first (docker load / podman load): no registry is used, or leave base_image unset",
            )
        return named
    tarball = build_rootfs(spec or RootfsSpec())
    tag = f"{BASE_REPO}:{tarball.parent.name}"  # the rootfs cache key: same inputs, same tag
    if not engine.exists("image", tag):
        with building():
            engine.run(
                "import",
                "--change",
                "LABEL dlinfra.kind=base",
                "--change",
                'CMD ["/bin/bash"]',
                str(tarball),
                tag,
                what="import rootfs",
            )
    return tag


def _image_id(engine: Engine, ref: str) -> str:
    """The id of an image that must be there (just built or named)."""
    found = engine.image_id(ref)
    if found is None:
        raise TargetError(f"{engine.label}: image {ref} vanished", "something removed it meanwhile: run again")
    return found


def _install_layer(
    engine: Engine,
    base: str,
    tag: str,
    wheelhouse: Path,
    requirements: list[str],
    *,
    no_deps: bool,
    labels: dict,
    archive: DepsArchive | None = None,
) -> None:
    """Install ``requirements`` from ``wheelhouse`` into the venv of a container of ``base``, commit it as ``tag``.

    With ``archive`` (the dependencies layer), where it fits the image's interpreter, the dependencies are the
    archive unpacked into the venv instead: the very files the bm and vm targets unpack, and no pip run.
    The build container has no network: an accidental index lookup fails instead of fetching.
    """
    with tempfile.TemporaryDirectory(prefix="dlinfra-build-") as tmp:
        # A private snapshot (hard links) of the wheels: a concurrent rebuild of the wheelhouse folder
        # must not swap the files under the running pip.
        context = Path(tmp) / "wheels"
        context.mkdir()
        for wheel in wheelhouse.glob("*.whl"):
            try:
                os.link(wheel, context / wheel.name)
            except OSError:
                shutil.copy2(wheel, context / wheel.name)
        lock = Path(tmp) / "lock" / "requirements.lock"
        lock.parent.mkdir()
        lock.write_text("\n".join(requirements) + "\n")
        mounts = ["--volume", f"{archive.path.parent}:/deps:ro"] if archive is not None else []
        created = engine.run(
            "create",
            "--network",
            "none",
            "--label",
            "dlinfra.build=1",
            "--volume",
            f"{context}:/wheelhouse:ro",
            "--volume",
            f"{lock.parent}:/lock:ro",
            *mounts,
            *engine.create_flags(),
            base,
            "sleep",
            "infinity",
            what="create build container",
        )
        cid = created.stdout.strip().splitlines()[-1]
        try:
            engine.run("start", cid, what="start build container")
            if not no_deps:
                engine.run("exec", cid, "python3", "-m", "venv", VENV, what="python3 -m venv")
            if archive is not None and _probe(engine, cid) == archive.fits:
                # The venv's own setuptools (ensurepip's) would be overwritten file by file by the archive's, which
                # is the pinned one: it goes first, as pip would uninstall it before installing the pin.
                drop = [f"{VENV}/bin/pip", "uninstall", "--yes", "--disable-pip-version-check", "setuptools"]
                engine.run("exec", cid, *drop, what="pip uninstall the venv's setuptools")
                site = f"{VENV}/{archive.site_packages}"
                unpack = ["tar", "--zstd", "-xf", f"/deps/{archive.path.name}", "-C", site]
                engine.run("exec", cid, *unpack, what="unpack the dependencies archive", timeout=1800)
            else:
                pip = [f"{VENV}/bin/pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check"]
                pip += ["--require-hashes", "--find-links", "/wheelhouse", "-r", "/lock/requirements.lock"]
                if no_deps:
                    pip.append("--no-deps")
                engine.run("exec", cid, *pip, what="pip install --no-index", timeout=1800)
            engine.run("kill", cid, check=False)
            changes = [
                f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV PYTHONDONTWRITEBYTECODE=1",
                "ENV HOME=/tmp",
                'CMD ["sleep", "infinity"]',
                *(f"LABEL {key}={value}" for key, value in labels.items()),
            ]
            flags = [arg for change in changes for arg in ("--change", change)]
            engine.run("commit", *flags, cid, tag, what="commit image")
        finally:
            _remove_build_container(engine, cid)


def _remove_build_container(engine: Engine, cid: str) -> None:
    """Uncancelled: a build stopped by a Ctrl-C still removes its build container."""
    with cancel.shielded():
        engine.run("rm", "-f", cid, check=False)


def _probe(engine: Engine, cid: str) -> str:
    """What :data:`PROBE` prints in the build container: the archive fits where it is the archive's ``fits``."""
    return engine.run("exec", cid, "python3", "-c", PROBE, check=False, what="probe the interpreter").stdout.strip()


def build_payload_image(
    engine: Engine,
    wheelhouse: Path,
    lock: Path | None = None,
    *,
    base: str | None = None,
    rootfs: RootfsSpec | None = None,
    deps_archive: DepsArchive | None = None,
) -> PayloadImage:
    """Build (or reuse) the payload image for ``wheelhouse`` on the local ``engine``; tag = hash of its inputs.

    ``deps_archive``: the wheelhouse's dependencies archive (:func:`~dlinfra.images.deps_archive.build_deps_archive`),
    unpacked into the image where it fits its interpreter, as on every bm and vm target.
    """
    lock = lock or wheelhouse / "requirements.lock"
    if not lock.is_file():
        raise DlinfraError(f"wheelhouse {wheelhouse} has no lock file {lock.name}", "build it with build_wheelhouse()")
    if engine.via:
        raise DlinfraError(f"{engine.label}: images are built on the controller", "build locally, then ship_image")
    started = time.monotonic()
    text = lock.read_text()
    deps, own = split_lock(text)
    if not deps and not own:
        raise DlinfraError(f"lock {lock} lists no requirements", "rebuild the wheelhouse")
    # One build at a time per engine on this machine: two processes that miss the same tag (two test workers, two
    # campaigns) would each commit it, and the payload image of one would sit on the other's dependencies image.
    with machine_lock(f"{engine.kind}-payload-image"):
        base_ref = base_image(engine, base, rootfs)
        base_id = _image_id(engine, base_ref)
        lock_sha = hashlib.sha256(text.encode()).hexdigest()
        archive_sha = deps_archive.sha256 if deps_archive is not None else None
        deps_tag = f"{DEPS_REPO}:{cache_key({'base': base_id, 'deps': sorted(deps), 'archive': archive_sha})}"
        if not engine.exists("image", deps_tag):
            with building():
                labels = {"dlinfra.kind": "deps", BASE_LABEL: base_id}
                _install_layer(
                    engine, base_ref, deps_tag, wheelhouse, deps, no_deps=False, labels=labels, archive=deps_archive
                )
        deps_id = _image_id(engine, deps_tag)
        # Keyed by the image it sits on (its id, not its tag): one lock over a pip-installed dependencies layer and
        # over the unpacked archive are two images, and so are two builds of one tag (a removed and rebuilt one).
        tag = f"{PAYLOAD_REPO}:{cache_key({'lock': lock_sha, 'deps': deps_id})}"
        if not engine.exists("image", tag):
            if own:
                labels = {"dlinfra.kind": "payload", "dlinfra.lock_sha256": lock_sha, BASE_LABEL: base_id}
                with building():
                    _install_layer(engine, deps_tag, tag, wheelhouse, own, no_deps=True, labels=labels)
            else:
                engine.run("tag", deps_tag, tag, what="tag payload image")
            # Images older than the base label are counted with the default base's line (where they came from).
            lines = {base_id, None} if base is None else {base_id}
            prune_images(engine, PAYLOAD_REPO, keep={tag}, lines=lines)
            prune_images(engine, DEPS_REPO, keep={deps_tag}, keep_last=3, lines=lines)
        image_id = _image_id(engine, tag)
    return PayloadImage(tag, image_id, lock_sha, PYTHON, time.monotonic() - started, deps_tag, deps_id)


def prune_images(
    engine: Engine, repository: str, *, keep: set[str], keep_last: int = 4, lines: set[str | None] | None = None
) -> list[str]:
    """Untag all but the newest ``keep_last`` images of ``repository`` (every source edit makes a new one).

    ``lines``: only the images whose base (label :data:`BASE_LABEL`; None: no label) is one of these count. The
    images over another base (a user's ``base_image``) are another line of builds: pruning them for this one made
    their next build start again (a TensorFlow layer: minutes, and a new image under the old tag). ``rmi`` without
    force: an image a container still uses stays. Also drops cached tarballs of images the engine no longer has.
    """
    out = engine.run("images", repository, "--format", "{{.Repository}}:{{.Tag}}", check=False).stdout
    refs = [line.strip().removeprefix("localhost/") for line in out.splitlines() if line.strip()]
    created = {}
    for ref in refs:
        shown = engine.run("image", "inspect", "--format", "{{.Created}}|{{json .Config.Labels}}", ref, check=False)
        when, _, labels = shown.stdout.strip().partition("|")
        try:
            over = (json.loads(labels) or {}).get(BASE_LABEL)
        except (ValueError, AttributeError):
            over = None
        if lines is None or over in lines:
            created[ref] = when
    ordered = sorted(created, key=lambda ref: created[ref], reverse=True)
    removed = []
    for ref in ordered[keep_last:]:
        if ref not in keep and engine.run("rmi", ref, check=False).returncode == 0:
            removed.append(ref)
    _prune_tarballs(engine)
    return removed


def _prune_tarballs(engine: Engine) -> None:
    root = cache_dir("images", {}).parent
    for meta in root.glob("*/meta.json"):
        try:
            info = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if info.get("engine") == engine.kind and not engine.exists("image", str(info.get("id"))):
            shutil.rmtree(meta.parent, ignore_errors=True)


#: Saved payload images kept in the cache (each ~1 GB): docker's and podman's of this payload, and older ones.
KEEP_SAVED_IMAGES = 4


def save_image(engine: Engine, ref: str) -> Path:
    """The image saved as a tarball in the controller cache, keyed by engine kind and image id."""
    image_id = _image_id(engine, ref)
    folder = cache_dir("images", {"engine": engine.kind, "id": image_id, "ref": ref})
    tarball = folder / "image.tar"
    if tarball.exists():
        keep_recent(folder, KEEP_SAVED_IMAGES)
        return tarball
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"image.tar.partial-{os.getpid()}"
    args = ["save", "-o", str(partial), ref]
    if engine.kind == "podman":
        args = ["save", "--format", "docker-archive", "-o", str(partial), ref]
    with building():
        engine.run(*args, what="save image", timeout=1800)
    partial.rename(tarball)  # atomic: a half-written tarball is never taken for a cached one
    (folder / "meta.json").write_text(json.dumps({"engine": engine.kind, "id": image_id, "ref": ref}))
    keep_recent(folder, KEEP_SAVED_IMAGES)
    return tarball


def save_layers_above(engine: Engine, ref: str, base_ref: str) -> Path:
    """``ref`` saved without the layers it shares with ``base_ref``: all that an engine holding ``base_ref`` needs.

    Why: a ctr-vm guest boots with the payload's dependencies image in its Docker store (baked into the guest
    image, which is keyed by the dependencies), so after a source edit only dlinfra's own layer has to reach it,
    where the whole image loads into an emulated guest at about 2 MB/s. ``docker load`` takes a layer its store
    already has (by chain id) without reading it from the archive, so the archive leaves those layers out.
    Docker's archive format; the result is cached beside the whole image's tarball."""
    full = save_image(engine, ref)
    below = layer_ids(engine, base_ref)
    thin = full.parent / f"above-{cache_key({'below': below})}.tar"
    if thin.exists():
        return thin
    with tarfile.open(full) as source:
        manifest = json.loads(_member_bytes(source, "manifest.json"))
        layers = manifest[0]["Layers"]
        diff_ids = json.loads(_member_bytes(source, manifest[0]["Config"]))["rootfs"]["diff_ids"]
        if diff_ids[: len(below)] != below:
            raise DlinfraError(f"image {ref} does not sit on {base_ref}: its layers differ", "a bug: report it")
        left_out = set(layers[: len(below)])
        partial = full.parent / f"{thin.name}.partial-{os.getpid()}"
        with tarfile.open(partial, "w") as out:
            for member in source:
                if member.name not in left_out:
                    out.addfile(member, source.extractfile(member) if member.isfile() else None)
    partial.rename(thin)  # atomic: a half-written archive is never taken for a cached one
    return thin


def layer_ids(engine: Engine, ref: str) -> list[str]:
    """The image's layers, bottom first (their diff ids): an image sits on another when it starts with its layers."""
    shown = engine.run("image", "inspect", "--format", "{{json .RootFS.Layers}}", ref, what="image inspect")
    return list(json.loads(shown.stdout))


def _member_bytes(archive: tarfile.TarFile, name: str) -> bytes:
    """One small file of a saved image (its manifest, its config)."""
    handle = archive.extractfile(name)
    if handle is None:
        raise DlinfraError(f"{archive.name}: {name} is not a file in the saved image", "delete it from the cache")
    return handle.read()
