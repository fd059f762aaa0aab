"""The ``vm`` layer: libvirt guests on a hypervisor host, returned as SSH targets.

Order matters and is the point of this module: the request is checked against
the host (CPUs exist and are online, memory is there, NUMA node exists, PCI
devices pass the IOMMU checks) before anything is defined; then the run's
network, overlays, seeds and domains are made, each named after the run's
label, and ``down()`` removes exactly those. ``sweep()`` does the same by label
after a crashed controller.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra.cache import cache_root
from dlinfra.errors import SpecError, TargetError
from dlinfra.orchestration.progress import note, say
from dlinfra.orchestration.runs_registry import RunClaim, claim
from dlinfra.payload.cpuset import format_cpuset
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.libvirt import storage
from dlinfra.providers.libvirt.boot import (
    KVM_STALL_S,
    ConsoleWatch,
    host_key,
    kvm_stalled,
    remember_stall,
    remembered_stall,
)
from dlinfra.providers.libvirt.daemons import ensure_daemons
from dlinfra.providers.libvirt.domain import DomainPlan, domain_xml, run_label_of
from dlinfra.providers.libvirt.image import GuestImage, build_guest_image, cloud_image
from dlinfra.providers.libvirt.network import (
    RunNetwork,
    create_network,
    libvirt_subnets,
    local_routes,
    plan_network,
)
from dlinfra.providers.libvirt.passthrough import PciDevice, SysfsHost, check_passthrough
from dlinfra.providers.libvirt.seed import SeedInputs, build_seed_disk, known_hosts_line, make_client_key, make_host_key
from dlinfra.providers.libvirt.spec import GUEST_FIELDS, GuestSpec

if TYPE_CHECKING:
    import libvirt

SERIAL_LOG_DIR = "/var/log/libvirt/qemu"
PROVIDER_OPTIONS = {"uri", "pool", "subnet", "boot_timeout", "cloud_image"}
LOCAL_URIS = ("qemu:///system", "qemu:///session")


def _libvirt():
    try:
        import libvirt
    except ImportError as exc:
        raise TargetError(
            "libvirt-python is not installed on the controller",
            "pip install 'dlinfra[controller]' (needs libvirt-dev to build)",
        ) from exc
    # libvirt prints every error to stderr by default; ours are raised as DlinfraErrors instead.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def new_run_label() -> str:
    """A short label owned by one run; every name the run creates starts with ``dlinfra-<label>``."""
    return "r" + secrets.token_hex(4)


@dataclass
class HostChecks:
    """What validation found, kept so ``up`` does not read the host twice."""

    devices: dict[str, list[PciDevice]] = field(default_factory=dict)
    virt_type: dict[str, str] = field(default_factory=dict)


class LibvirtProvider:
    """Guests under libvirt on one hypervisor host (``uri``), as ``vm`` targets."""

    layer = "vm"

    def __init__(
        self,
        uri: str = "qemu:///system",
        *,
        physical_host: str | None = None,
        pool: str = storage.DEFAULT_POOL,
        pool_path: str = storage.DEFAULT_POOL_PATH,
        sysfs_root: str | Path | None = None,
        image: GuestImage | None = None,
        ssh_user: str = "dlinfra",
        ssh_key: Path | None = None,
        state_dir: Path | None = None,
        run_label: str | None = None,
        subnet: str | None = None,
        boot_timeout: float = 300.0,
    ) -> None:
        self.uri = uri
        self.pool_name = pool
        self.pool_path = pool_path
        self.sysfs_root = sysfs_root if sysfs_root is not None else ("/" if uri in LOCAL_URIS else None)
        self.image = image
        self.ssh_user = ssh_user
        self.ssh_key = ssh_key
        self.run_label = run_label or new_run_label()
        self.state_dir = state_dir or cache_root() / "runs" / f"vm-{self.run_label}"
        self.subnet = ipaddress.ip_network(subnet) if subnet else None
        self.boot_timeout = boot_timeout
        self._conn: libvirt.virConnect | None = None
        self._physical_host = physical_host
        self.targets: list[Target] = []
        self.timings: dict[str, float] = {}
        #: The last console watch of each guest (by name): how far its latest boot got.
        self.consoles: dict[str, ConsoleWatch] = {}
        self._claim: RunClaim | None = None  # this run's label in the run registry, held until down() removed it all

    # -- connection ---------------------------------------------------------------------------------------------

    @property
    def conn(self) -> libvirt.virConnect:
        if self._conn is None:
            lv = _libvirt()
            if self.uri in LOCAL_URIS:
                ensure_daemons()
            try:
                self._conn = lv.open(self.uri)
            except lv.libvirtError as exc:
                raise TargetError(
                    f"cannot connect to libvirt at {self.uri}: {exc.get_error_message()}",
                    "is libvirtd running there, and may this user reach it?",
                ) from exc
        return self._conn

    @property
    def host(self) -> str:
        """The hypervisor host's name, as error messages and targets give it."""
        if self._physical_host is None:
            self._physical_host = self.conn.getHostname()
        return self._physical_host

    def domain_name(self, guest: str) -> str:
        return f"dlinfra-{self.run_label}-{guest}"

    # -- validation (reads the host, changes nothing) --------------------------------------------------------

    def validate(self, guests: list[GuestSpec]) -> HostChecks:
        """Check the request against the host; raise one clear error naming host and field before defining."""
        if not guests:
            raise SpecError("vm layer: no guests requested", "list at least one guest under guests:")
        names = [g.name for g in guests]
        if len(set(names)) != len(names):
            raise SpecError(f"vm layer: guest names repeat: {', '.join(sorted(names))}", "give each guest its own name")
        conn = self.conn
        info = conn.getInfo()  # [model, memory MiB, cpus, MHz, nodes, sockets, cores, threads]
        ncpus, online, _count = conn.getCPUMap()
        online_cpus = [i for i, up in enumerate(online) if up]
        checks = HostChecks()
        for guest in guests:
            where = f"{self.host}: guest {guest.name}"
            for field_name, cpus in (("cpuset", guest.cpuset), ("emulator_cpuset", guest.emulator_cpuset)):
                bad = [c for c in cpus if c >= ncpus or not online[c]]
                if bad:
                    raise SpecError(
                        f"{where}: {field_name} {format_cpuset(cpus)} names CPU(s) "
                        f"{format_cpuset(tuple(bad))} that the host does not have online",
                        f"the host's online CPUs are {format_cpuset(tuple(online_cpus))}",
                    )
            if guest.vcpus > len(online_cpus):
                raise SpecError(
                    f"{where}: {guest.vcpus} vCPUs but the host has {len(online_cpus)} online CPUs",
                    "a benchmark guest must not overcommit CPUs",
                )
            if guest.numa_node is not None and guest.numa_node >= max(int(info[4]), 1):
                raise SpecError(
                    f"{where}: numa_node {guest.numa_node} does not exist",
                    f"the host has NUMA node(s) 0-{max(int(info[4]), 1) - 1}",
                )
            checks.virt_type[guest.name] = self._virt_type(guest, where)
        total_mib = int(info[1])
        asked_mib = sum(g.memory_mib for g in guests)
        if asked_mib > total_mib:
            raise SpecError(
                f"{self.host}: guests ask for {asked_mib} MiB of memory but the host has {total_mib} MiB",
                "lower memory_mib or use fewer guests per host",
            )
        free_mib = self._available_mib()
        if free_mib is not None and asked_mib > free_mib:
            raise SpecError(
                f"{self.host}: guests ask for {asked_mib} MiB of memory but only {free_mib} MiB are available",
                "lower memory_mib, or stop what uses the host's memory",
            )
        for guest in guests:
            if guest.hugepages:
                self._check_hugepages(guest)
            if guest.devices:
                checks.devices[guest.name] = check_passthrough(self._pci_host(), guest.devices)
        taken: dict[str, str] = {}
        for name, devices in checks.devices.items():
            for device in devices:
                other = taken.setdefault(str(device.address), name)
                if other != name:
                    raise SpecError(
                        f"{self.host}: PCI device {device.address} is asked for by guests {other} and {name}",
                        "a device can be passed to one guest only",
                    )
        return checks

    def _available_mib(self) -> int | None:
        """Memory the host can give (free + page cache + buffers), or None when the driver cannot tell."""
        lv = _libvirt()
        try:
            stats = self.conn.getMemoryStats(lv.VIR_NODE_MEMORY_STATS_ALL_CELLS, 0)
        except lv.libvirtError:
            return None
        return int(stats.get("free", 0) + stats.get("cached", 0) + stats.get("buffers", 0)) // 1024

    def _pci_host(self) -> SysfsHost:
        if self.sysfs_root is None:
            raise TargetError(
                f"{self.host}: PCI passthrough checks need the host's sysfs",
                "run dlinfra on the hypervisor host, or pass its sysfs root",
            )
        return SysfsHost(self.host, self.sysfs_root)

    def _virt_type(self, guest: GuestSpec, where: str) -> str:
        """``kvm`` unless the spec allows (``allow``: when KVM is missing) or requires emulation."""
        if guest.emulation == "require":
            if guest.devices:
                raise SpecError(
                    f"{where}: PCI passthrough needs KVM, but emulation is 'require'",
                    "set emulation: never for passthrough guests",
                )
            return "qemu"
        if self.conn.getType().upper() == "TEST" or self._kvm_available():
            return "kvm"
        if guest.emulation == "allow" and not guest.devices:
            return "qemu"
        raise TargetError(
            f"{where}: KVM is not available on this host",
            "enable VT-x/AMD-V and load kvm_intel/kvm_amd, or set emulation: allow (results are then marked emulated)",
        )

    def _kvm_available(self) -> bool:
        lv = _libvirt()
        try:
            self.conn.getDomainCapabilities(None, "x86_64", None, "kvm", 0)
        except lv.libvirtError:
            return False
        return True

    def _check_hugepages(self, guest: GuestSpec) -> None:
        lv = _libvirt()
        try:
            free = self.conn.getFreePages([2048, 1048576], 0, max(int(self.conn.getInfo()[4]), 1), 0)
        except lv.libvirtError:
            return  # the driver cannot tell; libvirt will refuse at start if pages are short
        free_kib = sum(size * count for cell in free.values() for size, count in cell.items())
        if free_kib < guest.memory_mib * 1024:
            raise SpecError(
                f"{self.host}: guest {guest.name} wants {guest.memory_mib} MiB of hugepages, "
                f"{free_kib // 1024} MiB free",
                "reserve hugepages (vm.nr_hugepages or hugepages= on the kernel command line) or set hugepages: false",
            )

    # -- bring up ---------------------------------------------------------------------------------------------

    def up(self, spec: LayerSpec) -> list[Target]:
        """Provider protocol. ``spec.options`` (a campaign's ``layer_options.vm``) holds guest defaults
        (``vcpus``, ``memory_mib``, ``cpuset``, ``emulation``, ...), an optional ``guests`` list of mappings
        that override them per guest (default: one guest ``vm1``), and provider settings
        (``uri``, ``pool``, ``cloud_image``, ``subnet``, ``boot_timeout``).
        """
        options = dict(spec.options)
        unknown = sorted(set(options) - GUEST_FIELDS - PROVIDER_OPTIONS - {"guests"})
        if unknown:
            raise SpecError(
                f"layer_options.vm: unknown option(s) {', '.join(unknown)}",
                f"known: {', '.join(sorted(GUEST_FIELDS | PROVIDER_OPTIONS | {'guests'}))}",
            )
        defaults = {k: v for k, v in options.items() if k in GUEST_FIELDS and k != "name"}
        raw = options.get("guests") or [{"name": "vm1"}]
        if not isinstance(raw, list) or not all(isinstance(g, dict) for g in raw):
            raise SpecError("layer_options.vm.guests must be a list of mappings", "e.g. guests: [{name: vm1}]")
        guests = [GuestSpec.from_dict({**defaults, **g}, f"layer_options.vm.guests[{i}]") for i, g in enumerate(raw)]
        if "uri" in options:
            self.uri = str(options["uri"])
        if "pool" in options:
            self.pool_name = str(options["pool"])
        if "subnet" in options:
            self.subnet = ipaddress.ip_network(str(options["subnet"]))
        if "boot_timeout" in options:
            self.boot_timeout = float(options["boot_timeout"])
        if options.get("cloud_image"):
            self.image = cloud_image(str(options["cloud_image"]))
        if spec.hosts and self._physical_host is None:
            self._physical_host = spec.hosts[0].name
        return self.up_guests(guests)

    def up_guests(self, guests: list[GuestSpec]) -> list[Target]:
        """Validate, then create network, volumes and domains, wait for SSH; clean up everything on failure."""
        if self.targets:
            return self.targets
        checks = self.validate(guests)
        started = time.monotonic()
        image = self.image or build_guest_image()
        self.timings["image_s"] = round(time.monotonic() - started, 1)
        try:
            return self._create(guests, checks, image)
        except BaseException:
            self.down()
            raise

    def _create(self, guests: list[GuestSpec], checks: HostChecks, image: GuestImage) -> list[Target]:
        conn = self.conn
        # Claimed before anything is made, held until down() has removed it: a killed controller's guests are then
        # told from a live run's and removed by `dlinfra sweep` / the next campaign's start.
        self._claim = self._claim or claim(
            self.run_label, "libvirt", uri=self.uri, pool=self.pool_name, state_dir=str(self.state_dir)
        )
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        client_key = self.ssh_key or make_client_key(self.state_dir)
        public_key = Path(str(client_key) + ".pub").read_text().strip()
        taken = libvirt_subnets(conn) + (local_routes() if self.uri in LOCAL_URIS else [])
        net = plan_network(self.run_label, [g.name for g in guests], taken, self.subnet)  # type: ignore[arg-type]
        create_network(conn, net)

        started = time.monotonic()
        pool = storage.ensure_pool(conn, self.pool_name, self.pool_path)
        files: dict[str, tuple[Path, str]] = {"disk": (image.disk, _disk_format(image.disk))}
        if image.kernel:
            files["kernel"] = (image.kernel, "raw")
        if image.initrd:
            files["initrd"] = (image.initrd, "raw")
        base = storage.ensure_base(conn, pool, image.key, files)
        self.timings["upload_s"] = round(time.monotonic() - started, 1)
        capacity = image.virtual_size

        known_hosts = self.state_dir / "known_hosts"
        known_hosts.write_text("")
        plans: list[tuple[GuestSpec, DomainPlan]] = []
        for guest in guests:
            address = net.address_of(guest.name)
            prefix = f"{self.domain_name(guest.name)}"
            overlay = storage.create_overlay(pool, f"{prefix}.qcow2", base["disk"], files["disk"][1], capacity)
            host_key = make_host_key(self.state_dir, guest.name)
            seed_inputs = SeedInputs(
                guest.name, self.ssh_user, public_key, address.mac, address.ip, net.subnet.prefixlen, net.gateway
            )
            seed_file = build_seed_disk(self.state_dir, seed_inputs, host_key, image.seed_style)
            seed_vol = storage.upload(conn, pool, f"{prefix}-seed.img", seed_file, "raw")
            seed_file.unlink()
            host_key.private.unlink()  # the guest holds its private key now; the controller keeps the public half
            with known_hosts.open("a") as fh:
                fh.write(known_hosts_line(address.ip, host_key))
            plan = DomainPlan(
                spec=guest,
                domain_name=self.domain_name(guest.name),
                run_label=self.run_label,
                virt_type=checks.virt_type[guest.name],
                disk_path=overlay.path(),
                network=net.name,
                mac=address.mac,
                seed_path=seed_vol.path(),
                kernel=base.get("kernel"),
                initrd=base.get("initrd"),
                cmdline=image.cmdline,
                host_devices=tuple(d.address for d in checks.devices.get(guest.name, [])),
                serial_log=f"{SERIAL_LOG_DIR}/{prefix}-serial.log" if self.uri in LOCAL_URIS else None,
            )
            plans.append((guest, plan))

        boot_started = time.monotonic()
        plans = [(guest, self._start_domain(self._remembered(plan))) for guest, plan in plans]
        targets = [self._target(guest, plan, net, client_key, known_hosts, checks) for guest, plan in plans]
        for target, (_guest, plan) in zip(targets, plans, strict=True):
            booted = self._boot(target, plan)
            target.emulated = booted.emulated
            target.details.update(virt_type=booted.virt_type, kvm_refused=booted.kvm_refused)
            target.details["boot_to_ssh_s"] = round(time.monotonic() - boot_started, 1)
        self.timings["boot_to_ssh_s"] = round(time.monotonic() - boot_started, 1)
        self.targets = targets
        return targets

    def _verdict_key(self) -> str:
        return host_key(self.host, int(self.conn.getVersion()))

    def _remembered(self, plan: DomainPlan) -> DomainPlan:
        """With ``emulation: allow``, go straight to TCG where KVM was already seen not to boot this kernel."""
        if plan.virt_type != "kvm" or plan.spec.emulation != "allow" or plan.host_devices or not plan.serial_log:
            return plan
        kernel = Path(plan.kernel) if plan.kernel else None
        reason = remembered_stall(self._verdict_key(), kernel, plan.cmdline)
        if reason is None:
            return plan
        say(f"{self.host}: guest {plan.spec.name} boots under QEMU TCG: {reason}")
        return replace(plan, virt_type="qemu", kvm_refused=reason)

    def _boot(self, target: Target, plan: DomainPlan) -> DomainPlan:
        """Wait for the guest; when KVM makes no boot progress, restart it under TCG (allow) or fail (never)."""
        try:
            self._wait_ssh(target, plan)
            return plan
        except _KvmStall as stall:
            reason = f"no boot progress under KVM in {KVM_STALL_S:.0f} s ({stall.console})"
        if plan.spec.emulation != "allow" or plan.host_devices:
            raise TargetError(
                f"{self.host}: guest {target.name} made {reason}",
                "KVM on this host does not run the guest's kernel (nested virtualisation?); "
                "set emulation: allow to fall back to QEMU TCG (rows are marked emulated)",
            )
        remember_stall(self._verdict_key(), Path(plan.kernel) if plan.kernel else None, plan.cmdline, reason)
        say(f"{self.host}: guest {target.name}: {reason}; restarting it under QEMU TCG (rows marked emulated)")
        dom = self.conn.lookupByName(plan.domain_name)
        if dom.isActive():
            dom.destroy()
        dom.undefine()
        emulated = self._start_domain(replace(plan, virt_type="qemu", kvm_refused=reason))
        self._wait_ssh(target, emulated)
        return emulated

    def _start_domain(self, plan: DomainPlan) -> DomainPlan:
        """Define and start; with ``emulation: allow``, a KVM guest QEMU cannot start is retried under TCG.

        /dev/kvm can be present and still refuse an ordinary guest (nested
        virtualisation without the CPU features QEMU sets): libvirt's domain
        capabilities say yes, only starting the guest says no.
        """
        lv = _libvirt()
        dom = None
        try:
            dom = self.conn.defineXML(domain_xml(plan))
            dom.create()
            return plan
        except lv.libvirtError as exc:
            error = exc.get_error_message()
        if plan.virt_type == "kvm" and plan.spec.emulation == "allow" and not plan.host_devices:
            if dom is not None:
                dom.undefine()  # defined, never started: the TCG definition replaces it
            refused = error.splitlines()[0][:300]
            say(f"{self.host}: guest {plan.spec.name}: QEMU refused KVM; starting it under QEMU TCG ({refused})")
            return self._start_domain(replace(plan, virt_type="qemu", kvm_refused=refused))
        if plan.virt_type == "kvm":
            raise TargetError(
                f"{self.host}: guest {plan.spec.name} does not start under KVM: {error}",
                "QEMU refused KVM here (nested virtualisation?); set emulation: allow to fall back to QEMU TCG "
                "(rows are marked emulated), or see the hypervisor host's libvirt log",
            )
        raise TargetError(
            f"{self.host}: guest {plan.spec.name} does not start: {error}", "see the hypervisor host's libvirt log"
        )

    def _target(
        self, guest: GuestSpec, plan: DomainPlan, net: RunNetwork, key: Path, known_hosts: Path, checks: HostChecks
    ) -> Target:
        devices = checks.devices.get(guest.name, [])
        return Target(
            layer="vm",
            name=guest.name,
            physical_host=self.host,
            address=net.address_of(guest.name).ip,
            port=22,
            user=self.ssh_user,
            key_file=str(key),
            known_hosts=str(known_hosts),
            cpu_set=list(range(guest.vcpus)),  # inside the guest: its own vCPUs
            memory_bytes=guest.memory_mib * 2**20,
            devices=[str(d.address) for d in devices],
            emulated=plan.emulated,
            home=".dlinfra",
            base_python="python3",
            ansible_python="/usr/bin/python3",
            details={  # what every vm record carries: what the guest was, and where its vCPUs ran
                "domain": plan.domain_name,
                "virt_type": plan.virt_type,
                "kvm_refused": plan.kvm_refused,
                "vcpus": guest.vcpus,
                "host_cpuset": format_cpuset(guest.cpuset),
                "emulator_cpuset": format_cpuset(guest.emulator_cpuset or guest.cpuset),
                "numa_node": guest.numa_node,
                "hugepages": guest.hugepages,
                "pci_devices": [
                    {"address": str(d.address), "vendor": d.vendor, "product": d.product, "iommu_group": d.iommu_group}
                    for d in devices
                ],
            },
        )

    def _wait_ssh(self, target: Target, plan: DomainPlan) -> None:
        """Wait until the guest answers SSH with exactly the host key we seeded (StrictHostKeyChecking yes).

        Under KVM with a kernel we boot directly, the serial console is watched too: no userspace
        after KVM_STALL_S seconds raises :class:`_KvmStall`.
        """
        started = time.monotonic()
        deadline = started + self.boot_timeout
        watch = ConsoleWatch(Path(plan.serial_log)) if plan.serial_log else None
        if watch is not None:
            self.consoles[target.name] = watch  # kept after teardown: what the guest showed, for errors and tests
        check_stall = watch is not None and plan.virt_type == "kvm" and plan.kernel is not None

        def console() -> str:
            if watch is None:
                return "see the guest's serial console with virsh console"
            watch.poll()
            return watch.shows

        last = ""
        while time.monotonic() < deadline:
            if watch is not None:
                watch.poll()
                accel = "KVM" if plan.virt_type == "kvm" else "QEMU TCG"
                note(f"waiting for guest {target.name} ({accel}) to answer SSH at {target.address}; {watch.shows}")
                if check_stall and kvm_stalled(watch, started):
                    raise _KvmStall(watch.shows)
            dom = self.conn.lookupByName(plan.domain_name)
            if not dom.isActive():
                raise TargetError(f"{self.host}: guest {target.name} stopped while booting", console())
            try:
                with socket.create_connection((target.address, target.port), timeout=3):
                    pass
            except OSError:
                time.sleep(1)
                continue
            result = subprocess.run(ssh_argv(target, ["true"]), capture_output=True, text=True, timeout=60)
            if result.returncode == 0:
                return
            last = result.stderr.strip().splitlines()[-1:] and result.stderr.strip().splitlines()[-1]
            if "host key verification failed" in result.stderr.lower() or "REMOTE HOST IDENTIFICATION" in result.stderr:
                raise TargetError(
                    f"{self.host}: guest {target.name} at {target.address} offers a host key that is "
                    "not the one dlinfra seeded",
                    "someone else holds that address; check the network",
                )
            time.sleep(2)
        raise TargetError(
            f"{self.host}: guest {target.name} did not answer SSH at {target.address} within "
            f"{self.boot_timeout:.0f} s ({last or 'port closed'})",
            console(),
        )

    # -- tear down --------------------------------------------------------------------------------------------

    def down(self) -> None:
        """Destroy and undefine this run's domains, delete its volumes and network, forget its keys."""
        if self._conn is None and not self.targets:
            try:
                self.conn  # noqa: B018 - connect to sweep what a failed up() may have left
            except TargetError:
                return
        removed = sweep(self.conn, self.run_label, self.pool_name)
        self.removed = removed
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.targets = []
        if self._claim is not None:  # only once sweep() went through: a failed down() leaves the run to a sweep
            self._claim.release()
            self._claim = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _KvmStall(Exception):
    """The guest made no boot progress under KVM; ``console`` is what its console showed."""

    def __init__(self, console: str) -> None:
        super().__init__(console)
        self.console = console


