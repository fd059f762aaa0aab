"""The ``docker`` and ``podman`` providers of the ``ctr`` and ``ctr-vm`` layers: payload containers as targets.

How the run engine reaches a container: its target's ``container`` access
(:class:`~dlinfra.transport.ContainerTransport`) runs every command as
``ENGINE exec -i NAME ARGV`` over the *host's* SSH (the target's
address/port/user/key are the host's; peers dial its ``peer_ip``). No sshd runs
in the container: it would add a daemon, a key and a port to every container
and change what is measured. Result files: the payload writes them under
``target.runs_dir`` inside the container, a bind mount of a host folder, so
they are read through the host's transport.

Provisioning is Ansible: ``playbooks/providers/containers/up.yml`` (roles
``payload_image`` and ``payload_container``) loads the image where it is missing
and creates the run's network and containers on every host at once; ``down.yml``
removes them by the run's label (:mod:`dlinfra.providers.containers.playbook`).
This class computes what goes where (hosts, CPU chunks, names, ports) and builds
the targets from the inspect records the play reports. A local-testbed host
(``dlinfra_netns`` host var) is driven from the controller (connection local: a
dockerd inside its namespace, started here by :mod:`daemons`, or podman joining
it with ``ns:``); any other host over SSH. The image is built once on the
controller and saved once. ``sweep``/``discover`` work without an inventory
(after a crash) and use the engine CLI.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dlinfra.errors import DlinfraError, SpecError, TargetError
from dlinfra.images.deps_archive import build_deps_archive
from dlinfra.inventory import InventoryHost, match_pattern
from dlinfra.payload.cpuset import format_cpuset, split_cpuset
from dlinfra.providers.base import LayerSpec, Provider, Target
from dlinfra.providers.containers.engine import Engine, ensure_dockerd
from dlinfra.providers.containers.image import VENV, PayloadImage, build_payload_image, save_image, save_layers_above
from dlinfra.providers.containers.playbook import DOWN as DOWN_PLAYBOOK
from dlinfra.providers.containers.playbook import UP as UP_PLAYBOOK
from dlinfra.providers.containers.playbook import PlayHost, run_down, run_up
from dlinfra.providers.containers.run import (
    PLACEMENTS,
    RUN_LABEL,
    ContainerSpec,
    NetworkMode,
    Resources,
    applied_limits,
    container_address,
    engine_from,
    engine_where,
    remove_run,
    run_labels,
)
from dlinfra.providers.containers.runtimes import (
    RUNSC_PLATFORMS,
    RUNTIMES,
    OciRuntime,
    check_registered,
    runtime_from,
    runtime_version,
    verify,
)
from dlinfra.providers.cpus import host_cpus
from dlinfra.providers.host_prep import HostToPrepare, controller, prepare
from dlinfra.providers.options import Option
from dlinfra.providers.ssh.provider import target_from_host
from dlinfra.runtime.progress import phase, say
from dlinfra.runtime.runs_registry import RunClaim, claim, is_live, is_valid_label, live_runs
from dlinfra.runtime.sweep_report import SweepReport
from dlinfra.testbed import dockerd
from dlinfra.testbed.local import all_testbeds
from dlinfra.text import plain
from dlinfra.transport import ContainerAccess

#: An image reference as the engines take one (``debian:12``, ``registry.lab:5000/team/base@sha256:...``).
_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}", re.ASCII)
_RUN_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,30}", re.ASCII)

HOME_IN_CONTAINER = "/opt/dlinfra"  # so Target.python is the image's venv: /opt/dlinfra/venv/bin/python
#: Where a container sees its host's shipped data sets (HOME/datasets there), read-only.
DATA_IN_CONTAINER = f"{HOME_IN_CONTAINER}/datasets"


@dataclass
class HostEngine:
    """One host's engine and what this run made on it (for an exact teardown)."""

    host: str
    engine: Engine
    #: How Ansible reaches a host over SSH (empty: an engine of this machine, connection local).
    ansible: dict[str, Any] = field(default_factory=dict)
    loaded_images: list[str] = field(default_factory=list)
    #: The saved image the up play loads there (the whole image, or only the layers above those it holds).
    image_tarball: str = ""
    started_dockerd: bool = False
    #: The run's results folder there (as asked for, then as the play reports it: absolute).
    results_root: str | None = None


def ssh_via(host: InventoryHost) -> tuple[str, ...]:
    """The ssh argv prefix that reaches an inventory host the way Ansible does (key, known_hosts, port)."""
    return tuple(host.ssh.argv(connect_timeout=30))


def _names(host: Any) -> set[str]:
    return {host.name, *host.groups}


def controller_engine(kind: str, *, artifacts_dir: Path | None = None) -> Engine:
    """The controller's engine, which builds and saves the image; prepared by its host role only when it does not
    answer: the role's present state is an answering engine, and its playbook cost every campaign 2-3 s to learn
    that (a campaign does not need the engine enabled at boot)."""
    engine = Engine(kind, host="controller")  # type: ignore[arg-type]
    try:
        engine.check_available()
    except TargetError:  # not running, or not installed: the role starts it, or says what to install
        prepare([controller(kind)], artifacts_dir=artifacts_dir)  # type: ignore[arg-type]
        engine.check_available()
    return engine


