"""The base guest image: a Debian rootfs made bootable, cached as qcow2 with its kernel and initrd beside it.

Built from :func:`dlinfra.images.rootfs.build_rootfs` (Debian's mirror only),
laid into an ext4 filesystem with ``mkfs.ext4 -d`` (no loop mounts, no
bootloader: libvirt boots the extracted kernel directly), converted to qcow2
and kept in the cache keyed by its inputs. Guests never write to it: each gets
a copy-on-write overlay (see ``provider``). A user may instead supply a cloud
image with its own bootloader and cloud-init (:func:`cloud_image`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra import cancel
from dlinfra.cache import build_once, cache_dir, keep_recent, need_free_space
from dlinfra.errors import DlinfraError
from dlinfra.images.deps_archive import PROBE, DepsArchive, build_deps_archive, install_own_wheel
from dlinfra.images.rootfs import RootfsSpec, build_rootfs, rootfs_key
from dlinfra.runtime.progress import note
from dlinfra.runtime.wait import WaitTimedOut, wait_for
from dlinfra.testbed.dockerd import unmount_under

if TYPE_CHECKING:
    from dlinfra.images.wheelhouse import Wheelhouse

IMAGE_FORMAT_VERSION = 12  # bump when the customisation below changes: a new cache entry is built
#: What a guest's rootfs holds; those the container image's rootfs lacks are installed into a copy of it.
GUEST_PACKAGES = (
    "apparmor",  # the guest kernel enables AppArmor: dockerd then needs apparmor_parser for docker-default
    "ca-certificates",
    "docker.io",  # the ctr-vm layer's engine; socket-activated, so a plain vm guest never starts it
    "e2fsprogs",
    "initramfs-tools",
    "iproute2",
    "kmod",
    "linux-image-amd64",
    "openssh-server",
    "python3",
    "python3-requests",  # community.docker modules (the ctr-vm up playbook) need it on the guest
    "python3-venv",
    "sysbench",  # seed 000 workloads; the sysbench role then needs no root in the guest
    "systemd-sysv",
    "udev",
)
#: Not quiet: the boot watch reads the kernel's progress on the serial console (see boot.py).
KERNEL_CMDLINE = "root=/dev/vda rw console=ttyS0,115200 net.ifnames=0"
SEED_LABEL = "cidata"
ON_DEMAND_UNITS = ("docker.service", "containerd.service")
PAYLOAD_HOME = ".dlinfra"  # where the payload lives in the login user's home (guest_payload_home)
# Background jobs that would disturb a benchmark (or need the network), and what no one uses, are masked in the image.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-networkd-wait-online.service",
    # Logins on virtual consoles nobody sees (the guest has no display): the serial console's getty stays.
    "getty-static.service",
    "getty@tty1.service",
    "dpkg-db-backup.timer",
    "systemd-tmpfiles-clean.timer",
    # Boot work a benchmark guest has no use for. Under QEMU TCG every program a boot starts costs its one vCPU
    # tenths of a second; these were 10 s of a 39-s boot (serial console, systemd.log_target=kmsg).
    "apparmor.service",  # no profile of its own left (UNUSED_APPARMOR_PROFILES); dockerd loads docker-default itself
    "dev-hugepages.mount",
    "modprobe@configfs.service",
    "modprobe@dm_mod.service",
    "modprobe@efi_pstore.service",
    "modprobe@fuse.service",
    "modprobe@loop.service",
    "proc-sys-fs-binfmt_misc.automount",
    "sys-fs-fuse-connections.mount",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "systemd-binfmt.service",
    "systemd-journal-flush.service",  # the journal stays in /run: a guest lives for one run
    "systemd-random-seed.service",  # a seed file shared by every guest of the image credits no entropy anyway
    "systemd-sysusers.service",  # the image's system users exist
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
)
#: Generators systemd runs before it loads any unit, for what a benchmark guest does not have (encrypted, verity or
#: GPT-discovered disks, SysV scripts, rc.local, hibernation, offline updates); disabled by a link to /dev/null in
#: /etc/systemd/system-generators (systemd.generator(7)). The fstab and getty generators stay: the serial console's
#: login prompt is what the boot watch waits for.
UNUSED_GENERATORS = (
    "systemd-cryptsetup-generator",
    "systemd-debug-generator",
    "systemd-gpt-auto-generator",
    "systemd-hibernate-resume-generator",
    "systemd-integritysetup-generator",
    "systemd-rc-local-generator",
    "systemd-run-generator",
    "systemd-system-update-generator",
    "systemd-sysv-generator",
    "systemd-veritysetup-generator",
)

# Runs every boot before sshd and networkd: applies the per-guest seed disk (label cidata, dlinfra/ folder), or
# the config drive Nova gives (label config-2), converted into that folder by config_drive.py (CONFIG_DRIVE_SEED).
SEED_SCRIPT = r"""#!/bin/sh
# dlinfra first-boot seed: host key, login user and authorized key, hostname, static network.
# blkid scans the disks itself, so a slow udev (heavily loaded, emulated hosts) cannot make us miss the seed.
set -eu
dev=""
label=""
i=0
while [ -z "$dev" ]; do
    for label in cidata config-2; do
        dev=$(blkid -l -o device -t LABEL=$label 2>/dev/null || true)
        [ -n "$dev" ] && break
    done
    [ -n "$dev" ] && break
    i=$((i + 1))
    [ "$i" -ge 600 ] && { echo "dlinfra-seed: no disk labelled cidata or config-2" >&2; exit 1; }
    sleep 1
