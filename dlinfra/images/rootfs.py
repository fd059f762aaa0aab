"""A Debian root filesystem from debootstrap, cached as a tarball keyed by its inputs.

Containers (``docker import``) and guest images start from it, so nothing is
pulled from a container registry or a cloud image site: only Debian's mirror,
the same one this machine's apt uses. The two share one: the guest's rootfs
extends the container's (:attr:`RootfsSpec.base`) with what only a machine
needs (a kernel, an init, sshd, Docker), installed by apt inside a copy of it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlinfra.cache import building, cache_dir, keep_recent
from dlinfra.errors import DlinfraError
from dlinfra.runtime.progress import note

APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))


@dataclass(frozen=True)
class RootfsSpec:
    """What goes into a rootfs; every field is part of the cache key."""

    suite: str = "bookworm"
    variant: str = "minbase"
    #: sysbench: seed 000 measures it natively and in a container, so the payload image carries it too.
    #: zstd: the payload image unpacks the dependencies archive, as the bm and vm targets do.
    include: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates", "sysbench", "zstd")
    arch: str = "amd64"
    extra: dict[str, str] = field(default_factory=dict)
    #: The rootfs this one extends: that one's files, then ``include`` installed into them with apt. None: a
    #: debootstrap of its own. How the container and guest images share one root filesystem: the guest's is the
    #: container's plus a kernel, an init, sshd and Docker, and the part they share is built once.
    base: RootfsSpec | None = None


def rootfs_key(spec: RootfsSpec) -> dict[str, Any]:
    """The cache inputs of ``spec`` (and of the rootfs it extends)."""
    key: dict[str, Any] = {**spec.__dict__, "include": sorted(spec.include)}
    key["base"] = rootfs_key(spec.base) if spec.base is not None else None
    return key


def debian_mirror() -> str:
    """The Debian mirror: ``$DLINFRA_DEBIAN_MIRROR``, else the one this machine's apt uses."""
    explicit = os.environ.get("DLINFRA_DEBIAN_MIRROR")
    if explicit:
        return explicit
    for source in APT_SOURCES:
        if not source.exists():
            continue
        text = source.read_text()
        match = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(
            r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)\s", text, re.M
        )
        if match:
            return match.group(1)
    raise DlinfraError(
        "cannot find a Debian mirror in this machine's apt sources",
        "set DLINFRA_DEBIAN_MIRROR to your mirror's URL",
    )


#: Root filesystems kept in the cache: the container image's and the guest's, and those of one other set of inputs.
KEEP_ROOTFS = 4


def build_rootfs(spec: RootfsSpec = RootfsSpec()) -> Path:
    """Return a cached ``rootfs.tar`` for ``spec``, building it (and the rootfs it extends) if needed."""
    out_dir = cache_dir("rootfs", rootfs_key(spec))
    tarball = out_dir / "rootfs.tar"
    if not tarball.exists():
        _build(spec, out_dir, tarball)
    keep_recent(out_dir, KEEP_ROOTFS)
    return tarball


def _build(spec: RootfsSpec, out_dir: Path, tarball: Path) -> None:
    """One build per key at a time: a second caller (the container and the guest layers come up side by side
    and share the container's rootfs) waits for the first and takes its tarball."""
    base = build_rootfs(spec.base) if spec.base is not None else None
    if shutil.which("debootstrap") is None and base is None:
        raise DlinfraError("debootstrap is not installed", "apt-get install debootstrap (scripts/install-deps.sh)")
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.exists():
            return
        with building(), tempfile.TemporaryDirectory(dir=out_dir, prefix="build-") as tmp:
            root = Path(tmp) / "root"
            if base is None:
                _debootstrap(spec, root)
            else:
                _extend(base, spec, root)
            # apt lists and caches are large and useless in an image.
            for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
                shutil.rmtree(root / junk, ignore_errors=True)
                (root / junk).mkdir(parents=True, exist_ok=True)
            partial = Path(tmp) / "rootfs.tar"
            subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True)
            partial.rename(tarball)  # atomic: a half-built tarball is never seen as cached


def _debootstrap(spec: RootfsSpec, root: Path) -> None:
    cmd = [
        "debootstrap",
        f"--variant={spec.variant}",
        f"--arch={spec.arch}",
        f"--include={','.join(sorted(spec.include))}",
        spec.suite,
        str(root),
        debian_mirror(),
    ]
    note(f"debootstrap {spec.suite} ({spec.variant}, {len(spec.include)} extra packages): a few minutes, once")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise DlinfraError(f"debootstrap of {spec.suite} failed: {' | '.join(tail)}", "check the Debian mirror")


def _extend(base: Path, spec: RootfsSpec, root: Path) -> None:
    """``base`` unpacked into ``root``, then ``spec.include`` installed in it by its own apt, from the mirror its
    debootstrap wrote into it, without recommends (as debootstrap's --include) and with no service started."""
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-xpf", str(base)], check=True)
    note(f"apt-get install of {len(spec.include)} packages into a copy of a cached rootfs: a minute or two, once")
    policy = root / "usr/sbin/policy-rc.d"  # invoke-rc.d asks it: 101 = start no service
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    apt = ["chroot", str(root), "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q"]
    mounted = subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], capture_output=True, text=True)
    if mounted.returncode != 0:  # maintainer scripts read it (as in debootstrap's own chroot)
        raise DlinfraError(f"cannot mount /proc in a copy of the rootfs: {mounted.stderr.strip()}", "run as root")
    steps = {
        "apt-get update": [*apt, "update"],
        "apt-get install": [*apt, "-y", "install", "--no-install-recommends", *sorted(spec.include)],
    }
    try:
        for what, argv in steps.items():
            result = subprocess.run(argv, capture_output=True, text=True)
            if result.returncode != 0:
                tail = " | ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
                raise DlinfraError(f"{what} in a copy of the rootfs failed: {tail}", "check the Debian mirror")
    finally:
        if subprocess.run(["umount", str(root / "proc")], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(root / "proc")], capture_output=True)
        policy.unlink(missing_ok=True)
