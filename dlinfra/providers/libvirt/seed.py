"""The per-guest seed disk: the guest's own SSH host key, the controller's authorized key, a static address.

Choice: a tiny ext4 disk (``mkfs.ext4 -d``, label ``cidata``) read by a
oneshot unit baked into our image, ordered before sshd and networkd. It costs
a few hundred milliseconds of guest boot, where cloud-init (Python, many
modules) costs tens of seconds under emulation, and needs no package beyond
e2fsprogs on the controller. For user-supplied cloud images the same folder
also carries NoCloud ``meta-data``/``user-data``/``network-config``, written
to a vfat disk labelled ``cidata`` (cloud-init reads only vfat or iso9660).

The host key pair is generated here, on the controller, so the controller's
known_hosts entry is exact before the guest first boots: SSH runs with
``StrictHostKeyChecking yes`` and never trusts on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dlinfra.errors import DlinfraError

SEED_SIZE_BYTES = 8 * 1024**2


@dataclass(frozen=True)
class SeedInputs:
    """Everything one guest's seed carries."""

    hostname: str
    user: str
    authorized_key: str  # the controller's public key line
    mac: str
    address: str  # 10.214.10.10
    prefix: int
    gateway: str


@dataclass(frozen=True)
class HostKey:
    """A guest's SSH host key, made on the controller."""

    private: Path
    public_line: str  # "ssh-ed25519 AAAA..."


def make_host_key(directory: Path, name: str) -> HostKey:
    """Generate an ed25519 host key for guest ``name`` in the run's private ``directory``."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = directory / f"{name}_ssh_host_ed25519_key"
    for stale in (private, private.with_name(private.name + ".pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(private)], check=True, capture_output=True
    )
    public = private.with_name(private.name + ".pub").read_text().split()
    return HostKey(private, f"{public[0]} {public[1]}")


def make_client_key(directory: Path) -> Path:
    """Generate the run's controller key pair (used when the campaign names none); returns the private key."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = directory / "id_ed25519"
    if not private.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dlinfra-controller", "-f", str(private)],
            check=True,
            capture_output=True,
        )
    return private


def known_hosts_line(address: str, key: HostKey) -> str:
    return f"{address} {key.public_line}\n"


def _network_unit(inputs: SeedInputs) -> str:
    return (
        "[Match]\n"
        f"MACAddress={inputs.mac}\n\n"
        "[Network]\n"
        f"Address={inputs.address}/{inputs.prefix}\n"
        f"Gateway={inputs.gateway}\n"
        f"DNS={inputs.gateway}\n"
        "LinkLocalAddressing=no\n"
        "IPv6AcceptRA=no\n"
    )


def _nocloud(inputs: SeedInputs, host_key: HostKey) -> dict[str, str]:
    """NoCloud files for cloud images: JSON is valid YAML, so no YAML writer (and no quoting bugs) is needed."""
    meta = {"instance-id": inputs.hostname, "local-hostname": inputs.hostname}
    user_data = {
        "users": [
            {
                "name": inputs.user,
                "shell": "/bin/bash",
                "lock_passwd": True,
                "ssh_authorized_keys": [inputs.authorized_key],
            }
        ],
        "disable_root": True,
        "ssh_pwauth": False,
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [],
        "ssh_keys": {"ed25519_private": host_key.private.read_text(), "ed25519_public": host_key.public_line},
    }
    network = {
        "version": 2,
        "ethernets": {
            "eth0": {
                "match": {"macaddress": inputs.mac},
                "set-name": "eth0",
                "addresses": [f"{inputs.address}/{inputs.prefix}"],
                "routes": [{"to": "default", "via": inputs.gateway}],
                "nameservers": {"addresses": [inputs.gateway]},
            }
        },
    }
    return {
        "meta-data": json.dumps(meta, indent=1) + "\n",
        "user-data": "#cloud-config\n" + json.dumps(user_data, indent=1) + "\n",
        "network-config": json.dumps(network, indent=1) + "\n",
    }


def write_seed_tree(folder: Path, inputs: SeedInputs, host_key: HostKey) -> None:
    """Lay out the seed's files in ``folder`` (both our layout and NoCloud's)."""
    own = folder / "dlinfra"
    own.mkdir(parents=True, mode=0o700)
    (own / "hostname").write_text(inputs.hostname + "\n")
    (own / "user").write_text(inputs.user + "\n")
    (own / "authorized_keys").write_text(inputs.authorized_key.strip() + "\n")
    shutil.copyfile(host_key.private, own / "ssh_host_ed25519_key")
    (own / "ssh_host_ed25519_key").chmod(0o600)
    (own / "ssh_host_ed25519_key.pub").write_text(host_key.public_line + "\n")
    (own / "10-dlinfra.network").write_text(_network_unit(inputs))
    (own / "resolv.conf").write_text(f"nameserver {inputs.gateway}\n")
    for name, text in _nocloud(inputs, host_key).items():
        (folder / name).write_text(text)


def build_seed_disk(workdir: Path, inputs: SeedInputs, host_key: HostKey, style: str = "dlinfra") -> Path:
    """Build the seed disk image in ``workdir`` (private, 0600) and return its path."""
    tree = workdir / f"{inputs.hostname}-seed"
    if tree.exists():
        shutil.rmtree(tree)
    write_seed_tree(tree, inputs, host_key)
    disk = workdir / f"{inputs.hostname}-seed.img"
    disk.unlink(missing_ok=True)
    fd = os.open(disk, os.O_CREAT | os.O_WRONLY, 0o600)
    os.ftruncate(fd, SEED_SIZE_BYTES)
    os.close(fd)
    try:
        if style == "nocloud":
            _vfat(tree, disk)
        else:
            result = subprocess.run(
                ["mkfs.ext4", "-q", "-F", "-L", "cidata", "-d", str(tree), str(disk)], capture_output=True, text=True
            )
            if result.returncode != 0:
                raise DlinfraError(f"cannot build the seed disk for {inputs.hostname}: {result.stderr.strip()}")
    finally:
        shutil.rmtree(tree)  # the private host key must not linger in a plain folder
    return disk


def _vfat(tree: Path, disk: Path) -> None:
    """A NoCloud seed for cloud images: vfat labelled cidata (needs dosfstools and mtools)."""
    if not (shutil.which("mkfs.vfat") and shutil.which("mcopy")):
        raise DlinfraError(
            "a cloud image's NoCloud seed needs mkfs.vfat and mcopy", "apt-get install dosfstools mtools"
        )
    subprocess.run(["mkfs.vfat", "-n", "CIDATA", str(disk)], check=True, capture_output=True)
    entries = [str(p) for p in sorted(tree.iterdir()) if p.name != "dlinfra"]
    subprocess.run(["mcopy", "-i", str(disk), *entries, "::"], check=True, capture_output=True)