done
# Under QEMU TCG every program started here costs the boot's one vCPU a few tenths of a second, on the way to sshd:
# the shell's own reads and writes do what they can (the hostname, the login's home, its groups).
# Mounted on /mnt, not in /tmp: systemd-tmpfiles-setup empties /tmp at boot, beside this unit (a mount point made
# there vanished on busy machines, 1 boot in a few, and the guest came up without network or sshd).
mnt=/mnt
[ -d "$mnt" ] || mkdir "$mnt"
mount -o ro "$dev" "$mnt"
s="$mnt/dlinfra"
if [ "$label" = config-2 ]; then
    s=$(mktemp -d /run/dlinfra-seed-drive.XXXXXX)
    python3 /usr/local/lib/dlinfra/config_drive.py "$mnt" "$s" || { umount "$mnt"; exit 1; }
fi
read -r name < "$s/hostname" || [ -n "${name:-}" ]  # (a last line without its newline still counts)
echo "$name" > /etc/hostname
echo "$name" > /proc/sys/kernel/hostname
for key in /etc/ssh/ssh_host_*; do  # the image has none; a key left from an earlier boot goes
    if [ -e "$key" ]; then rm -f /etc/ssh/ssh_host_*; fi
    break
done
install -m 0600 "$s/ssh_host_ed25519_key" /etc/ssh/ssh_host_ed25519_key
install -m 0644 "$s/ssh_host_ed25519_key.pub" /etc/ssh/ssh_host_ed25519_key.pub
read -r user < "$s/user" || [ -n "${user:-}" ]
# ctr-vm drives the guest's dockerd as this user (the guest is the benchmark's own, and the containers
# themselves still run with no capabilities): a member of the docker group, where the image has one.
docker=""
members=""
while IFS=: read -r group _ _ listed; do
    if [ "$group" = docker ]; then docker=docker; members=",$listed,"; fi
done < /etc/group
home=""
while IFS=: read -r login _ _ _ _ dir _; do
    if [ "$login" = "$user" ]; then home=$dir; fi
done < /etc/passwd
if [ -z "$home" ]; then
    home="/home/$user"
    useradd --create-home --home-dir "$home" --shell /bin/bash ${docker:+--groups docker} "$user"
elif [ -n "$docker" ]; then
    case "$members" in *",$user,"*) ;; *) usermod -aG docker "$user" ;; esac
