"""The seed disk carries exactly one guest's identity: its own host key, the controller's key, its address; the
seed script that applies it at boot mounts it where no other boot service empties the folder."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
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


# -- a guest that Nova boots: the config drive (label config-2) becomes the same seed folder -------------------------

#: What Nova 29 writes (nova/virt/netutils.py, nova/api/metadata/base.py), trimmed to what the seed reads.
NOVA_META = {
    "uuid": "6f1c0c5e-1d5b-4b7e-9a43-0d6f2b3f7a10",
    "name": "dlinfra-vm1",
    "hostname": "dlinfra-vm1.novalocal",
    "public_keys": {"dlinfra-r1": "ssh-ed25519 AAAAC3Nzrunkey dlinfra-controller"},
    "meta": {"dlinfra_run": "r1", "dlinfra_user": "bench"},
}
NOVA_NETWORK = {
    "links": [{"id": "tapfdfd0e41-7f", "type": "ovs", "mtu": 1500, "ethernet_mac_address": "fa:16:3e:81:78:1e"}],
    "networks": [{"id": "network0", "type": "ipv4", "link": "tapfdfd0e41-7f", "ip_address": "10.77.0.140",
                  "netmask": "255.255.255.0", "network_id": "n1",
                  "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.77.0.1"}]}],
    "services": [],
}  # fmt: skip


def _drive(tmp_path: Path, meta: dict, network: dict) -> Path:
    latest = tmp_path / "drive" / "openstack" / "latest"
    latest.mkdir(parents=True, exist_ok=True)
    (latest / "meta_data.json").write_text(json.dumps(meta))
    (latest / "network_data.json").write_text(json.dumps(network))
    return tmp_path / "drive"


def test_a_config_drive_becomes_the_seed_folder_with_a_host_key_kept_per_server(tmp_path: Path) -> None:
    need_binary("ssh-keygen")
    from dlinfra.providers.libvirt.config_drive import convert

    kept = tmp_path / "var/ssh_host_ed25519_key"
    drive = _drive(tmp_path, NOVA_META, NOVA_NETWORK)
    convert(drive, tmp_path / "s1", kept)
    own = tmp_path / "s1"
    assert (own / "hostname").read_text() == "dlinfra-vm1\n"
    assert (own / "user").read_text() == "bench\n"  # the provider's user option, through the server's metadata
    assert (own / "authorized_keys").read_text() == "ssh-ed25519 AAAAC3Nzrunkey dlinfra-controller\n"
    network = (own / "10-dlinfra.network").read_text()
    assert "MACAddress=fa:16:3e:81:78:1e" in network and "Address=10.77.0.140/24" in network
    assert "Gateway=10.77.0.1" in network and "DHCP" not in network
    assert (own / "resolv.conf").read_text() == "nameserver 10.77.0.1\n"
    public = (own / "ssh_host_ed25519_key.pub").read_text()
    assert public.startswith("ssh-ed25519 ") and (own / "ssh_host_ed25519_key").stat().st_mode & 0o077 == 0
    # A reboot of the same server keeps the key its console printed; another server gets its own.
    convert(drive, tmp_path / "s2", kept)
    assert (tmp_path / "s2/ssh_host_ed25519_key.pub").read_text() == public
    other = _drive(tmp_path, {**NOVA_META, "uuid": "another-server"}, NOVA_NETWORK)
    convert(other, tmp_path / "s3", kept)
    assert (tmp_path / "s3/ssh_host_ed25519_key.pub").read_text() != public


def test_a_config_drive_with_dhcp_or_without_a_key_or_address(tmp_path: Path) -> None:
    from dlinfra.providers.libvirt.config_drive import DriveError, convert, main, network_unit

    dhcp = {**NOVA_NETWORK, "networks": [{**NOVA_NETWORK["networks"][0], "type": "ipv4_dhcp"}]}
    unit, resolv = network_unit(dhcp)
    assert "DHCP=ipv4" in unit and "\nAddress=" not in unit and resolv == ""
    with pytest.raises(DriveError, match="no public_keys"):
        convert(_drive(tmp_path, {**NOVA_META, "public_keys": {}}, NOVA_NETWORK), tmp_path / "s", tmp_path / "k")
    with pytest.raises(DriveError, match="no IPv4 network"):
        network_unit({**NOVA_NETWORK, "networks": [{**NOVA_NETWORK["networks"][0], "type": "ipv6"}]})
    with pytest.raises(DriveError, match="not a user name"):
        convert(_drive(tmp_path, {**NOVA_META, "meta": {"dlinfra_user": "x;reboot"}}, NOVA_NETWORK),
                tmp_path / "s", tmp_path / "k")  # fmt: skip
    assert main(["config_drive.py", str(tmp_path / "nowhere"), str(tmp_path / "s")]) == 1


def test_the_seed_finds_a_config_drive_and_prints_its_new_host_key_on_the_console() -> None:
    """Checked booted in the Nova probe (docs/openstack.md); here, that the image's script has both paths."""
    assert "for label in cidata config-2" in SEED_SCRIPT
    assert "python3 /usr/local/lib/dlinfra/config_drive.py" in SEED_SCRIPT
    printed = SEED_SCRIPT[SEED_SCRIPT.index("BEGIN SSH HOST KEY KEYS") :]
    assert "END SSH HOST KEY KEYS" in printed and "> /dev/console" in printed