def ansible_reach(host: InventoryHost) -> dict[str, Any]:
    """How Ansible reaches an inventory host: its SSH settings, become settings and Python."""
    return {
        **host.ssh.ansible_vars(),
        **{k: v for k, v in host.vars.items() if k.startswith("ansible_become")},
        "ansible_python_interpreter": host.vars.get("ansible_python_interpreter", "auto_silent"),
    }


class ContainerProvider(Provider):
    """Containers as targets; ``down`` removes exactly the containers, networks and images this run made.

    On ``ctr`` the hosts are the inventory's; on ``ctr-vm`` they are the ``vm`` layer's guests (the
    campaign's, or guests this provider brings up itself with ``layer_options.vm``).
    """

    #: docker or podman: set by the registered subclasses below.
    engine_kind: ClassVar[str]
    layers: ClassVar[Mapping[str, str | None]] = {"ctr": None, "ctr-vm": "vm"}
    options: ClassVar[Mapping[str, Option]] = {
        "hosts": Option("host patterns of the hosts that get containers (default: every host carrying the layer)",
                        "patterns"),
        "placement": Option("how a cell's processes go onto the hosts", "choice", "spread", choices=PLACEMENTS),
        "processes_per_host": Option("containers per host for spread", "int", 1, low=1, high=1024),
        "network": Option("host, bridge, none or container:NAME", "str", "host"),
        "cpus": Option("CPU quota per container (--cpus)", "number", high=4096),
        "memory_bytes": Option("memory limit per container (the engines' least: 6 MiB)", "int", low=6 << 20),
        "gpus": Option("GPUs per container (--gpus: 'all' or indexes like 0,1; needs the NVIDIA runtime)", "str"),
        "pin": Option("pin each container to its own CPU set", "bool", True),
        "base_image": Option("base image of the payload image (default: the one built from the cached root "
                             "filesystem)", "str", pattern=_IMAGE_REF, shape="an image reference"),
        "keep_images": Option("leave the loaded payload image on the hosts after the campaign, as their image cache "
                              "(default: true on local testbed hosts, whose engine data goes with the testbed; false "
                              "elsewhere)", "bool"),
        "run_id": Option("label of this run's objects (default: random)", "str", pattern=_RUN_ID,
                         shape="lowercase letters, digits and '-' (at most 31)"),
        "ports_per_container": Option("ports published per bridge container when bridged across hosts (default: the "
                                      "most processes of one of the campaign's cells on the layer, plus one; at "
                                      "least 2)", "int", low=0, high=65_535),
        "port_base": Option("first published port", "int", 23_000, low=0, high=65_535),
        "wheelhouse": Option("a prebuilt wheelhouse folder with requirements.lock (air-gapped sites, tests)", "path"),
        "runtime": Option("OCI runtime of the containers: runc, crun or runsc (gVisor), or a list of them: one "
                          "container each per host, and the cells of each runtime apart (ctr[crun], ctr[runsc])",
                          "any", "runc", shape=f"one of {', '.join(RUNTIMES)}, or a list of them"),
        "runsc_platform": Option("gVisor's platform under runsc (kvm needs /dev/kvm on the host)", "choice", "ptrace",
                                 choices=RUNSC_PLATFORMS),
    }  # fmt: skip

    def __init__(self, layer: str = "ctr") -> None:
        super().__init__(layer)
        self.run_id: str | None = None
        #: keep_images as given (None: the default, per host: see _keeps_image).
        self.keep_images: bool | None = None
        self.hosts: list[HostEngine] = []
        self.own_vms: Provider | None = None
        self._claim: RunClaim | None = None
        self._opts: dict[str, Any] = {}
        self._versions: dict[str, str] = {}  # engine label -> its server version
        self._chosen: list[Any] = []
        self._images: dict[str, str] = {}
        self._artifacts: Path | None = None
        self._guests: dict[str, Target] = {}

    def _record(self, kind: str, *, key: str, **where: Any) -> None:
        """Record in the run's state file where an object goes, before it is made (see runs_registry)."""
        if self._claim is not None:
            self._claim.add(kind, key=key, **where)

    # ------------------------------------------------------------- options
    @classmethod
    def validate(cls, layer: str, options: Mapping[str, Any], where: str) -> None:
        if "engine" in options:
            raise SpecError(
                f"{where}: engine is now the provider",
                f"write provider: {options['engine']} instead of engine: {options['engine']}",
            )
        super().validate(layer, options, where)
        opts = cls.resolved(options)
        try:
            NetworkMode.parse(str(opts["network"]))
        except DlinfraError as exc:
            raise SpecError(f"{where}.network: {exc.message}", exc.hint) from None
        if opts["placement"] == "single" and opts["processes_per_host"] != 1:
            raise SpecError(f"{where}: placement single runs one process per host", "use spread or pack")
        try:
            Resources(
                cpus=options.get("cpus"), memory_bytes=options.get("memory_bytes"), gpus=options.get("gpus")
            ).validate(where)
        except DlinfraError as exc:
            raise SpecError(exc.message, exc.hint) from None
        runtimes = opts["runtime"]
        listed = [runtimes] if isinstance(runtimes, str) else runtimes
        if not isinstance(listed, list) or not listed or any(r not in RUNTIMES for r in listed):
            raise SpecError(
                f"{where}.runtime: {plain(str(runtimes), 60)} is not a runtime", cls.options["runtime"].shape
            )
        wheelhouse = options.get("wheelhouse")
        if wheelhouse is not None and not (Path(wheelhouse) / "requirements.lock").is_file():
            raise SpecError(
                f"{where}.wheelhouse: {plain(wheelhouse, 120, tail=True)} is not a wheelhouse folder",
                "a folder holding requirements.lock and its wheels",
            )

    @classmethod
    def targets_per_host(cls, options: Mapping[str, Any]) -> int:
        opts = cls.resolved(options)
        count = opts["processes_per_host"]
        runtimes = opts["runtime"] if isinstance(opts["runtime"], list) else [opts["runtime"]]
        if opts["placement"] in ("single", "pack") or not isinstance(count, int) or count < 1:
            return len(runtimes)
        return count * len(runtimes)

    @classmethod
    def target_axes(cls, options: Mapping[str, Any]) -> list[dict[str, str]]:
        """The cell axes of each runtime's containers on a host, in the order ``create`` makes them (runc: none)."""
        return [{"runtime": rt.label()} if rt.name != "runc" else {} for rt in runtime_from(cls.resolved(options))]

    def _options(self, spec: LayerSpec) -> dict[str, Any]:
        self.validate(self.layer, spec.options, f"layer_options.{self.layer}")
        opts = self.resolved(spec.options)
        opts["network_mode"] = NetworkMode.parse(str(opts["network"]))
        opts["run_id"] = str(opts.get("run_id") or secrets.token_hex(4))
        opts["runtimes"] = runtime_from(opts)
        return opts

    # ------------------------------------------------------------- engines
    def _engine_for(self, host: Any, kind: str) -> HostEngine:
        netns = host.vars.get("dlinfra_netns")
        if netns:  # local testbed: drive the engine from here, inside/into the host's namespace
            if kind == "docker":
                paths = dockerd.dockerd_paths(netns)
                already = dockerd.answers(paths.socket)
                if not already:  # started by this run: a sweep stops it if the controller dies
                    self._record("dockerd", key=paths.socket, host=host.name, **asdict(paths))
                engine = ensure_dockerd(netns, host=host.name)
                return HostEngine(host.name, engine, started_dockerd=not already)
            engine = Engine("podman", host=host.name, netns=netns)
            engine.check_available()
            return HostEngine(host.name, engine)
        engine = Engine(kind, host=host.name, via=ssh_via(host))  # type: ignore[arg-type]
        engine.check_available()
        return HostEngine(host.name, engine, ansible=ansible_reach(host))

    def _results_root(self, he: HostEngine, host: Any, run_id: str) -> str:
        """The host folder that will hold this run's bind-mounted results (the up play creates it), recorded first.

        On this machine it is absolute; over SSH a home that is not absolute is below the login's home
        (``~/``), which the play resolves and reports.
        """
        home = str(host.home)
        if not he.engine.via:
            root = os.path.abspath(Path(os.path.expanduser(home)) / "ctr" / run_id)
            self._record("folder", key=root, host=he.host, path=root, via=[])
            return root
        if not home.startswith(("/", "~/")):
            home = f"~/{home}"
        root = f"{home}/ctr/{run_id}"
        self._record("folder", key=f"{he.host}:{root}", host=he.host, path=root, via=list(he.engine.via))
        return root

    @staticmethod
    def _data_root(he: HostEngine, host: Any) -> str:
        """The host's data-set folder (``HOME/datasets``, where role dataset ships), which containers mount.

        Not recorded for a sweep: it is the host's, like its payload venv, and stays between runs.
        """
        home = str(host.home)
        if not he.engine.via:
            return os.path.abspath(Path(os.path.expanduser(home)) / "datasets")
        if not home.startswith(("/", "~/")):
            home = f"~/{home}"
        return f"{home}/datasets"

    # ------------------------------------------------------------------ up
    def create_dependencies(self, spec: LayerSpec) -> None:
        """Hosts (guests for ctr-vm), their engines (dockerd started where none runs), the image on each."""
        self._opts = opts = self._options(spec)
        self._artifacts = spec.artifacts_dir  # where the up/down plays keep their inventory and artifacts
        hosts = self._hosts(spec)
        if opts.get("hosts"):  # only the hosts these patterns name (as a workload's hosts) get containers
            chosen = [h for pattern in opts["hosts"] for h in match_pattern(pattern, hosts, _names)]
            hosts = [h for h in hosts if h in chosen]
        if not hosts:
            picked = f" among layer option hosts {opts['hosts']}" if opts.get("hosts") else ""
            raise TargetError(
                f"inventory {spec.inventory} has no host that carries layer {self.layer}{picked}",
                f"add {self.layer} to its dlinfra_layers" + (", or fix the hosts patterns" if picked else ""),
            )
        self.run_id = run_id = opts["run_id"]
        self.keep_images = opts.get("keep_images")
        # Claimed before anything exists, held until down() has removed it all: a controller killed
        # meanwhile leaves a state file that `dlinfra sweep` (and the next run's start) cleans up after.
        self._claim = self._claim or claim(run_id, "ctr", layer=self.layer)
        over_ssh = [h for h in hosts if not h.vars.get("dlinfra_netns")]  # the testbed's dockerds are its own
        # dlinfra's guests socket-activate dockerd: the role checks it answers, leaving the service as it is.
        settings: dict[str, Any] = {"service": False} if self.layer == "ctr-vm" and self.engine_kind == "docker" else {}
        wanted = [rt.docker_name if self.engine_kind == "docker" else rt.name for rt in opts["runtimes"]]
        if any(name != "runc" for name in wanted):  # the role registers (docker) or installs (podman) the others
            settings["runtimes"] = [name for name in wanted if name != "runc"]
        prepare(
            [HostToPrepare(h.name, self.engine_kind, ansible_reach(h), settings) for h in over_ssh],  # type: ignore[arg-type]
            artifacts_dir=self._artifacts,
        )
        for host in hosts:  # fail fast, naming the host, before building anything
            he = self._engine_for(host, self.engine_kind)
            self._record("engine", key=he.engine.label, **engine_where(he.engine))
            remove_run(he.engine, run_id)  # what a killed earlier run with this (explicit) run_id left
            self.hosts.append(he)
            for rt in opts["runtimes"]:  # a runtime the host lacks: one line saying what to install
                check_registered(he.engine, rt)
        archive = None
        if opts.get("wheelhouse"):  # a prebuilt folder with requirements.lock (air-gapped sites, tests)
            wh_path = Path(str(opts["wheelhouse"]))
            wh_lock = wh_path / "requirements.lock"
        elif spec.wheelhouse is not None:
            wh_path, wh_lock = spec.wheelhouse.path, spec.wheelhouse.lock
            archive = build_deps_archive(spec.wheelhouse)  # what the bm and vm targets unpack: the image too
        else:
            raise DlinfraError(f"layer {self.layer}: no wheelhouse to build the payload image from", "a bug")
        kinds = sorted({he.engine.kind for he in self.hosts})
        images: dict[str, str] = {}
        for kind in kinds:  # built and saved here; the up play loads it where it is missing (role payload_image)
            local = controller_engine(kind, artifacts_dir=self._artifacts)
            built = build_payload_image(local, wh_path, wh_lock, base=opts.get("base_image"), deps_archive=archive)
            images[kind] = built.tag
            for he in self.hosts:
                if he.engine.kind != kind or he.engine.exists("image", built.tag):
                    continue
                he.image_tarball = str(self._saved(local, built, he))
                if not self._keeps_image(he):  # a kept image is the host's cache, not an object of the run
                    where = engine_where(he.engine)
                    self._record("image", key=f"{he.engine.label} {built.tag}", ref=built.tag, **where)
                he.loaded_images.append(built.tag)
        self._chosen, self._images = hosts, images

    @staticmethod
    def _saved(local: Engine, built: PayloadImage, he: HostEngine) -> Path:
        """What to ship to a host that lacks the payload image: only its top layer where the host's Docker holds
        the dependencies image under it, the same build (a ctr-vm guest's image has it baked in), else the whole
        image."""
        if he.engine.kind == "docker" and built.deps_id and he.engine.image_id(built.deps_tag) == built.deps_id:
            thin = save_layers_above(local, built.tag, built.deps_tag)
            size = f"{thin.stat().st_size / 2**20:.1f} MiB"
            say(f"{he.host}: holds the dependencies image; ships the payload image's own layer ({size})")
            return thin
        return save_image(local, built.tag)

    def create(self, spec: LayerSpec) -> list[Target]:
        """One container per host (spread: processes_per_host of them), each pinned to its CPU chunk: one up play."""
        opts, hosts, images, run_id = self._opts, self._chosen, self._images, str(self.run_id)
        network: NetworkMode = opts["network_mode"]
        n = 1 if opts["placement"] == "single" else int(opts["processes_per_host"])
        per_host = 1 if opts["placement"] == "pack" else n
        port_base = int(opts["port_base"])
        # Enough for a cell whose processes all land in one container, plus the chief's control port.
        enough = max(2, spec.processes_per_cell + 1) if network.kind == "bridge" else 0
        ports_each = int(opts.get("ports_per_container", enough))
        publish = network.kind == "bridge" and len(hosts) > 1
        plays: list[PlayHost] = []
        placed: list[list[tuple[ContainerSpec, list[int], tuple[int, ...]]]] = []
        for host, he in zip(hosts, self.hosts, strict=True):
            he.results_root = self._results_root(he, host, run_id)
            cpus = host_cpus(host, he.engine.via)  # the inventory's, else the host's usable CPUs, as bm's
            chunks = split_cpuset(cpus, per_host) if cpus and (opts["pin"] or per_host == 1) else []
            mine: list[tuple[ContainerSpec, list[int], tuple[int, ...]]] = []
            for r, rt in enumerate(opts["runtimes"]):  # each runtime's containers on the same CPU chunks
                for i in range(per_host):
                    chunk = chunks[i] if chunks else (cpus if per_host == 1 else [])
                    if chunks and not chunk:
                        raise DlinfraError(
                            f"host {host.name}: {per_host} containers need at least {per_host} CPUs, it has "
                            f"{len(cpus)}",
                            "lower processes_per_host or use placement pack",
                        )
                    first = (r * per_host + i) * max(ports_each, 1) + port_base
                    ports = tuple(first + k for k in range(ports_each)) if publish else ()
                    cspec = self._container_spec(spec, host.name, images[he.engine.kind], rt, i, chunk, ports)
                    mine.append((cspec, list(chunk), ports))
            kind = he.engine.kind
            image = (he.image_tarball, images[kind]) if images[kind] in he.loaded_images else None
            data_root = self._data_root(he, host) if spec.datasets else ""
            plays.append(
                PlayHost(host.name, he.engine, he.ansible, [c for c, _, _ in mine], he.results_root, data_root, image)
            )
            placed.append(mine)
        with phase(f"{self.layer}: {len(plays)} host(s), {UP_PLAYBOOK}"):
            kept = all(self._keeps_image(he) for he in self.hosts if he.loaded_images)
            reports = run_up(plays, run_id, artifacts_dir=self._artifacts, images_kept=kept)
        targets = []
        for host, he, mine in zip(hosts, self.hosts, placed, strict=True):
            report = reports[host.name]
            he.results_root = str(report.get("runs_root") or he.results_root)
            for cspec, chunk, ports in mine:
                record = report["containers"][cspec.name]
                target = self._target(host, he, cspec, record, f"{he.results_root}/{cspec.name}", chunk, ports)
                if report.get("data_root"):  # the data sets go to the host, the container reads its mount
                    target.data_root = DATA_IN_CONTAINER
                    target.data_host = target_from_host(host, self.layer)
                    target.data_host.home = os.path.dirname(str(report["data_root"]))
                targets.append(target)
        return targets

    def _container_spec(
        self, spec: LayerSpec, host: str, image: str, rt: OciRuntime, i: int, chunk: list[int], ports: tuple[int, ...]
    ) -> ContainerSpec:
        """The ``i``-th payload container of a host under runtime ``rt`` (runc's keep their plain names)."""
        opts, run_id = self._opts, str(self.run_id)
        under = "" if rt.name == "runc" else f"{rt.label()}-"
        return ContainerSpec(
            name=f"dlinfra-{run_id}-{host}-{under}{i}",
            image=image,
            run_id=run_id,
            network=opts["network_mode"],
            resources=Resources(
                cpuset=format_cpuset(chunk) if chunk else None,
                cpus=opts.get("cpus"),
                memory_bytes=opts.get("memory_bytes"),
                gpus=opts.get("gpus"),
            ),
            runs_mount=f"{HOME_IN_CONTAINER}/runs",  # the target's runs_dir: RUNS_ROOT/NAME on the host
            data_mount=DATA_IN_CONTAINER if spec.datasets else None,
            ports=ports,
            labels={"dlinfra.layer": self.layer, "dlinfra.host": host, "dlinfra.runtime": rt.label()},
            runtime=rt.docker_name if self.engine_kind == "docker" else rt.name,
            runtime_flags=tuple(rt.podman_flags()) if self.engine_kind == "podman" else (),
        )  # no user: the play runs it as the owner of the results folder (root then needs no capability)

    def _hosts(self, spec: LayerSpec) -> list[Any]:
        """The hosts that get containers: inventory hosts, or for ctr-vm the guests (brought up here if needed)."""
        if self.stacks_on is not None:
            guests = spec.below
            if guests is None:  # the campaign does not measure the layer below: bring its guests up here
                if spec.below_provider is None:
                    raise SpecError(
                        f"{self.layer}: no {self.stacks_on} targets to run on, and no provider to bring them up",
                        "give LayerSpec.below (the targets) or below_provider (the campaign's, for that layer)",
                    )
                self.own_vms = spec.below_provider(self.stacks_on)
                with phase(f"{self.layer}: {self.stacks_on} underneath"):
                    guests = self.own_vms.up(
                        LayerSpec(
                            self.stacks_on,
                            spec.hosts,
                            spec.inventory,
                            spec.below_options,
                            spec.artifacts_dir,
                            wheelhouse=spec.wheelhouse,
                            stacked=[self.layer],
                        )
                    )
            self._guests = {g.name: g for g in guests}
            return [guest_as_host(g, self.layer) for g in guests]
        return [h for h in spec.hosts if self.layer in h.layers]

    def _target(
        self, host: Any, he: HostEngine, cspec: ContainerSpec, record: dict, host_runs: str, chunk: list[int], ports
    ) -> Target:
        hv = host.vars
        limits = applied_limits(record)
        address = host.address if ports or cspec.network.kind != "bridge" else None
        address = address or container_address(record, cspec.network, host.address)
        devices = [f"gpu:{cspec.resources.gpus}"] if cspec.resources.gpus else []
        conmon = None
        if he.engine.kind == "podman" and he.engine.netns:
            conmon = int((record.get("State") or {}).get("ConmonPid") or 0) or None
        details: dict[str, Any] = {
            "container": cspec.name,
            "engine": he.engine.kind,
            "engine_version": self._engine_version(he.engine),
            "image": cspec.image,
            "network": str(cspec.network),
            "limits": limits,
            "published_ports": list(ports),
            **self._runtime_details(he, cspec, record),
        }
        guest = self._guests.get(host.name) if self.stacks_on else None
        if guest is not None:
            details["guest"] = {"name": guest.name, **guest.details}
        return Target(
            layer=self.layer,
            name=cspec.name,
            # results group by the real machine; a container in a guest inherits the guest's emulation
            physical_host=guest.physical_host if guest else host.name,
            address=host.address,  # SSH goes to the host; peers dial peer_ip
            port=host.port,
            user=host.user,
            key_file=host.key_file,
            known_hosts=host.ssh.known_hosts,
            cpu_set=list(chunk),
            memory_bytes=cspec.resources.memory_bytes,
            devices=devices,
            emulated=guest.emulated if guest else bool(hv.get("dlinfra_emulated", False)),
            home=HOME_IN_CONTAINER,
            base_python=f"{VENV}/bin/python",
            groups=list(getattr(host, "groups", [])),
            container=ContainerAccess(
                exec_argv=he.engine.exec_argv(cspec.name, [], mount_ns_of=conmon),
                runs_dir=f"{HOME_IN_CONTAINER}/runs",
                host_runs_dir=host_runs,
            ),
            peer_ip=address,
            published_ports=list(ports),
            payload_in_image=True,
            ansible_python=str(hv.get("ansible_python_interpreter", "auto_silent")),
            details=details,
        )

    def _runtime_details(self, he: HostEngine, cspec: ContainerSpec, record: dict) -> dict[str, Any]:
        """The container's runtime (name, version, gVisor's platform) once checked from outside and inside, what
        its kernel said, and the cell axis that keeps its cells apart from the other runtimes' (not for runc)."""
        rt = {r.label(): r for r in self._opts["runtimes"]}[cspec.labels["dlinfra.runtime"]]
        seen = verify(he.engine, cspec.name, rt, record)
        key = f"{he.engine.label} {rt.name}"
        if key not in self._versions:
            self._versions[key] = runtime_version(he.engine, rt)
        details: dict[str, Any] = {"runtime": {**rt.describe(self._versions[key]), "seen": seen}}
        if rt.name != "runc":
            details["cell_axes"] = {"runtime": rt.label()}
        return details

    def _engine_version(self, engine: Engine) -> str:
        """The engine's server version (testbed metadata), asked once per engine."""
        if engine.label not in self._versions:
            field = "{{.Server.Version}}" if engine.kind == "docker" else "{{.Version}}"
            found = engine.run("version", "--format", field, check=False)
            self._versions[engine.label] = found.stdout.strip() if found.returncode == 0 else "unknown"
        return self._versions[engine.label]

    def _keeps_image(self, he: HostEngine) -> bool:
        """Whether ``he`` keeps the loaded image after the run: as asked, else where the engine is a local
        testbed host's own dockerd (its data root is that host's image cache; 'testbed down' removes it)."""
        return self.keep_images if self.keep_images is not None else bool(he.engine.netns)

    # ---------------------------------------------------------------- down
    def delete(self) -> None:
        """Containers, networks, loaded images and results folders (the down play), and dockerds this run started."""
        if self.run_id is None:
            return
        plays = [
            PlayHost(
                he.host,
                he.engine,
                he.ansible,
                runs_root=he.results_root or "",
                remove_images=[] if self._keeps_image(he) else he.loaded_images,
            )
            for he in self.hosts
        ]
        if plays:
            with phase(f"{self.layer}: {len(plays)} host(s), {DOWN_PLAYBOOK}"):
                run_down(plays, self.run_id, artifacts_dir=self._artifacts)
        for he in self.hosts:
            if he.started_dockerd and he.engine.netns and not _others_use(he.engine, self.run_id):
                dockerd.stop_dockerd(he.engine.netns)
        self.hosts = []
        self.run_id = None
        if self._claim is not None:  # only once everything is gone: a failed down() leaves the run to a sweep
            self._claim.release()
            self._claim = None

    def delete_dependencies(self) -> None:
        """The guests brought up for ctr-vm when the campaign does not measure vm."""
        if self.own_vms is not None:
            self.own_vms.down()
            self.own_vms = None

    @classmethod
    def sweep(cls, label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
        sweep_run(label, objects, report, dry_run=report.dry_run)

    @classmethod
    def discover(cls) -> dict[str, list[dict[str, Any]]]:
        return discover_runs()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "run_id": self.run_id}