fi
install -d -m 0700 -o "$user" -g "$user" "$home/.ssh"
install -m 0600 -o "$user" -g "$user" "$s/authorized_keys" "$home/.ssh/authorized_keys"
install -m 0644 "$s/10-dlinfra.network" /etc/systemd/network/10-dlinfra.network
install -m 0644 "$s/resolv.conf" /etc/resolv.conf
umount "$mnt"
if [ "$label" = config-2 ]; then
    # Nobody knew this host key before the boot: print it where Nova's console API shows it, as cloud-init does
    # (straight to the console: the journal's copy carries a unit prefix that the reader does not trust).
    { echo "-----BEGIN SSH HOST KEY KEYS-----"; cat "$s/ssh_host_ed25519_key.pub"
      echo "-----END SSH HOST KEY KEYS-----"; } > /dev/console
    rm -rf "$s"
fi
echo "dlinfra-seed: applied to $name from its $label disk"
"""
#: The config drive's converter, copied into the image (stdlib only: it runs on the guest's python3).
CONFIG_DRIVE_SEED = Path(__file__).with_name("config_drive.py")

SEED_UNIT = r"""[Unit]
Description=dlinfra seed: SSH host key, authorized key, static network
DefaultDependencies=no
After=local-fs.target
Before=systemd-networkd.service ssh.service network-pre.target shutdown.target
Wants=network-pre.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
TimeoutStartSec=infinity
StandardOutput=journal+console
ExecStart=/usr/local/sbin/dlinfra-seed

[Install]
WantedBy=multi-user.target
"""

# sshd must never start with another key than the seeded one.
SSH_DROPIN = """[Unit]
Requires=dlinfra-seed.service
After=dlinfra-seed.service
"""

# A small initrd: only what finds the root disk. MODULES=most (Debian's default) packs ~36 MB that an
# emulated guest spends many seconds unpacking and probing.
INITRAMFS_MODULES = "virtio_pci\nvirtio_blk\nvirtio_net\next4\ncrc32c_generic\n"
#: Drivers udev would load at every boot for the q35 machine's own devices (SATA, watchdog, SMBus, PC speaker),
#: for nested KVM, and cfg80211's regulatory database: a benchmark guest uses none of them (its disks and NIC are
#: virtio), and under TCG loading them cost seconds of each boot's CPU.
UNUSED_MODULES = ("ahci", "cfg80211", "i2c_i801", "iTCO_wdt", "iTCO_vendor_support", "kvm", "kvm_amd", "kvm_intel",
                  "lpc_ich", "pcspkr", "serio_raw")  # fmt: skip
#: AppArmor profiles the apparmor package ships for programs a guest does not have; apparmor.service compiled them
#: at every boot (about 9 s under TCG). dockerd still loads its own docker-default profile when ctr-vm starts it.
UNUSED_APPARMOR_PROFILES = ("lsb_release", "nvidia_modprobe")

SSHD_CONFIG = """# dlinfra: keys only, no root, the seeded ed25519 host key only.
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
HostKey /etc/ssh/ssh_host_ed25519_key
UseDNS no
"""


@dataclass(frozen=True)
class GuestImage:
    """A bootable base image: qcow2 disk, and the kernel/initrd/cmdline to boot it directly (None: its bootloader)."""

    disk: Path
    kernel: Path | None = None
    initrd: Path | None = None
    cmdline: str | None = None
    seed_style: str = "dlinfra"  # "dlinfra" (our oneshot unit reads the seed disk) or "nocloud" (cloud-init)
    key: str = ""


def _run(cmd: list[str], what: str, timeout: float = 1800) -> None:
    note(f"guest image: {what}")
    result = cancel.run_process(cmd, timeout=timeout)  # a Ctrl-C stops a build step within seconds
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-2:]
        raise DlinfraError(f"building the guest image: {what} failed: {' | '.join(tail)}")


def _customise(root: Path) -> None:
    """Make the extracted rootfs a guest: no shared identity, our seed unit, networkd, strict sshd."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # debootstrap made these once; every guest must get its own
    (root / "etc/machine-id").write_text("")  # systemd makes a fresh one per guest at first boot
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    (root / "etc/hostname").write_text("dlinfra-guest\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
    resolv = root / "etc/resolv.conf"
    if resolv.exists() or resolv.is_symlink():
        resolv.unlink()
    resolv.write_text("")
    (root / "etc/fstab").write_text("/dev/vda / ext4 rw,noatime,errors=remount-ro 0 0\n")
    (root / "usr/local/sbin").mkdir(parents=True, exist_ok=True)
    script = root / "usr/local/sbin/dlinfra-seed"
    script.write_text(SEED_SCRIPT)
    script.chmod(0o755)
    (root / "usr/local/lib/dlinfra").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CONFIG_DRIVE_SEED, root / "usr/local/lib/dlinfra/config_drive.py")
    (root / "etc/systemd/system/dlinfra-seed.service").write_text(SEED_UNIT)
    sshd_d = root / "etc/ssh/sshd_config.d"
    sshd_d.mkdir(parents=True, exist_ok=True)
    (sshd_d / "10-dlinfra.conf").write_text(SSHD_CONFIG)
    dropin = root / "etc/systemd/system/ssh.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "10-dlinfra-seed.conf").write_text(SSH_DROPIN)
    _skip_unused_at_boot(root)
    _small_initrd(root)
    _run(
        ["systemctl", f"--root={root}", "enable", "dlinfra-seed.service", "systemd-networkd.service", "ssh.service"],
        "enabling guest services",
    )
    _run(["systemctl", f"--root={root}", "mask", *MASKED_UNITS], "masking background units")
    # dockerd and containerd start on the first connection to docker.sock (ctr-vm), not at boot.
    _run(["systemctl", f"--root={root}", "disable", *ON_DEMAND_UNITS], "disabling on-demand units")
    _run(["systemctl", f"--root={root}", "enable", "docker.socket"], "enabling docker.socket")


