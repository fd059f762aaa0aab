"""The seed disk carries exactly one guest's identity: its own host key, the controller's key, its address; the
seed script that applies it at boot mounts it where no other boot service empties the folder."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from support import need_binary

from dlinfra.providers.libvirt.image import SEED_SCRIPT, SEED_UNIT
from dlinfra.providers.libvirt.seed import SeedInputs, build_seed_disk, known_hosts_line, make_host_key, write_seed_tree

INPUTS = SeedInputs("g1", "dlinfra", "ssh-ed25519 AAAAC3Nz controller", "52:54:00:01:02:03", "10.214.10.10", 24,
                    "10.214.10.1")  # fmt: skip


def test_seed_tree(tmp_path: Path) -> None:
    need_binary("ssh-keygen")
    key = make_host_key(tmp_path / "keys", "g1")
    assert key.public_line.startswith("ssh-ed25519 ")
    assert known_hosts_line("10.214.10.10", key) == f"10.214.10.10 {key.public_line}\n"
    tree = tmp_path / "seed"
    write_seed_tree(tree, INPUTS, key)
    own = tree / "dlinfra"
    assert (own / "ssh_host_ed25519_key").read_text() == key.private.read_text()
    assert (own / "ssh_host_ed25519_key").stat().st_mode & 0o077 == 0
    assert (own / "authorized_keys").read_text() == "ssh-ed25519 AAAAC3Nz controller\n"
    network = (own / "10-dlinfra.network").read_text()
    assert "MACAddress=52:54:00:01:02:03" in network and "Address=10.214.10.10/24" in network
    assert "Gateway=10.214.10.1" in network
    # NoCloud for cloud images: JSON bodies (valid YAML) with the same identity.
    user_data = json.loads((tree / "user-data").read_text().removeprefix("#cloud-config\n"))
    assert user_data["ssh_keys"]["ed25519_public"] == key.public_line
    assert user_data["users"][0]["ssh_authorized_keys"] == [INPUTS.authorized_key]
    assert json.loads((tree / "meta-data").read_text())["local-hostname"] == "g1"


def test_seed_disk_is_ext4_labelled_cidata_and_private(tmp_path: Path) -> None:
    need_binary("mkfs.ext4")
    blkid = need_binary("blkid")
    key = make_host_key(tmp_path, "g1")
    disk = build_seed_disk(tmp_path, INPUTS, key)
    assert disk.stat().st_mode & 0o077 == 0
    assert not (tmp_path / "g1-seed").exists(), "the plain-file copy of the host key must be gone"
    probe = subprocess.run([blkid, "-o", "export", str(disk)], capture_output=True, text=True).stdout
    assert "LABEL=cidata" in probe and "TYPE=ext4" in probe


def test_the_seed_mounts_its_disk_where_no_boot_service_empties_it() -> None:
    """A booted guest cannot show this race on demand: the seed mounted its disk on a ``mktemp -d`` folder in /tmp,
    and systemd-tmpfiles-setup, starting beside it, empties /tmp. One boot in a few on a busy machine lost the
    folder between the two commands ("mount point does not exist"): the guest came up without its network and
    sshd and was reset 120 s after its login prompt (the kept console of a fresh-clone demo showed it)."""
    folders = re.findall(r"mktemp -d(?: (\S+))?", SEED_SCRIPT)
    assert folders, "the seed no longer makes a mount point: update this test"
    for template in folders:
        where = template or "TMPDIR (/tmp)"
        assert template.startswith("/run/"), f"mktemp -d in {where}: systemd-tmpfiles empties /tmp at boot"
    assert "DefaultDependencies=no" in SEED_UNIT  # why it runs beside systemd-tmpfiles-setup, before sysinit.target