class DockerProvider(ContainerProvider):
    """Containers under Docker (a dockerd per local-testbed host, started where no init system runs)."""

    name = "docker"
    engine_kind = "docker"


class PodmanProvider(ContainerProvider):
    """Containers under Podman (daemonless; on the local testbed, joined to the host's namespace)."""

    name = "podman"
    engine_kind = "podman"


def guest_as_host(guest: Target, layer: str) -> InventoryHost:
    """An inventory host that reaches ``guest`` exactly as the run engine does, with the guest's interpreter (no
    discovery round trip, which costs seconds in an emulated guest)."""
    hv: dict[str, Any] = {
        "ansible_user": guest.user,
        "ansible_port": guest.port,
        "ansible_python_interpreter": guest.ansible_python,
        "dlinfra_known_hosts": guest.known_hosts,
        "dlinfra_layers": [layer],
        "dlinfra_home": guest.home,
    }
    if guest.key_file:
        hv["ansible_ssh_private_key_file"] = guest.key_file
    if guest.cpu_set:
        hv["dlinfra_cpus"] = format_cpuset(guest.cpu_set)
    return InventoryHost(name=guest.name, address=guest.address, groups=[], vars=hv)


def _others_use(engine: Engine, run_id: str) -> bool:
    """Whether another live run has containers on this daemon, or has recorded that it uses it."""
    names = engine.run("ps", "-aq", check=False).stdout.split()
    if names and len(names) > len(engine.names_with_label("container", f"{RUN_LABEL}={run_id}")):
        return True
    return any(
        o.get("kind") == "engine" and o.get("socket") == engine.socket
        for info in live_runs()
        if info.label != run_id
        for o in info.objects
    )