def _disk_format(path: Path) -> str:
    with path.open("rb") as fh:
        return "qcow2" if fh.read(4) == b"QFI\xfb" else "raw"


def ssh_argv(target: Target, command: list[str]) -> list[str]:
    """OpenSSH argv for ``target`` with strict host key checking against its known_hosts file."""
    return target.ssh.argv(command)


def sweep(
    conn: libvirt.virConnect, run_label: str | None = None, pool_name: str = storage.DEFAULT_POOL
) -> dict[str, Any]:
    """Remove what dlinfra runs left on this host: one run's (``run_label``) or every run's (None).

    Domains are matched by the label in their metadata (or their name), networks
    and volumes by name; the shared base image volumes are kept.
    """
    import libvirt

    prefix = f"dlinfra-{run_label}" if run_label else "dlinfra-r"
    removed: dict[str, Any] = {"domains": [], "volumes": [], "networks": [], "logs": []}
    for dom in conn.listAllDomains(0):
        label = run_label_of(dom.XMLDesc(0))
        ours = (label == run_label) if run_label else label is not None
        if not ours and not dom.name().startswith(prefix + "-"):
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM if hasattr(libvirt, "VIR_DOMAIN_UNDEFINE_NVRAM") else 0)
        removed["domains"].append(dom.name())
        if conn.getURI() in LOCAL_URIS:  # libvirt keeps a domain's QEMU log after undefine; so does our serial log
            for log in (Path(SERIAL_LOG_DIR) / f"{dom.name()}-serial.log", Path(SERIAL_LOG_DIR) / f"{dom.name()}.log"):
                if log.exists():
                    log.unlink()
                    removed["logs"].append(str(log))
    try:
        pool = conn.storagePoolLookupByName(pool_name)
        if pool.isActive():
            removed["volumes"] = storage.delete_volumes(pool, prefix + "-" if run_label else prefix)
    except libvirt.libvirtError:
        pass
    for net in conn.listAllNetworks(0):
        name = net.name()
        if name == prefix or (run_label is None and name.startswith(prefix)):
            if net.isActive():
                net.destroy()
            net.undefine()
            removed["networks"].append(name)
    return removed
