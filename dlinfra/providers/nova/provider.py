"""The ``nova`` provider: ``vm`` targets booted through OpenStack Nova, then reached over SSH.

What ``up`` does, in order (docs/openstack.md says it for users):

1. connect to the cloud (``cloud``, else ``$OS_CLOUD``; credentials only from clouds.yaml, whose secrets
   are registered with :mod:`dlinfra.secrets` so no output shows them) and resolve how each server will be
   reached: an inventory host named after it (or whose host var ``dlinfra_nova_server`` names it), else its
   address on ``network``; resolve the image (a Glance name or ID, a local file, or by default the guest
   image the libvirt provider boots: the payload baked in, and the payload image's dependencies in its
   Docker store when ctr-vm runs on the servers), uploaded once and found again by its content hash (tag
   ``dlinfra-sha256-<hash>``);
2. claim a run label in the run registry and record the cloud, the flavor, keypair and server names, and
   every image it will upload, *before* anything is created;
3. run ``playbooks/providers/nova/up.yml`` here (``connection: local``): the ``openstack.cloud`` modules
   upload the image, create the run's flavor (extra specs from the options) and keypair (a key made for
   the run), and boot the servers without waiting;
4. poll each server to ACTIVE itself (openstacksdk's own wait polls every 2 s); ERROR is one error naming
   the server with Nova's fault (``No valid host was found`` ...) and what to do;
5. reach each server over SSH with its host key checked: a guest's host key is read from its console
   output (the ``ssh-ed25519 ...`` lines cloud-init prints), never accepted blindly.

``down`` deletes the run's servers, flavor, keypair and the images it uploaded (``down.yml``), polls until
Nova no longer lists the servers, and releases the claim; ``dlinfra sweep`` does the same for a run whose
controller was killed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlinfra import secrets
from dlinfra.errors import SpecError, TargetError
from dlinfra.images.disk import disk_format, file_sha256
from dlinfra.inventory import InventoryHost
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.libvirt.config_drive import USER_KEY
from dlinfra.providers.libvirt.provider import campaign_guest_image
from dlinfra.providers.nova.cloud import (
    IMAGE_KIND,
    LABEL_KEY,
    RUN_KIND,
    leftovers,
    recorded_runs,
    remove_run,
    run_dir,
    run_key,
    run_nova_playbook,
    run_servers,
)
from dlinfra.providers.nova.servers import host_keys_from_console, server_address, wait_active
from dlinfra.providers.openstack_cloud import CloudProvider, cloud_option, connect, poll_interval, recorded_clouds
from dlinfra.providers.options import NON_EMPTY, Option
from dlinfra.providers.ssh.provider import read_facts, target_from_host
from dlinfra.runtime.wait import retry_until
from dlinfra.transport import SshTransport

if TYPE_CHECKING:
    from dlinfra.runtime.sweep_report import SweepReport

CPU_POLICIES = ("dedicated", "shared", "mixed")
_PAGE_SIZE = re.compile(r"^(small|large|any|[0-9]+(KB|MB|GB)?)$", re.IGNORECASE)
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,40}")
_ALIAS = re.compile(r"^[A-Za-z0-9_.-]+$")
DEFAULT_PREFIX = "dlinfra-vm-"


def flavor_extra_specs(options: Mapping[str, Any]) -> dict[str, str]:
    """The flavor extra specs the layer options ask for (Nova's names)."""
    specs: dict[str, str] = {}
    if "cpu_policy" in options:
        specs["hw:cpu_policy"] = str(options["cpu_policy"])
    if "mem_page_size" in options:
        specs["hw:mem_page_size"] = str(options["mem_page_size"])
    if "numa_nodes" in options:
        specs["hw:numa_nodes"] = str(options["numa_nodes"])
    alias = options.get("pci_alias")
    if isinstance(alias, Mapping):
        specs["pci_passthrough:alias"] = ",".join(f"{name}:{count}" for name, count in alias.items())
    elif alias is not None:
        specs["pci_passthrough:alias"] = str(alias)
    return specs


class NovaProvider(CloudProvider):
    """``vm`` targets: Nova servers booted for the run, from a flavor, keypair (and image) made for it.

    Nova's fake virt driver (the tests) gives no guest: a server is then reached as the inventory host
    named after it, which stands in for the guest. ``ctr-vm`` stacks on these targets as on libvirt
    guests (the containers provider brings up ``vm`` through whichever provider ``below_options`` names).
    """

    name = "nova"
    layers: ClassVar[Mapping[str, str | None]] = {"vm": None}
    options: ClassVar[Mapping[str, Option]] = {
        "cloud": cloud_option("Nova"),
        "count": Option("how many servers", "int", 1, low=1, high=1024),
        "vcpus": Option("vCPUs of the run's flavor", "int", 1, low=1, high=1024),
        "ram_mb": Option("RAM of the run's flavor in MiB", "int", 2048, low=1),
        "disk_gb": Option("root disk of the run's flavor in GiB (0: the image's size)", "int", 10, low=0),
        "cpu_policy": Option("hw:cpu_policy: dedicated (pinned vCPUs), shared or mixed", "choice",
                             choices=CPU_POLICIES),
        "mem_page_size": Option("hw:mem_page_size: small, large, any, or a size (2MB, 1GB) for hugepages", "any"),
        "pci_alias": Option("pci_passthrough:alias: 'alias:count' or {alias: count} (GPU passthrough)", "any"),
        "numa_nodes": Option("hw:numa_nodes: guest NUMA nodes", "int", low=1, high=1024),
        "network": Option("the Neutron network the servers boot on (their SSH address is taken from it)", "str",
                          pattern=NON_EMPTY, shape="a network name or ID"),
        "image": Option("a Glance image name or ID, or a local disk file uploaded once by its hash (default: "
                        "dlinfra's guest image)", "str", pattern=NON_EMPTY, shape="an image name, ID or file"),
        "keep_image": Option("leave an image this run uploaded in Glance for later runs", "bool", False),
        "name_prefix": Option("servers are named PREFIX1..PREFIXn", "str", DEFAULT_PREFIX, pattern=_PREFIX,
                              shape="letters, digits and '-' (at most 41)"),
        "user": Option("the login user on the guests", "str", "dlinfra", pattern=NON_EMPTY, shape="a user name"),
        "boot_timeout": Option("how long a server may take to become ACTIVE and answer SSH", "number", 600,
                               above=0, unit="seconds"),
        "poll_interval": poll_interval("server"),
    }  # fmt: skip

    def __init__(self, layer: str) -> None:
        super().__init__(layer)
        self._hosts: dict[str, InventoryHost | None] = {}
        self._image: str = ""
        self._uploads: list[dict[str, Any]] = []
        self._key: Path | None = None

    # ------------------------------------------------------------ validate
    @classmethod
    def validate(cls, layer: str, options: Mapping[str, Any], where: str) -> None:
        super().validate(layer, options, where)
        size = options.get("mem_page_size")
        if size is not None and not (isinstance(size, (str, int)) and _PAGE_SIZE.match(str(size))):
            raise SpecError(f"{where}.mem_page_size: {size!r} must be small, large, any or a size such as 2MB")
        alias = options.get("pci_alias")
        if alias is not None:
            pairs = (
                [(str(k), v) for k, v in alias.items()]
                if isinstance(alias, Mapping)
                else [tuple(p.split(":", 1)) if ":" in p else (p, "1") for p in str(alias).split(",")]
                if isinstance(alias, str)
                else None
            )
            if not pairs or not all(_ALIAS.match(n) and str(c).isdigit() and int(c) > 0 for n, c in pairs):
                raise SpecError(f"{where}.pci_alias: {alias!r} must be 'alias:count[,alias:count]' or {{alias: count}}")

    # ------------------------------------------------------------------ up
    @property
    def _prefix(self) -> str:
        return str(self._options.get("name_prefix", DEFAULT_PREFIX))

    @property
    def _names(self) -> list[str]:
        return [f"{self._prefix}{i}" for i in range(1, int(self._options["count"]) + 1)]

    def create_dependencies(self, spec: LayerSpec) -> None:
        """Check the cloud, how each server is reached and the image; then claim the run and record it all."""
        self.connect_cloud(spec)
        self._hosts = {name: self._host_for(name, spec) for name in self._names}
        self._image = self._resolve_image(spec)
        flavor = keypair = f"dlinfra-{self.run_label}"
        self.claim_run().add(RUN_KIND, key=self.run_label, cloud=self._cloud, clouds_yaml=self._clouds_yaml,
                        flavor=flavor, keypair=keypair, prefix=self._prefix)  # fmt: skip
        for upload in self._uploads:
            self._record_image(upload)
        self._key = run_key(self.run_label)

    def _host_for(self, name: str, spec: LayerSpec) -> InventoryHost | None:
        """The inventory host that stands for server ``name``; None: reach it at its address on ``network``."""
        for host in spec.hosts:
            if host.name == name or str(host.vars.get("dlinfra_nova_server", "")) == name:
                return host
        if not self._options.get("network"):
            raise TargetError(
                f"nova server {name}: no network to reach it on and no inventory host standing for it",
                "set layer_options.vm.network (the servers' SSH address is taken from it), or add an inventory "
                f"host named {name} (or with host var dlinfra_nova_server: {name})",
            )
        return None

    def _resolve_image(self, spec: LayerSpec) -> str:
        """The image the servers boot: a Glance image by name or ID, else a file uploaded once by its hash."""
        wanted = self._options.get("image")
        if wanted and not Path(os.path.expanduser(str(wanted))).is_file():
            image = self._conn.image.find_image(str(wanted), ignore_missing=True)
            if image is None:
                raise TargetError(
                    f"nova: image {wanted!r} is neither in Glance (cloud {self._cloud}) nor a local file",
                    "give a Glance image name or ID, or the path of a disk image to upload",
                )
            return str(image.id)
        if wanted:
            path = Path(os.path.expanduser(str(wanted))).resolve()
            return self._by_hash(path, disk_format(path), "bare", {})
        guest = campaign_guest_image(spec)
        if guest.kernel is None or guest.initrd is None:
            return self._by_hash(guest.disk, "qcow2", "bare", {})
        kernel = self._by_hash(guest.kernel, "aki", "aki", {})
        ramdisk = self._by_hash(guest.initrd, "ari", "ari", {})
        props = {"os_command_line": guest.cmdline or ""}
        return self._by_hash(guest.disk, "qcow2", "bare", props, kernel=kernel, ramdisk=ramdisk)

    def _by_hash(self, path: Path, disk_format: str, container: str, props: dict[str, str], **boot: str) -> str:
        """The Glance image holding ``path`` (tag ``dlinfra-sha256-<hash>``); planned for upload when absent."""
        digest = file_sha256(path)
        tag = f"dlinfra-sha256-{digest}"
        for image in self._conn.image.images(tag=tag):
            if image.status == "active":
                return str(image.id)
        name = f"dlinfra-{path.stem}-{digest[:16]}"
        upload = {"name": name, "filename": str(path), "disk_format": disk_format, "container_format": container,
                  "tags": [tag, f"dlinfra-run-{self.run_label}"], "properties": props, **boot}  # fmt: skip
        self._uploads.append(upload)
        return name

    def create(self, spec: LayerSpec) -> list[Target]:
        found = {s.name: s for s in run_servers(self._conn, self._prefix, self.run_label)}
        todo = [name for name in self._names if name not in found]
        if todo:
            public = self._key.with_name(self._key.name + ".pub").read_text().strip() if self._key else ""
            # The login user travels in the server's metadata: the guest image's seed reads it from the config drive.
            metadata = {LABEL_KEY: self.run_label, USER_KEY: str(self._options["user"])}
            server: dict[str, Any] = {"image": self._image, "metadata": metadata}
            if self._options.get("network"):
                server["network"] = self._options["network"]
            extravars = {
                "nova_images": [u for u in self._uploads if not self._image_id(u["name"])],
                "nova_flavor": {
                    "name": f"dlinfra-{self.run_label}",
                    "vcpus": int(self._options["vcpus"]),
                    "ram": int(self._options["ram_mb"]),
                    "disk": int(self._options["disk_gb"]),
                    "extra_specs": flavor_extra_specs(self._options),
                },
                "nova_keypair": {"name": f"dlinfra-{self.run_label}", "public_key": public},
                "nova_servers": todo,
                "nova_server": server,
            }
            run_nova_playbook("up.yml", self._cloud, extravars, label=self.run_label, clouds_yaml=self._clouds_yaml,
                              artifacts_dir=self._artifacts)  # fmt: skip
            for upload in self._uploads:  # record the IDs, so down and sweep delete exactly these
                if image_id := self._image_id(upload["name"]):
                    upload["id"] = image_id
                    self._record_image(upload)
        servers = wait_active(
            self._conn, self._prefix, self.run_label, len(self._names),
            float(self._options["boot_timeout"]), float(self._options["poll_interval"]),
        )  # fmt: skip
        return [self._target(servers[name]) for name in self._names]

    def _record_image(self, upload: Mapping[str, Any]) -> None:
        """Record an image this run uploads (before the upload; again with its ID after)."""
        if self._claim is not None:
            self._claim.add(
                IMAGE_KIND, key=upload["name"], cloud=self._cloud, clouds_yaml=self._clouds_yaml, name=upload["name"],
                id=upload.get("id"), tag=upload["tags"][0], keep=bool(self._options.get("keep_image")),
            )  # fmt: skip

    def _image_id(self, name: str) -> str | None:
        tags = next(u["tags"][0] for u in self._uploads if u["name"] == name)
        return next((str(i.id) for i in self._conn.image.images(tag=tags) if i.name == name), None)

    def _target(self, server: Any) -> Target:
        host = self._hosts.get(server.name)
        details = {
            "nova_server": server.id,
            "nova_server_name": server.name,
            "nova_flavor": f"dlinfra-{self.run_label}",
            "nova_cloud": self._cloud,
            "flavor_extra_specs": flavor_extra_specs(self._options),
        }
        if host is not None:  # an inventory host stands for the server (Nova's fake driver has no guest)
            target = target_from_host(host, self.layer)
            details["stand_in_host"] = host.name
        else:
            address = server_address(server, str(self._options["network"]))
            target = Target(
                layer=self.layer,
                name=server.name,
                physical_host=str(getattr(server, "hypervisor_hostname", None) or f"nova:{self._cloud}"),
                address=address,
                user=str(self._options["user"]),
                key_file=str(self._key) if self._key else None,
                known_hosts=str(run_dir(self.run_label) / f"{server.name}.known_hosts"),
                home=".dlinfra",
            )
        target.provider = self.name
        target.details.update(details)
        return target

    def wait_ready(self, targets: list[Target]) -> None:
        """Each server answers SSH with its host key checked and gives its facts; retried while it boots."""
        timeout = float(self._options["boot_timeout"])
        interval = max(float(self._options["poll_interval"]), 0.5)

        def ready(target: Target) -> Target:  # SSH refuses while the guest boots
            def answers() -> Target:
                if "stand_in_host" in target.details:
                    return read_facts(target)
                self._learn_host_key(target)
                return _mark_emulation(read_facts(target))

            return retry_until(
                f"nova: server {target.name} is ACTIVE but does not answer SSH",
                answers,
                timeout=timeout,
                interval=interval,
                hint="check that the image runs cloud-init (it prints the host keys on the console) and sshd, "
                "and that this machine reaches the network's addresses",
            )

        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            list(pool.map(ready, targets))

    def _learn_host_key(self, target: Target) -> None:
        """Write the server's host keys, as its console output shows them, into its known_hosts file."""
        assert target.known_hosts is not None
        known = Path(target.known_hosts)
        if known.is_file() and known.stat().st_size:
            return
        console = self._conn.compute.get_server_console_output(target.details["nova_server"]).get("output") or ""
        keys = host_keys_from_console(console)
        if not keys:
            raise TargetError(f"nova: server {target.name}: no SSH host key on its console yet")
        known.write_text("".join(f"{target.address} {key}\n" for key in keys))

    # ---------------------------------------------------------------- down
    def delete(self) -> None:
        if self._claim is None:
            return
        conn = self._conn or connect(self._cloud, self._clouds_yaml)
        images = [{"id": u.get("id"), "name": u["name"], "tag": u["tags"][0]} for u in self._uploads]
        remove_run(
            conn, self._cloud, self._clouds_yaml, self.run_label, self._prefix, f"dlinfra-{self.run_label}",
            [] if self._options.get("keep_image") else images, artifacts_dir=self._artifacts,
            interval=float(self._options["poll_interval"]),
        )  # fmt: skip
        shutil.rmtree(run_dir(self.run_label), ignore_errors=True)
        self._uploads = []
        self._claim.release()  # only once everything is gone: a failed down() leaves the run to a sweep
        self._claim = None

    # --------------------------------------------------------------- sweep
    @classmethod
    def sweep(cls, label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
        """Delete what run ``label`` recorded and is still in its cloud: servers, flavor, keypair, images."""
        for run, cloud, clouds_yaml in recorded_clouds(label, objects, RUN_KIND, "nova objects", report):
            images = [
                {"id": o.get("id"), "name": o["name"], "tag": o.get("tag")}
                for o in objects
                if o.get("kind") == IMAGE_KIND and o.get("cloud") == cloud and not o.get("keep")
            ]
            try:
                conn = connect(cloud, clouds_yaml)
                prefix = str(run.get("prefix") or DEFAULT_PREFIX)
                left = leftovers(conn, label, prefix, str(run["flavor"]), images)
                named = [f"{kind} {name} (cloud {cloud})" for kind, names in left.items() for name in names]
                if not report.dry_run and named:
                    remove_run(conn, cloud, clouds_yaml, label, prefix, str(run["flavor"]), images)
                if named:
                    report.add("nova objects", *named)
            except Exception as exc:  # noqa: BLE001 - one cloud's failure is reported, the sweep goes on
                report.error(f"run {label}: nova objects in cloud {cloud}: {secrets.redact(str(exc))}")
        shutil.rmtree(run_dir(label), ignore_errors=True)

    @classmethod
    def discover(cls) -> dict[str, list[dict[str, Any]]]:
        """Recorded runs (live and dead) whose servers, flavor, keypair or uploaded images are still in their cloud.

        Servers carry the run label in their metadata and flavors and keypairs in their names, but only a
        recorded run says which cloud to look in: a run that left no claim is not found here.
        """
        found: dict[str, list[dict[str, Any]]] = {}
        conns: dict[tuple[str, str | None], Any] = {}
        for label, objects in recorded_runs().items():
            for run, cloud, clouds_yaml in recorded_clouds(label, objects, RUN_KIND, "nova objects"):
                place = (cloud, clouds_yaml)
                images = [o for o in objects if o.get("kind") == IMAGE_KIND and not o.get("keep")]
                try:
                    if place not in conns:
                        conns[place] = connect(*place)
                    left = leftovers(conns[place], label, str(run.get("prefix") or DEFAULT_PREFIX),
                                      str(run.get("flavor")), images)  # fmt: skip
                except Exception:  # noqa: BLE001, S112 - a cloud that does not answer has nothing to find
                    continue
                if any(left.values()):
                    found.setdefault(label, []).extend(objects)
        return found


def _mark_emulation(target: Target) -> Target:
    """Mark the target emulated where its guest runs under QEMU's TCG, as the libvirt provider does. Nova does not
    say it (its hypervisor type reads QEMU under KVM too); the guest does: ``systemd-detect-virt`` tells ``qemu``
    (TCG) from ``kvm``. Unmarked, a TCG guest's figures would be compared with real machines' as if comparable."""
    link = SshTransport(target.ssh)
    try:
        found = link.run(["systemd-detect-virt", "--vm"]).stdout.strip()
    finally:
        link.close()
    target.details["virt_type"] = found or "unknown"
    target.emulated = found == "qemu"
    return target