# ------------------------------------------------------------------ sweep
def sweep_run(label: str, objects: list[dict[str, Any]], report: SweepReport, *, dry_run: bool = False) -> None:
    """Remove what a dead ``ctr`` run left, from its state file's entries (or ones found by label).

    Containers and networks labelled with the run and the images it loaded, on every engine it
    used; its runs folders; the per-namespace dockerds it started, unless a live run (or anything
    not from a dead dlinfra run) still has containers there. The daemons' data roots stay while
    their testbed host exists (they are its image cache; ``testbed down`` removes them).
    """
    # ctr-vm's hosts are the run's guests: one that no longer answers went with its guest, which is no error.
    in_guests = any(o.get("kind") == "ctr" and o.get("layer") == "ctr-vm" for o in objects)
    images: dict[str, list[str]] = {}
    for entry in objects:
        if entry.get("kind") == "image" and entry.get("ref"):
            images.setdefault(engine_from(entry).label, []).append(str(entry["ref"]))
    seen: set[str] = set()
    for entry in objects:
        if entry.get("kind") != "engine":
            continue
        engine = engine_from(entry)
        if engine.label in seen:
            continue
        seen.add(engine.label)
        if engine.kind == "docker" and engine.socket and not engine.via and not dockerd.answers(engine.socket):
            continue  # its daemon is gone; a recorded dockerd entry below kills what it left running
        try:
            removed = remove_run(engine, label, images=images.get(engine.label, ()), dry_run=dry_run)
        except DlinfraError as exc:
            if in_guests and engine.via:
                report.skip(f"run {label}: guest {engine.host} does not answer (gone with its guest): {exc}")
            else:
                report.error(f"run {label}: {engine.label}: {exc}")
            continue
        for kind, names in removed.items():
            report.add(kind, *(f"{name} ({engine.label})" for name in names))
    for entry in objects:
        if entry.get("kind") == "folder" and entry.get("path"):
            _sweep_folder(label, entry, report, dry_run=dry_run, in_guests=in_guests)
    for entry in objects:
        if entry.get("kind") == "dockerd":
            _sweep_dockerd(label, entry, report, dry_run=dry_run)


