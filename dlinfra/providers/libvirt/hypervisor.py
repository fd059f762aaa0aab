"""The guests of one run on one hypervisor host (a libvirt URI), returned as SSH targets: what the registered
provider (:mod:`dlinfra.providers.libvirt.provider`) runs once per inventory host that carries ``vm``.

Order matters and is the point of this module: the request is checked against
the host (CPUs exist and are online, memory is there, NUMA node exists, PCI
devices pass the IOMMU checks) before anything is defined. Then the run is
planned here (network, addresses and MACs, vCPU pinning, accelerator, the
guests' host keys and seed disks) and made by Ansible: the playbook
``playbooks/providers/libvirt/up.yml`` (role ``libvirt_guest``) makes the
run's network, overlays, seeds and domains, each named after the run's label,
and ``down()`` runs ``down.yml``, which removes exactly those. What stays
here is what only the controller can do: wait for SSH with the seeded host key
checked, watch the serial console for a KVM guest that makes no progress (the
playbook then runs again with that guest under TCG), and build the targets.
``sweep()`` removes a run by label after a crashed controller, through the
same playbook.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra import cancel
from dlinfra.cache import cache_key, cache_root
from dlinfra.errors import SpecError, TargetError
from dlinfra.images.disk import disk_format
from dlinfra.payload.cpuset import format_cpuset
from dlinfra.providers.base import Target
from dlinfra.providers.libvirt.boot import (
    SSH_AFTER_LOGIN_S,
    ConsoleWatch,
    host_key,
    kvm_stalled,
    remember_stall,
    remembered_stall,
    ssh_overdue,
)
from dlinfra.providers.libvirt.domain import DomainPlan, domain_vars, run_label_of
from dlinfra.providers.libvirt.image import GuestImage, build_guest_image, cloud_image, guest_payload_home
from dlinfra.providers.libvirt.network import (
    SUBNET_KIND,
    RunNetwork,
    libvirt_subnets,
    local_routes,
    network_vars,
    plan_network,
    subnet_choice,
)
from dlinfra.providers.libvirt.passthrough import PciDevice, SysfsHost, check_passthrough
from dlinfra.providers.libvirt.seed import SeedInputs, build_seed_disk, known_hosts_line, make_client_key, make_host_key
from dlinfra.providers.libvirt.spec import GuestSpec, check_provider_options
from dlinfra.runtime.ansible import LOCAL_HOST, PlaybookResult, new_ident, run_playbook
from dlinfra.runtime.progress import note, say
from dlinfra.runtime.runs_registry import RunClaim, claim, machine_lock
from dlinfra.runtime.wait import WaitTimedOut, wait_for

if TYPE_CHECKING:
    import libvirt

SERIAL_LOG_DIR = "/var/log/libvirt/qemu"
LOCAL_URIS = ("qemu:///system", "qemu:///session")
DEFAULT_POOL = "dlinfra"
DEFAULT_POOL_PATH = "/var/lib/libvirt/images/dlinfra"
#: Where qemu:///system's virtlogd listens: QEMU writes each guest's console log through it.
VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")
#: The playbooks that make and remove a run's guests (paths under playbooks/).
UP_PLAYBOOK = "providers/libvirt/up.yml"
DOWN_PLAYBOOK = "providers/libvirt/down.yml"
#: Guest variables the role fills in itself (from the pool and the run), so the provider does not send them.
ROLE_RESOLVED = ("run_label", "network", "disk_path", "seed_path", "kernel", "initrd")
_RUN_NAME = re.compile(r"^dlinfra-(r[0-9a-f]{8})(?:-|$)")


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


def hypervisor_ready(uri: str, pool_name: str = DEFAULT_POOL) -> bool:
    """Whether this machine is in the ``libvirt_host`` role's present state for ``uri`` already: libvirtd
    answers, virtlogd takes connections, the pool is active and autostarted, its folder there. libvirt says so
    in milliseconds; the role's playbook took 10-18 s of every vm campaign to find the same. False for anything
    else (a remote URI, qemu:///session, a stopped daemon, a missing or stopped pool): the playbook then runs,
    starts what it can and names what is wrong."""
    if uri != "qemu:///system" or not _accepts_connections(VIRTLOGD_SOCKET):
        return False
    libvirt = _libvirt()
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return False
    try:
        pool = conn.storagePoolLookupByName(pool_name)
        folder = ET.fromstring(pool.XMLDesc()).findtext("target/path")  # noqa: S314 - libvirtd's own XML
        return bool(pool.isActive() and pool.autostart() and folder and Path(folder).is_dir())
    except libvirt.libvirtError:
        return False
    finally:
        conn.close()


def _accepts_connections(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def new_run_label() -> str:
    """A short label owned by one run; every name the run creates starts with ``dlinfra-<label>``."""
    return "r" + secrets.token_hex(4)


@dataclass
class HostChecks:
    """What validation found, kept so ``up`` does not read the host twice."""

    devices: dict[str, list[PciDevice]] = field(default_factory=dict)
    virt_type: dict[str, str] = field(default_factory=dict)


class Hypervisor:
    """Guests under libvirt on one hypervisor host (``uri``), as ``vm`` targets."""

    layer = "vm"

    def __init__(
        self,
        uri: str = "qemu:///system",
        *,
        physical_host: str | None = None,
        pool: str = DEFAULT_POOL,
        pool_path: str = DEFAULT_POOL_PATH,
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
        #: Where the playbooks' ansible-runner artifacts are kept (the campaign's; None: not kept).
        self.artifacts_dir: Path | None = None
        #: What the last down() removed, as the down playbook reported it.
        self.removed: dict[str, list[str]] = {}
        # Whether the run may have objects on the host: a caller naming a label may be removing an earlier run's.
        self._made = run_label is not None
        self._plans: dict[str, DomainPlan] = {}  # each guest as last provisioned
        self._up_vars: dict[str, Any] = {}  # the up playbook's variables (network, base image, guests)

    # -- connection ---------------------------------------------------------------------------------------------

    @property
    def conn(self) -> libvirt.virConnect:
        if self._conn is None:
            lv = _libvirt()
            try:
                self._conn = lv.open(self.uri)
            except lv.libvirtError as exc:
                raise TargetError(
                    f"cannot connect to libvirt at {self.uri}: {exc.get_error_message()}",
                    "is libvirtd running there (run playbooks/prepare.yml, role libvirt_host), and may this user"
                    " reach it?",
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

    def configure(self, options: Mapping[str, Any], artifacts_dir: Path | None = None) -> None:
        """Take the provider settings of ``layer_options.vm`` (``uri``, ``pool``, ``subnet``, ``boot_timeout``,
        ``cloud_image``), checked as a dry run checks them."""
        check_provider_options(options, "layer_options.vm")
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
        if artifacts_dir is not None:
            self.artifacts_dir = Path(artifacts_dir)

    def up_guests(self, guests: list[GuestSpec]) -> list[Target]:
        """Validate, then run the up playbook (network, volumes, domains), wait for SSH; on failure remove it all."""
        if self.targets:
            return self.targets
        checks = self.validate(guests)
        started = time.monotonic()
        image = self.image or build_guest_image()
        self.timings["image_s"] = round(time.monotonic() - started, 1)
        try:
            return self._create(guests, checks, image)
        except BaseException:
            with cancel.shielded():  # a cancelled bring-up is still taken down, to its end
                self.down()
            raise

    def _create(self, guests: list[GuestSpec], checks: HostChecks, image: GuestImage) -> list[Target]:
        # Claimed before anything is made, held until down() has removed it: a killed controller's guests are then
        # told from a live run's and removed by `dlinfra sweep` / the next campaign's start.
        self._claim = self._claim or claim(
            self.run_label, "libvirt", uri=self.uri, pool=self.pool_name, state_dir=str(self.state_dir)
        )
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        client_key = self.ssh_key or make_client_key(self.state_dir)
        public_key = Path(str(client_key) + ".pub").read_text().strip()
        with subnet_choice() as reserved:  # picked and recorded under one lock: no other run picks it meanwhile
            taken = libvirt_subnets(self.conn) + (local_routes() if self.uri in LOCAL_URIS else []) + reserved
            net = plan_network(self.run_label, [g.name for g in guests], taken, self.subnet)  # type: ignore[arg-type]
            self._claim.add(SUBNET_KIND, key="subnet", subnet=str(net.subnet), uri=self.uri)

        known_hosts = self.state_dir / "known_hosts"
        known_hosts.write_text("")
        seeds: dict[str, Path] = {}
        self._plans = {}
        for guest in guests:
            address = net.address_of(guest.name)
            host_key = make_host_key(self.state_dir, guest.name)
            seed_inputs = SeedInputs(
                guest.name, self.ssh_user, public_key, address.mac, address.ip, net.subnet.prefixlen, net.gateway
            )
            seeds[guest.name] = build_seed_disk(self.state_dir, seed_inputs, host_key, image.seed_style)
            host_key.private.unlink()  # the seed carries it to the guest; the controller keeps the public half
            with known_hosts.open("a") as fh:
                fh.write(known_hosts_line(address.ip, host_key))
            domain = self.domain_name(guest.name)
            plan = DomainPlan(
                spec=guest,
                domain_name=domain,
                run_label=self.run_label,
                virt_type=checks.virt_type[guest.name],
                network=net.name,
                mac=address.mac,
                kernel=str(image.kernel) if image.kernel else None,
                initrd=str(image.initrd) if image.initrd else None,
                cmdline=image.cmdline,
                host_devices=tuple(d.address for d in checks.devices.get(guest.name, [])),
                serial_log=f"{SERIAL_LOG_DIR}/{domain}-serial.log" if self.uri in LOCAL_URIS else None,
            )
            self._plans[guest.name] = self._remembered(plan)
        self._up_vars = {
            "libvirt_guest_network": network_vars(net),
            "libvirt_guest_base": _base_vars(image),
            "guests": {g.name: {"ip": net.address_of(g.name).ip, "seed": str(seeds[g.name])} for g in guests},
        }

        started = time.monotonic()
        try:
            self._provision()
        finally:
            self.timings["provision_s"] = round(time.monotonic() - started, 1)  # also when QEMU refused to start
            for seed in seeds.values():
                seed.unlink(missing_ok=True)  # it holds the guest's private host key

        boot_started = time.monotonic()
        targets = [
            self._target(guest, self._plans[guest.name], net, client_key, known_hosts, checks) for guest in guests
        ]
        for target, guest in zip(targets, guests, strict=True):
            booted = self._boot(target, self._plans[guest.name])
            target.emulated = booted.emulated
            target.details.update(virt_type=booted.virt_type, kvm_refused=booted.kvm_refused)
            target.details["boot_to_ssh_s"] = round(time.monotonic() - boot_started, 1)
        self.timings["boot_to_ssh_s"] = round(time.monotonic() - boot_started, 1)
        self.targets = targets
        return targets

    def _provision(self) -> None:
        """Run the up playbook for every guest as planned; take back what the role did (TCG where QEMU refused KVM).

        The role leaves unchanged what is already as planned, so running it again only changes the guests whose
        plan changed (a guest moved to TCG is stopped, defined again and started).
        """
        guests = []
        for name, plan in self._plans.items():
            values = {k: v for k, v in domain_vars(plan).items() if k not in ROLE_RESOLVED}
            guests.append({**values, **self._up_vars["guests"][name]})
        self._made = True
        # One up playbook per pool at a time: it deletes a partial upload of its image, and older images' base
        # volumes when no run's volume is in the pool; another run between its own upload and its overlays
        # would lose its base volume.
        with machine_lock(f"libvirt-pool-{cache_key({'uri': self.uri, 'pool': self.pool_name})}"):
            result = self._playbook(
                UP_PLAYBOOK,
                {
                    "libvirt_guest_network": self._up_vars["libvirt_guest_network"],
                    "libvirt_guest_base": self._up_vars["libvirt_guest_base"],
                    "libvirt_guest_guests": guests,
                },
            )
        report = result.reports.get(self.host, {}).get("guests", {})
        for name, plan in list(self._plans.items()):
            made = report.get(name)
            if not made:
                continue
            if made["virt_type"] != plan.virt_type:  # QEMU refused KVM and the guest's emulation is allow
                plan = self._plans[name] = replace(plan, virt_type=made["virt_type"], kvm_refused=made["kvm_refused"])
                say(f"{self.host}: guest {name}: QEMU refused KVM; starting it under QEMU TCG ({plan.kvm_refused})")
            if made.get("error"):
                raise self._start_error(plan, made["error"])
        result.raise_for_failure()

    def _start_error(self, plan: DomainPlan, error: str) -> TargetError:
        if plan.virt_type == "kvm":
            return TargetError(
                f"{self.host}: guest {plan.spec.name} does not start under KVM: {error}",
                "QEMU refused KVM here (nested virtualisation?); set emulation: allow to fall back to QEMU TCG "
                "(rows are marked emulated), or see the hypervisor host's libvirt log",
            )
        return TargetError(
            f"{self.host}: guest {plan.spec.name} does not start: {error}", "see the hypervisor host's libvirt log"
        )

    def _playbook(self, book: str, extravars: dict[str, Any]) -> PlaybookResult:
        return run_guest_playbook(
            book,
            self.uri,
            {
                "libvirt_guest_run_label": self.run_label,
                "libvirt_guest_pool": self.pool_name,
                "libvirt_guest_pool_path": self.pool_path,
                **extravars,
            },
            host=self.host,
            artifacts_dir=self.artifacts_dir,
        )

    def _versions(self) -> dict[str, str]:
        """libvirt's and QEMU's versions on the hypervisor (testbed metadata)."""

        def dotted_version(number: int) -> str:
            return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"

        return {
            "libvirt_version": dotted_version(int(self.conn.getLibVersion())),
            "qemu_version": dotted_version(int(self.conn.getVersion())),
        }

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
            reason = f"no boot progress under KVM in {stall.waited:.0f} s ({stall.console})"
        if plan.spec.emulation != "allow" or plan.host_devices:
            raise TargetError(
                f"{self.host}: guest {target.name} made {reason}",
                "KVM on this host does not run the guest's kernel (nested virtualisation?); "
                "set emulation: allow to fall back to QEMU TCG (rows are marked emulated)",
            )
        remember_stall(self._verdict_key(), Path(plan.kernel) if plan.kernel else None, plan.cmdline, reason)
        say(f"{self.host}: guest {target.name}: {reason}; restarting it under QEMU TCG (rows marked emulated)")
        self._plans[plan.spec.name] = replace(plan, virt_type="qemu", kvm_refused=reason)
        self._provision()  # the role finds the guest defined under KVM: stops, redefines and starts it under TCG
        emulated = self._plans[plan.spec.name]
        self._wait_ssh(target, emulated)
        return emulated

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
            home=guest_payload_home(self.ssh_user),
            base_python="python3",
            ansible_python="/usr/bin/python3",
            details={  # what every vm record carries: what the guest was, and where its vCPUs ran
                "domain": plan.domain_name,
                "virt_type": plan.virt_type,
                "kvm_refused": plan.kvm_refused,
                **self._versions(),
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

        Under KVM with a kernel we boot directly, the serial console is watched too: a guest that shows no
        boot progress (:func:`kvm_stalled`), or has not reached userspace when ``boot_timeout`` ends first,
        raises :class:`_KvmStall`: the verdict is KVM's, not a timeout's. One of our guests that shows its login
        prompt and does not answer SSH (:func:`ssh_overdue`) is reset once, saying why, and fails as soon as it
        does the same after the reset; what the host sees of its address is in the messages.
        """
        started = time.monotonic()
        watch = ConsoleWatch(Path(plan.serial_log)) if plan.serial_log else None
        if watch is not None:
            self.consoles[target.name] = watch  # kept after teardown: what the guest showed, for errors and tests
        check_stall = watch is not None and plan.virt_type == "kvm" and plan.kernel is not None
        may_reset = watch is not None and plan.kernel is not None  # our image: sshd starts before the prompt

        def console() -> str:
            if watch is None:
                return "see the guest's serial console with virsh console"
            watch.poll()
            return watch.shows

        boot = _SshWait(target, plan, watch, started, check_stall, may_reset, console)
        try:
            wait_for(f"guest {target.name} to answer SSH", lambda: self._answers_ssh(boot), timeout=self.boot_timeout,
                     interval=1.0)  # fmt: skip
        except WaitTimedOut:
            if check_stall and watch is not None and not watch.in_userspace:
                raise _KvmStall(watch.shows, time.monotonic() - started) from None
            raise TargetError(
                f"{self.host}: guest {target.name} did not answer SSH at {target.address} within "
                f"{self.boot_timeout:.0f} s ({boot.last or 'port closed'}; {self._seen_at(target)})",
                console(),
            ) from None

    def _answers_ssh(self, boot: _SshWait) -> bool:
        """One look at a booting guest (see :meth:`_wait_ssh`): True once it answers SSH with our host key."""
        target, plan, watch = boot.target, boot.plan, boot.watch
        if watch is not None:
            watch.poll()
            accel = "KVM" if plan.virt_type == "kvm" else "QEMU TCG"
            note(f"waiting for guest {target.name} ({accel}) to answer SSH at {target.address}; {watch.shows}")
            if boot.check_stall and kvm_stalled(watch, boot.started):
                raise _KvmStall(watch.shows, time.monotonic() - boot.started)
        dom = self.conn.lookupByName(plan.domain_name)
        if not dom.isActive():
            raise TargetError(f"{self.host}: guest {target.name} stopped while booting", boot.console())
        if watch is not None and plan.kernel is not None and ssh_overdue(watch):
            self._reset_once(boot, dom)
        try:
            with socket.create_connection((target.address, target.port), timeout=3):
                pass
        except OSError:
            return False
        result = subprocess.run(ssh_argv(target, ["true"]), capture_output=True, text=True, timeout=60)
        if result.returncode == 0:
            return True
        boot.last = result.stderr.strip().splitlines()[-1:] and result.stderr.strip().splitlines()[-1]
        if "host key verification failed" in result.stderr.lower() or "REMOTE HOST IDENTIFICATION" in result.stderr:
            raise TargetError(
                f"{self.host}: guest {target.name} at {target.address} offers a host key that is "
                "not the one dlinfra seeded",
                "someone else holds that address; check the network",
            )
        return False

    def _reset_once(self, boot: _SshWait, dom: Any) -> None:
        """A guest that shows its login prompt and does not answer SSH is reset once; the second time it fails."""
        target, watch = boot.target, boot.watch
        assert watch is not None
        if not boot.may_reset:  # reset once already, and the same again: waiting longer would not help
            raise TargetError(
                f"{self.host}: guest {target.name} did not answer SSH at {target.address} "
                f"{SSH_AFTER_LOGIN_S:.0f} s after its login prompt, before and after a reset "
                f"({boot.last or 'port closed'}; {self._seen_at(target)})",
                boot.console(),
            )
        kept = self._keep_serial_log(boot.plan)
        say(
            f"{self.host}: guest {target.name} showed its login prompt {SSH_AFTER_LOGIN_S:.0f} s ago and "
            f"does not answer SSH at {target.address} ({self._seen_at(target)}); resetting it once"
            + (f" (its first boot's console: {kept})" if kept else "")
        )
        watch.forget_prompt()
        dom.reset(0)
        self.timings["boot_resets"] = self.timings.get("boot_resets", 0) + 1
        boot.may_reset = False

    def _keep_serial_log(self, plan: DomainPlan) -> Path | None:
        """Copy what the guest printed before its reset into the campaign's artifacts (the serial log itself goes
        with the guest): why a first boot came up without its network is read there. Bounded to the last MiB."""
        if self.artifacts_dir is None or not plan.serial_log:
            return None
        kept = self.artifacts_dir / f"{plan.domain_name}-serial-before-reset.log"
        try:
            with Path(plan.serial_log).open("rb") as source:
                source.seek(max(0, source.seek(0, os.SEEK_END) - (1 << 20)))
                self.artifacts_dir.mkdir(parents=True, exist_ok=True)
                kept.write_bytes(source.read())
        except OSError:
            return None  # a missing log must not stop the reset that may bring the guest up
        return kept

    def _seen_at(self, target: Target) -> str:
        """What this host's kernel knows of the guest's address (its neighbour entry): whether the guest's
        network answers at all, so a message tells a guest without network from one whose sshd is down."""
        if self.uri not in LOCAL_URIS:
            return "the hypervisor is remote: its neighbour table is not read"
        try:
            shown = subprocess.run(
                ["ip", "neigh", "show", target.address], capture_output=True, text=True, timeout=10, check=False
            ).stdout.split()
        except (OSError, subprocess.SubprocessError) as exc:
            return f"its neighbour entry could not be read ({exc})"
        if not shown:
            return "no neighbour entry for it on this host"
        state = shown[-1]
        meaning = {"FAILED": "it never answered ARP: its network is not up", "INCOMPLETE": "ARP unanswered so far"}
        return f"neighbour entry {state}" + (f": {meaning[state]}" if state in meaning else ": its network answers")

    # -- tear down --------------------------------------------------------------------------------------------

    def down(self) -> None:
        """Run the down playbook (this run's domains, volumes, network and logs go), then forget the run's keys."""
        if self._made:
            self.removed = remove_run(
                self.uri,
                self.run_label,
                self.pool_name,
                host=self.host,
                artifacts_dir=self.artifacts_dir,
            )
            self._made = False
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.targets = []
        if self._claim is not None:  # only once the playbook went through: a failed down() leaves the run to a sweep
            self._claim.release()
            self._claim = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class _SshWait:
    """What one guest's SSH wait keeps between looks: what it watches, and what it saw and did so far."""

    target: Target
    plan: DomainPlan
    watch: ConsoleWatch | None
    started: float
    check_stall: bool
    may_reset: bool
    console: Callable[[], str]
    last: str = ""


class _KvmStall(Exception):
    """The guest made no boot progress under KVM in ``waited`` seconds; ``console`` is what its console showed."""

    def __init__(self, console: str, waited: float) -> None:
        super().__init__(console)
        self.console, self.waited = console, waited


def ssh_argv(target: Target, command: list[str]) -> list[str]:
    """OpenSSH argv for ``target`` with strict host key checking against its known_hosts file."""
    return target.ssh.argv(command)


def _base_vars(image: GuestImage) -> dict[str, Any]:
    """The image's files as the role uploads them once per image key (``libvirt_guest_base``)."""
    files: dict[str, dict[str, str]] = {"disk": {"path": str(image.disk), "format": disk_format(image.disk)}}
    if image.kernel:
        files["kernel"] = {"path": str(image.kernel), "format": "raw"}
    if image.initrd:
        files["initrd"] = {"path": str(image.initrd), "format": "raw"}
    return {"id": image.key, "files": files}


def run_guest_playbook(
    book: str,
    uri: str,
    extravars: dict[str, Any],
    *,
    host: str = "localhost",
    artifacts_dir: Path | None = None,
) -> PlaybookResult:
    """Run one of the libvirt playbooks here (``connection: local``), reaching the hypervisor through ``uri``.

    The modules run under this Python, which has libvirt-python; ``host`` is the hypervisor's name in
    the play's output and errors.
    """
    label = str(extravars.get("libvirt_guest_run_label", "all"))
    return run_playbook(
        book,
        inventory={"all": {"children": {"dlinfra_hypervisors": {"hosts": {host: dict(LOCAL_HOST)}}}}},
        extravars={"libvirt_guest_uri": uri, **extravars},
        artifacts_dir=artifacts_dir,
        ident=new_ident(Path(book).stem, label),
        quiet=True,
    )


def remove_run(
    uri: str,
    run_label: str,
    pool_name: str = DEFAULT_POOL,
    *,
    host: str = "localhost",
    artifacts_dir: Path | None = None,
) -> dict[str, list[str]]:
    """Run the down playbook for ``run_label``; return what it removed (domains, volumes, networks, logs)."""
    result = run_guest_playbook(
        DOWN_PLAYBOOK,
        uri,
        {"libvirt_guest_run_label": run_label, "libvirt_guest_pool": pool_name},
        host=host,
        artifacts_dir=artifacts_dir,
    )
    result.raise_for_failure()
    removed = result.reports.get(host, {}).get("removed", {})
    return {kind: list(removed.get(kind, [])) for kind in ("domains", "volumes", "networks", "logs")}


def sweep(conn: libvirt.virConnect, run_label: str | None = None, pool_name: str = DEFAULT_POOL) -> dict[str, Any]:
    """Remove what dlinfra runs left on the host ``conn`` reaches: one run's (``run_label``) or every run's (None).

    Runs the down playbook per run label: domains, volumes and networks named after the label go, and the
    logs of those domains (local hosts); the shared base image volumes are kept.
    """
    labels = [run_label] if run_label else _run_labels(conn, pool_name)
    removed: dict[str, Any] = {"domains": [], "volumes": [], "networks": [], "logs": []}
    for label in labels:
        for kind, names in remove_run(conn.getURI(), label, pool_name, host=conn.getHostname()).items():
            removed[kind] += names
    return removed


def _run_labels(conn: libvirt.virConnect, pool_name: str) -> list[str]:
    """The labels of the dlinfra runs that have objects on this host (domain metadata, object names)."""
    import libvirt

    domains = conn.listAllDomains(0)
    labels = {run_label_of(dom.XMLDesc(0)) for dom in domains}
    names = [dom.name() for dom in domains] + [net.name() for net in conn.listAllNetworks(0)]
    with contextlib.suppress(libvirt.libvirtError):  # no such pool: no volumes of ours
        pool = conn.storagePoolLookupByName(pool_name)
        if pool.isActive():
            pool.refresh(0)
            names += [vol.name() for vol in pool.listAllVolumes(0)]
    labels |= {match.group(1) for name in names if (match := _RUN_NAME.match(name))}
    return sorted(label for label in labels if label)