def guest_payload_home(user: str) -> str:
    """Target.home of a guest of this image: absolute, because a module's working folder is not always the
    login's home (Mitogen runs modules in Ansible's temporary folder)."""
    return f"/home/{user}/{PAYLOAD_HOME}"


def _bake_payload(root: Path, wheelhouse: Wheelhouse, user: str) -> None:
    """Install ``wheelhouse`` for ``user`` in the rootfs the way roles/payload does on a target: from the
    controller's dependencies archive where it fits the guest's interpreter (an unpack, no pip), else with pip."""
    # In the docker group from the start (ctr-vm): the seed then has no usermod to run at every boot.
    _run(["chroot", str(root), "useradd", "--create-home", "--uid", "1000", "--shell", "/bin/bash", "--groups",
          "docker", user], "useradd")  # fmt: skip
    home = guest_payload_home(user)
    inside = root / home.lstrip("/")
    archive = build_deps_archive(wheelhouse)
    probe = subprocess.run(["chroot", str(root), "python3", "-c", PROBE], capture_output=True, text=True, check=False)
    # The guest's zstd does not matter: the archive is unpacked here, on the controller.
    if archive is not None and probe.stdout.split()[:1] == archive.fits.split()[:1]:
        _unpack_payload(root, home, archive, wheelhouse)
    else:
        _pip_payload(root, home, wheelhouse)
    (inside / "installed.lock.sha256").write_text(wheelhouse.lock_hash + "\n")
    (inside / "installed.deps.sha256").write_text(wheelhouse.deps_hash + "\n")
    _run(["chroot", str(root), "chown", "-R", f"{user}:{user}", f"/home/{user}"], "chown of the payload")


def _unpack_payload(root: Path, home: str, archive: DepsArchive, wheelhouse: Wheelhouse) -> None:
    """The role's archive path, done on the rootfs: the dependencies unpacked into the payload's default store
    (``HOME/deps/SHA256``, as roles/payload lays it out), a venv without pip that reaches them through a .pth
    file, and dlinfra's wheel, checked against its lock, unpacked into the venv."""
    store = f"{home}/deps/{archive.sha256}"  # as the guest sees it; unpacked where the controller sees it
    unpacked = root / store.lstrip("/")
    unpacked.mkdir(parents=True)
    _run(["tar", "--zstd", "-xf", str(archive.path), "-C", str(unpacked)], "unpacking the dependencies")
    (unpacked / ".complete").write_text(archive.sha256 + "\n")
    _run(["chroot", str(root), "python3", "-m", "venv", "--without-pip", f"{home}/venv"], "creating the payload venv")
    site = root / f"{home}/venv/{archive.site_packages}".lstrip("/")
    (site / "dlinfra-deps.pth").write_text(f"import site; site.addsitedir({store!r})\n")
    install_own_wheel(wheelhouse.self_tarball, site)