def _sweep_folder(label: str, entry: dict[str, Any], report: SweepReport, *, dry_run: bool, in_guests: bool) -> None:
    path = str(entry["path"])
    if f"/ctr/{label}" not in path:  # a runs folder is always HOME/ctr/RUN_ID: refuse anything else
        report.error(f"run {label}: not removing {path}: not a runs folder of this run")
        return
    if entry.get("via"):
        engine = engine_from(entry)
        where = f"{engine.host}:{path}"
        if dry_run:
            report.add("run folders", where)
            return
        # A folder below the login's home is recorded as ~/...: the remote shell expands the unquoted ~/.
        command = (
            f"rm -rf -- ~/{shlex.quote(path[2:])}" if path.startswith("~/") else shlex.join(["rm", "-rf", "--", path])
        )
        out = subprocess.run([*engine.via, command], capture_output=True, timeout=120)
        why = out.stderr.decode(errors="replace").strip()[-200:]
        if out.returncode == 0:
            report.add("run folders", where)
        elif in_guests and out.returncode == 255:
            report.skip(f"run {label}: guest {engine.host} does not answer (gone with its guest): {why}")
        else:
            report.error(f"run {label}: could not remove {where}: {why}")
        return
    if Path(path).exists():
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
        report.add("run folders", path)


