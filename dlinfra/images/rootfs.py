"""A Debian root filesystem from debootstrap, cached as a tarball keyed by its inputs.

Containers (``docker import``) and guest images start from it, so nothing is
pulled from a container registry or a cloud image site: only Debian's mirror,
the same one this machine's apt uses.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dlinfra.cache import building, cache_dir
from dlinfra.errors import DlinfraError
from dlinfra.orchestration.progress import note

APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))


@dataclass(frozen=True)
class RootfsSpec:
    """What goes into a rootfs; every field is part of the cache key."""

    suite: str = "bookworm"
    variant: str = "minbase"
    #: sysbench: seed 000 measures it natively and in a container, so the payload image carries it too.
    include: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates", "sysbench")
    arch: str = "amd64"
    extra: dict[str, str] = field(default_factory=dict)


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


def build_rootfs(spec: RootfsSpec = RootfsSpec()) -> Path:
    """Return a cached ``rootfs.tar`` for ``spec``, building it with debootstrap if needed."""
    out_dir = cache_dir("rootfs", {**spec.__dict__, "include": sorted(spec.include)})
    tarball = out_dir / "rootfs.tar"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        raise DlinfraError("debootstrap is not installed", "apt-get install debootstrap (scripts/install-deps.sh)")
    out_dir.mkdir(parents=True, exist_ok=True)
    with building(), tempfile.TemporaryDirectory(dir=out_dir, prefix="build-") as tmp:
        root = Path(tmp) / "root"
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
        # apt lists and caches are large and useless in an image.
        for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
            shutil.rmtree(root / junk, ignore_errors=True)
            (root / junk).mkdir(parents=True, exist_ok=True)
        partial = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.rename(tarball)  # atomic: a half-built tarball is never seen as cached
    return tarball