def _pip_payload(root: Path, home: str, wheelhouse: Wheelhouse) -> None:
    """The role's wheelhouse path, done on the rootfs: a venv, pip from the wheelhouse, offline, hashes checked."""
    inside = root / home.lstrip("/")
    (inside / "wheelhouse").mkdir(parents=True)
    shutil.copyfile(wheelhouse.tarball, inside / "wheelhouse.tar")
    _run(["tar", "-C", str(inside / "wheelhouse"), "-xf", str(inside / "wheelhouse.tar")], "unpacking the wheelhouse")
    venv_python = f"{home}/venv/bin/python"
    pip = [venv_python, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-cache-dir"]
    _run(["chroot", str(root), "python3", "-m", "venv", f"{home}/venv"], "creating the payload venv")
    _run(
        ["chroot", str(root), *pip, "--find-links", f"{home}/wheelhouse", "--require-hashes", "--isolated",
         "-r", f"{home}/wheelhouse/requirements.lock"],
        "installing the payload wheelhouse",
    )  # fmt: skip
    _run(
        ["chroot", str(root), *pip, "--isolated", "--find-links", f"{home}/wheelhouse", "--require-hashes",
         "--no-deps", "--force-reinstall", "-r", f"{home}/wheelhouse/dlinfra.lock"],
        "installing dlinfra itself",
    )  # fmt: skip
    # The role skips copying and unpacking when the marker matches: the 2x320 MB would only bloat the image.
    (inside / "wheelhouse.tar").unlink()
    shutil.rmtree(inside / "wheelhouse")


def _preload_docker_image(root: Path, tarball: Path) -> None:
    """Load a saved image into the rootfs's own Docker store (``/var/lib/docker``), on the controller.

    Why: streaming the 1.7 GB payload image into ``docker load`` inside an emulated guest runs at
    about 2 MB/s (a quarter of an hour per guest); a dockerd here, writing straight into the rootfs,
    takes about a minute, and every guest then boots with the image already in its store.
    """
    with tempfile.TemporaryDirectory(prefix="dlinfra-imgdocker-", dir="/run") as run:
        sock = f"{run}/docker.sock"
        argv = ["dockerd", "--host", f"unix://{sock}", "--pidfile", f"{run}/docker.pid",
                "--exec-root", f"{run}/exec", "--data-root", str(root / "var/lib/docker"), "--bridge", "none",
                "--iptables=false", "--ip6tables=false", "--storage-driver", "overlay2"]  # fmt: skip
        with open(f"{run}/dockerd.log", "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        try:
            client = ["docker", "--host", f"unix://{sock}"]
            try:
                wait_for(
                    "building the guest image: dockerd",
                    lambda: subprocess.run([*client, "version"], capture_output=True).returncode == 0,
                    timeout=90,
                    give_up=lambda: "it exited" if proc.poll() is not None else None,
                )
            except WaitTimedOut:
                tail = Path(f"{run}/dockerd.log").read_text(errors="replace").strip().splitlines()[-2:]
                raise DlinfraError(f"building the guest image: dockerd did not start: {' | '.join(tail)}") from None
            _run([*client, "load", "--quiet", "--input", str(tarball)], "loading the payload image into the guest")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            unmount_under(f"{run}/exec")


def _skip_unused_at_boot(root: Path) -> None:
    """What a boot would load but a benchmark guest never uses: kernel modules udev picks, AppArmor profiles,
    systemd's generators (:data:`UNUSED_GENERATORS`)."""
    blacklist = "".join(f"blacklist {name}\n" for name in UNUSED_MODULES)
    (root / "etc/modprobe.d/dlinfra-guest.conf").write_text(
        f"# dlinfra: devices a benchmark guest does not use\n{blacklist}"
    )
    for name in UNUSED_APPARMOR_PROFILES:
        (root / "etc/apparmor.d" / name).unlink(missing_ok=True)
    generators = root / "etc/systemd/system-generators"
    generators.mkdir(parents=True, exist_ok=True)
    for name in UNUSED_GENERATORS:
        (generators / name).unlink(missing_ok=True)
        (generators / name).symlink_to("/dev/null")
    _run(["systemctl", f"--root={root}", "set-default", "multi-user.target"], "booting to multi-user.target")


def _small_initrd(root: Path) -> None:
    """Rebuild the initrd with only the virtio and ext4 modules (runs mkinitramfs inside the rootfs)."""
    conf = root / "etc/initramfs-tools/initramfs.conf"
    conf.write_text(conf.read_text().replace("MODULES=most", "MODULES=list"))
    (root / "etc/initramfs-tools/modules").write_text(INITRAMFS_MODULES)
    _run(["chroot", str(root), "update-initramfs", "-u", "-k", "all"], "update-initramfs in the rootfs")


def _newest(boot: Path, prefix: str) -> Path:
    found = sorted(boot.glob(f"{prefix}-*"))
    if not found:
        raise DlinfraError(f"building the guest image: no {prefix} in the rootfs", "the rootfs needs linux-image-amd64")
    return found[-1]


def guest_rootfs(suite: str = "bookworm") -> RootfsSpec:
    """The container image's rootfs, plus what only a guest needs: one shared root filesystem, built once."""
    shared = RootfsSpec(suite=suite)
    return RootfsSpec(suite=suite, include=tuple(sorted(set(GUEST_PACKAGES) - set(shared.include))), base=shared)


def build_guest_image(
    suite: str = "bookworm",
    disk_gib: int = 8,
    payload: Wheelhouse | None = None,
    user: str = "dlinfra",
    docker_image: Path | None = None,
) -> GuestImage:
    """Return the cached base image for ``suite``, building it (~1-4 min) the first time.

    With ``payload``, the image also holds that wheelhouse installed for ``user`` exactly as the payload
    role installs it (same files, same pip flags, same marker), so deploying to a fresh guest only verifies
    it: installing TensorFlow inside an emulated guest takes many minutes, natively here under one. An image
    built for an older dlinfra wheel over the same dependencies is reused; the deploy replaces that wheel.
    With ``docker_image`` (a saved image: the ctr-vm payload's dependencies image), the guest's Docker store
    already holds that image.
    """
    for tool in ("mkfs.ext4", "qemu-img", "tar", "systemctl"):
        if shutil.which(tool) is None:
            raise DlinfraError(f"{tool} is not installed", "apt-get install e2fsprogs qemu-utils systemd")
    rootfs_spec = guest_rootfs(suite)
    inputs = {
        "rootfs": rootfs_key(rootfs_spec),
        "disk_gib": disk_gib,
        "format": IMAGE_FORMAT_VERSION,
        "cmdline": KERNEL_CMDLINE,
    }
    if payload is not None:
        # Keyed by the dependencies, not by dlinfra's own wheel: after a source edit the cached image is reused and
        # the payload role replaces the baked wheel alone (its ``payload_self_only`` path, seconds), where keying
        # by the whole lock rebuilt the image (mkfs of gigabytes, 1.5 min on a 2-core machine) on every edit.
        inputs["payload"] = {"deps_hash": payload.deps_hash, "user": user}
    if docker_image is not None:
        # The saved archive's cache folder, keyed by the image's id: a dependencies image rebuilt under the same tag
        # is another image, whose payload layer would not load over the old one.
        inputs["docker_image"] = docker_image.parent.name
    out_dir = cache_dir("guest-image", inputs)
    build_once(
        out_dir, "manifest.json", lambda: _build(out_dir, inputs, rootfs_spec, payload, user, docker_image, disk_gib)
    )
    return _load(out_dir)


def _build(
    out_dir: Path,
    inputs: dict[str, Any],
    rootfs_spec: RootfsSpec,
    payload: Wheelhouse | None,
    user: str,
    docker_image: Path | None,
    disk_gib: int,
) -> None:
    """Build the image into ``out_dir`` (under :func:`~dlinfra.cache.build_once`'s lock: one builder at a time)."""
    tarball = build_rootfs(rootfs_spec)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}-build-") as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        _run(["tar", "-C", str(root), "--numeric-owner", "-xpf", str(tarball)], "extracting the rootfs")
        _customise(root)
        if payload is not None:
            _bake_payload(root, payload, user)
        if docker_image is not None:
            _preload_docker_image(root, docker_image)
        stage = work / "image"
        stage.mkdir()
        shutil.copy2(_newest(root / "boot", "vmlinuz"), stage / "vmlinuz")
        shutil.copy2(_newest(root / "boot", "initrd.img"), stage / "initrd.img")
        raw = work / "root.raw"
        # The filesystem holds the tree's bytes, then the compressed qcow2 at most half of them, beside it.
        tree = int(subprocess.run(["du", "-sb", "--one-file-system", str(root)], capture_output=True, text=True,
                                  check=True).stdout.split()[0])  # fmt: skip
        need_free_space(work, tree + tree // 2 + 2**29, "the guest image's filesystem")
        with raw.open("wb") as handle:
            handle.truncate(disk_gib * 1024**3)
        _run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-L",
                "dlinfra-root",
                "-i",
                "32768",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                "-d",
                str(root),
                str(raw),
            ],
            "mkfs.ext4 -d",
        )
        kernel = _newest(root / "boot", "vmlinuz").name
        # The tree is in the filesystem now: free its gigabytes before the qcow2 is written beside the raw disk.
        _run(["rm", "-rf", "--one-file-system", "--", str(root)], "removing the extracted tree")
        # Compressed (zstd): a third of the raw size, in the cache and in every pool it is uploaded to, for about
        # 15 s of one core per 2 GB here; QEMU decompresses a cluster on its first read, the guest writes only
        # to its own overlay.
        _run(["qemu-img", "convert", "-c", "-O", "qcow2", "-o", "compression_type=zstd", str(raw),
              str(stage / "base.qcow2")], "qemu-img convert")  # fmt: skip
        raw.unlink()
        (stage / "manifest.json").write_text(
            json.dumps(
                {
                    "inputs": inputs,
                    "cmdline": KERNEL_CMDLINE,
                    "build_seconds": round(time.monotonic() - started, 1),
                    "kernel": kernel,
                },
                indent=2,
                sort_keys=True,
            )
        )
        stage.rename(out_dir)  # atomic: a half-built image is never seen as cached