def _sweep_dockerd(label: str, entry: dict[str, Any], report: SweepReport, *, dry_run: bool) -> None:
    fields = {k: entry.get(k) for k in ("netns", "socket", "exec_root", "data_root", "pidfile", "log")}
    if not fields["netns"] or not fields["socket"] or not fields["pidfile"]:
        return
    paths = dockerd.DockerdPaths(**fields)  # type: ignore[arg-type]
    running = dockerd.pid_of(paths.pidfile) is not None
    if running and dockerd.answers(paths.socket):
        engine = Engine("docker", host=str(entry.get("host") or paths.netns), socket=paths.socket, netns=paths.netns)
        try:
            labels = run_labels(engine)
            total = len(engine.run("ps", "-aq", what="ps").stdout.split())
        except DlinfraError as exc:
            report.error(f"run {label}: dockerd in {paths.netns}: {exc}")
            return
        owners = set(labels["containers"].values())
        live = sorted(o for o in owners if o != label and is_live(o))
        live += sorted(  # a live run that adopted this daemon and has no container on it yet
            info.label
            for info in live_runs()
            if info.label not in (label, *live) and any(o.get("socket") == paths.socket for o in info.objects)
        )
        if live or total > len(labels["containers"]):
            why = f"run(s) {', '.join(live)} use it" if live else "it runs containers that are not dlinfra runs'"
            report.skip(f"dockerd in {paths.netns} kept: {why}")
            return
        for other in sorted(owners - {label}):  # dead runs' containers: the daemon will not be there to list them
            for kind, names in remove_run(engine, other, dry_run=dry_run).items():
                report.add(kind, *(f"{name} ({engine.label})" for name in names))
    leftovers = dockerd.processes_mentioning(paths.exec_root) if paths.exec_root else []
    if running or leftovers:
        report.add("daemons", f"dockerd in {paths.netns} ({paths.socket})")
    if not dry_run:
        dockerd.stop_dockerd_at(paths, unmount=False)
        for root in (paths.exec_root, paths.data_root):  # a killed daemon leaves its containers' mounts too
            report.add("mounts", *dockerd.unmount_under(root))
    if not (dockerd.NETNS_DIR / paths.netns).exists():  # its testbed host is gone: so is the use of its image cache
        for kind, names in dockerd.remove_dockerd_state(paths, dry_run=dry_run).items():
            report.add(kind, *names)