#: Guest images kept in the cache (each a few GB): this payload's, with and without the ctr-vm image, and one more.
KEEP_GUEST_IMAGES = 3


def _load(out_dir: Path) -> GuestImage:
    keep_recent(out_dir, KEEP_GUEST_IMAGES)
    disk = out_dir / "base.qcow2"
    return GuestImage(
        disk=disk,
        kernel=out_dir / "vmlinuz",
        initrd=out_dir / "initrd.img",
        cmdline=KERNEL_CMDLINE,
        seed_style="dlinfra",
        key=build_key(out_dir.name, disk),
    )


def build_key(inputs_key: str, disk: Path) -> str:
    """The id a hypervisor's pool keeps this image under: what names it (the cache's inputs key, a cloud image's
    size) and when its disk was written.

    Why not the inputs' key alone: a cache emptied and built again gives the same inputs other bytes (the
    dependencies archive baked in has a new sha256). A pool volume found under the old name then booted guests
    whose payload no longer matched the controller's: each vm deploy copied and unpacked the 280 MB archive in
    the emulated guest (135 s instead of seconds). A new build gets a new name, and the pool's older volume is
    pruned as any older image's."""
    return f"{inputs_key}-{disk.stat().st_mtime_ns:x}"


def cloud_image(path: str | os.PathLike[str]) -> GuestImage:
    """A user-supplied cloud image (qcow2 or raw, with a bootloader and cloud-init), seeded by NoCloud."""
    disk = Path(path).expanduser().resolve()
    if not disk.is_file():
        raise DlinfraError(f"cloud image {disk} does not exist", "give the path of a qcow2 or raw cloud image")
    out = subprocess.run(["qemu-img", "info", "--output=json", str(disk)], capture_output=True, text=True)
    if out.returncode != 0:
        raise DlinfraError(f"cloud image {disk} is not a disk image qemu-img can read")
    return GuestImage(disk=disk, seed_style="nocloud", key=build_key(f"cloud-{disk.stat().st_size}", disk))