# -------------------------------------------------------------- discovery
def discover_runs() -> dict[str, list[dict[str, Any]]]:
    """Run labels with containers or networks on this machine's engines, and ctr runs folders on the local
    testbeds' hosts: what runs that left no state file may have left."""
    found: dict[str, list[dict[str, Any]]] = {}
    for engine in _local_engines():
        try:
            held = run_labels(engine)
        except DlinfraError:
            continue
        for label in {*held["containers"].values(), *held["networks"].values()}:
            found.setdefault(label, []).append({"kind": "engine", **engine_where(engine)})
    for folder in _testbed_runs_folders():
        found.setdefault(folder.name, []).append({"kind": "folder", "path": str(folder), "via": []})
    return {label: entries for label, entries in found.items() if is_valid_label(label)}


def _local_engines() -> Iterable[Engine]:
    """This machine's docker and podman, and every per-namespace dockerd dlinfra started that answers."""
    if Path(dockerd.DEFAULT_SOCKET).exists() and dockerd.answers(dockerd.DEFAULT_SOCKET):
        yield Engine("docker", host="localhost", timeout=60)
    if shutil.which("podman"):
        yield Engine("podman", host="localhost", timeout=60)
    run_base, _lib = dockerd.state_base()
    for sock in sorted(run_base.glob("docker-*.sock")):
        netns = sock.name.removeprefix("docker-").removesuffix(".sock")
        if dockerd.answers(str(sock)):
            yield Engine("docker", host=netns, socket=str(sock), netns=netns, timeout=60)


def _testbed_runs_folders() -> list[Path]:
    """``HOME/ctr/RUN_ID`` folders of the local testbeds' hosts (the ctr layer's runs folders)."""
    folders = []
    for st in all_testbeds():
        for host in st.hosts:
            ctr = Path(host.home) / "ctr"
            if ctr.is_dir():
                folders += [p for p in sorted(ctr.iterdir()) if p.is_dir()]
    return folders
