"""The ``zun`` provider: ``ctr`` targets that OpenStack Zun creates, places and wires, entered through their
compute host.

Who it is for: an operator who benchmarks their own cloud. Zun's own ways into a container (its ``execute``
API, one command answered when it ends; its websocket exec) cannot start a cell's processes together and stream
them, so a target is entered as the docker provider's are: ``docker exec`` on the compute host Zun placed it on,
over that host's SSH. The inventory lists those compute hosts (``dlinfra_layers: [ctr]``), each named as Zun
names it (``dlinfra_zun_host``, default the inventory name), with the socket of the dockerd its zun-compute
drives (``dlinfra_docker_socket``, default Docker's).

What ``up`` does, in order (docs/openstack.md says it for users):

1. connect to the cloud (``cloud``, else ``$OS_CLOUD``; credentials only from clouds.yaml, their secrets
   registered first), find Zun in its catalog and the ``network``;
2. claim a run label; record the cloud and each compute host's engine before anything is made;
3. the image: by default dlinfra's payload image, built here as the docker provider builds it and loaded into
   each compute host's engine where it is missing (role ``payload_image``, over SSH; recorded first, removed at
   ``down`` unless ``keep_image``), which Zun takes with ``image_driver: docker`` and ``image_pull_policy:
   ifnotpresent`` (no registry needed); or ``image`` with ``image_driver``: the same image pushed to your registry
   or Glance, which Zun fetches itself (its payload hash is checked as any target's);
4. one container per compute host through Zun's API: placed there (``host``), started (``run=true``), labelled
   ``dlinfra.run=<label>``, ``cpu`` and ``memory_mb`` (``cpu_policy: dedicated`` pins it), a port on ``network``
   (Neutron's, wired by the cloud's L2 agent);
5. poll each to ``Running`` (``Error`` is one error with Zun's ``status_reason``); read the container's CPU set.

The target's files: Zun mounts no host folder (its ``mounts`` are Cinder volumes or files it writes itself), so
its runs folder is the container's own, read through the exec (:class:`~dlinfra.transport.ContainerTransport`).
Peers dial its Neutron address. ``down`` deletes the containers through Zun, waits until Zun no longer lists
them, removes the image it loaded, and releases the claim; ``dlinfra sweep`` does the same for a killed run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from dlinfra import secrets
from dlinfra.errors import DlinfraError, TargetError
from dlinfra.images.deps_archive import build_deps_archive
from dlinfra.inventory import InventoryHost
from dlinfra.providers import cpus as cpus_of
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.image import VENV, build_payload_image, save_image
from dlinfra.providers.containers.playbook import PlayHost, run_up
from dlinfra.providers.containers.provider import (
    HOME_IN_CONTAINER,
    ansible_reach,
    controller_engine,
    ssh_via,
    sweep_run,
)
from dlinfra.providers.containers.run import engine_where
from dlinfra.providers.openstack_cloud import CloudProvider, cloud_option, connect, poll_interval, recorded_clouds
from dlinfra.providers.options import NON_EMPTY, Option
from dlinfra.providers.zun.api import LABEL_KEY, ZunApi, settled
from dlinfra.runtime.progress import phase
from dlinfra.runtime.runs_registry import recorded_objects
from dlinfra.runtime.sweep_report import SweepReport
from dlinfra.transport import ContainerAccess

#: The run registry kind of a zun run's cloud, and of the compute hosts' engines and the images loaded there.
#: Kinds of their own, not the docker provider's ``engine`` and ``image``: its sweep would remove the run's
#: containers from Zun's dockerd behind Zun's back. This provider's sweep hands them to it after Zun's delete.
RUN_KIND = "zun"
ENGINE_KIND = "zun-engine"
IMAGE_KIND = "zun-image"
IMAGE_DRIVERS = ("docker", "glance")


class ZunProvider(CloudProvider):
    """``ctr`` targets: one Zun container per compute host of the inventory, from dlinfra's payload image."""

    name = "zun"
    layers: ClassVar[Mapping[str, str | None]] = {"ctr": None}
    options: ClassVar[Mapping[str, Option]] = {
        "cloud": cloud_option("Zun"),
        "network": Option("the Neutron network each container gets its port on (peers dial that address)", "str",
                          pattern=NON_EMPTY, shape="a network name or ID"),
        "cpu": Option("CPUs of each container (Zun's cpu)", "number", 1.0, above=0, high=1024),
        "cpu_policy": Option("Zun's cpu_policy: dedicated pins each container to whole CPUs", "choice", "shared",
                             choices=("shared", "dedicated")),
        "memory_mb": Option("memory of each container in MiB", "int", 2048, low=6, high=1 << 24),
        "image": Option("dlinfra's payload image where Zun's image_driver fetches it (your registry or Glance; its "
                        "payload hash is checked); default: the image built here, loaded into each compute host's "
                        "engine", "str", pattern=NON_EMPTY, shape="an image reference"),
        "image_driver": Option("how Zun gets image: docker (a registry, or the compute host's engine) or glance",
                               "choice", "docker", choices=IMAGE_DRIVERS),
        "keep_image": Option("leave the payload image this run loaded on the compute hosts", "bool", False),
        "start_timeout": Option("how long a container may take to be Running", "number", 300, above=0,
                                unit="seconds"),
        "poll_interval": poll_interval("container"),
    }  # fmt: skip

    def __init__(self, layer: str) -> None:
        super().__init__(layer)
        self._api: ZunApi | None = None
        self._hosts: list[tuple[InventoryHost, Engine]] = []
        self._network_id = ""
        self._image = ""
        self._loaded: list[tuple[InventoryHost, Engine]] = []
        self._uuids: dict[str, str] = {}  # inventory host -> its container's Zun UUID

    # ------------------------------------------------------------------ up
    def create_dependencies(self, spec: LayerSpec) -> None:
        """The cloud, its Zun and network, the compute hosts and their engines; then the claim and the image."""
        conn = self.connect_cloud(spec)
        self._api = ZunApi(conn, self._cloud)
        if self._options.get("network"):
            network = conn.network.find_network(str(self._options["network"]), ignore_missing=True)
            if network is None:
                raise TargetError(f"zun: network {self._options['network']!r} is not in cloud {self._cloud}",
                                  "name a Neutron network the containers may have a port on")  # fmt: skip
            self._network_id = str(network.id)
        hosts = [h for h in spec.hosts if self.layer in h.layers]
        if not hosts:
            raise TargetError(
                f"inventory {spec.inventory} has no compute host that carries layer {self.layer}",
                "list the cloud's compute hosts you reach over SSH, with dlinfra_layers: [ctr]",
            )
        self.claim_run().add(RUN_KIND, key=self.run_label, cloud=self._cloud, clouds_yaml=self._clouds_yaml)
        for host in hosts:
            socket = host.vars.get("dlinfra_docker_socket")
            engine = Engine("docker", host=host.name, socket=str(socket) if socket else None, via=ssh_via(host))
            engine.check_available()  # fails fast, naming the host, before anything is built
            self._claim.add(ENGINE_KIND, key=engine.label, **engine_where(engine))
            self._hosts.append((host, engine))
        self._image = str(self._options.get("image") or "") or self._load_payload_image(spec)

    def _load_payload_image(self, spec: LayerSpec) -> str:
        """dlinfra's payload image, built here once, loaded into each compute host's engine where it is missing."""
        if spec.wheelhouse is None:
            raise DlinfraError(f"layer {self.layer}: no wheelhouse to build the payload image from", "a bug")
        local = controller_engine("docker", artifacts_dir=self._artifacts)
        built = build_payload_image(local, spec.wheelhouse.path, spec.wheelhouse.lock,
                                    deps_archive=build_deps_archive(spec.wheelhouse))  # fmt: skip
        missing = [(h, e) for h, e in self._hosts if not e.exists("image", built.tag)]
        assert self._claim is not None
        if missing:
            tarball = str(save_image(local, built.tag))
            for host, engine in missing:
                if not self._options.get("keep_image"):
                    self._claim.add(
                        IMAGE_KIND, key=f"{engine.label} {built.tag}", ref=built.tag, **engine_where(engine)
                    )
                self._loaded.append((host, engine))
            plays = [PlayHost(h.name, e, ansible_reach(h), image=(tarball, built.tag)) for h, e in missing]
            with phase(f"{self.layer}: the payload image on {len(plays)} compute host(s)"):
                run_up(plays, self.run_label, artifacts_dir=self._artifacts)
        return built.tag

    def create(self, spec: LayerSpec) -> list[Target]:
        """One container per compute host, created and started through Zun; then each polled to Running."""
        assert self._api is not None
        opts = self._options
        body: dict[str, Any] = {
            "image": self._image,
            "image_driver": str(opts["image_driver"]),
            "command": ["sleep", "infinity"],  # cells run through exec; the container only has to stay up
            "cpu": float(opts["cpu"]),
            "cpu_policy": str(opts["cpu_policy"]),
            "memory": str(int(opts["memory_mb"])),
        }
        if not opts.get("image"):  # dlinfra's image is in the compute host's engine: never pulled
            body["image_pull_policy"] = "ifnotpresent"
        if self._network_id:
            body["nets"] = [{"network": self._network_id}]
        for host, _engine in self._hosts:
            if host.name in self._uuids:
                continue
            labels = {LABEL_KEY: self.run_label, "dlinfra.layer": self.layer, "dlinfra.host": host.name}
            name = f"dlinfra-{self.run_label}-{host.name}"
            made = self._api.create({**body, "name": name, "host": _zun_host(host), "labels": labels})
            self._uuids[host.name] = str(made["uuid"])
        records = self._api.wait(list(self._uuids.values()), settled, "Running", float(opts["start_timeout"]),
                                 float(opts["poll_interval"]))  # fmt: skip
        return [self._target(host, engine, records[self._uuids[host.name]]) for host, engine in self._hosts]

    def _target(self, host: InventoryHost, engine: Engine, record: dict[str, Any] | None) -> Target:
        """The target of one Running container, or one error with Zun's reason."""
        record = record or {}
        name = str(record.get("name"))
        if record.get("status") != "Running":
            raise TargetError(
                f"zun: container {name} on {host.name} is {record.get('status', 'gone')}: "
                f"{secrets.redact(str(record.get('status_reason') or 'no reason given'))}",
                "see zun-compute's log on that host (an image Zun cannot get, no host with enough CPU or memory)",
            )
        zun_host = _zun_host(host)
        if record.get("host") != zun_host:
            raise TargetError(f"zun: container {name} was placed on {record.get('host')}, not on {zun_host}",
                              f"set dlinfra_zun_host of inventory host {host.name} to the name Zun lists")  # fmt: skip
        in_engine = f"zun-{record['uuid']}"  # how Zun's docker driver names the container it made
        found = engine.run("inspect", "--format", "{{.HostConfig.CpusetCpus}}", in_engine, what="inspect")
        # Zun's cpuset (cpu_policy dedicated), else its host's CPUs, decided as for every layer.
        cpus = cpus_of.decide([], found.stdout, name) or cpus_of.host_cpus(host, engine.via)
        address = _address(record, self._network_id)
        return Target(
            layer=self.layer,
            name=name,
            physical_host=host.name,
            address=host.address,  # SSH goes to the compute host; peers dial the container's own address
            port=host.port,
            user=host.user,
            key_file=host.key_file,
            known_hosts=host.ssh.known_hosts,
            provider=self.name,
            cpu_set=cpus,
            memory_bytes=int(self._options["memory_mb"]) << 20,
            home=HOME_IN_CONTAINER,
            base_python=f"{VENV}/bin/python",
            groups=list(host.groups),
            container=ContainerAccess(
                exec_argv=engine.exec_argv(in_engine, []),
                runs_dir=f"{HOME_IN_CONTAINER}/runs",
                host_runs_dir=None,
                copy_argv=[*engine.base_argv(), "cp"],
                engine_name=in_engine,
            ),
            peer_ip=address,
            payload_in_image=True,  # deploy checks its hash: another image's is refused, naming the target
            ansible_python=str(host.vars.get("ansible_python_interpreter", "auto_silent")),
            details={
                "container": in_engine,
                "engine": "docker",
                "image": self._image,
                "zun_container": record["uuid"],
                "zun_host": zun_host,
                "zun_cloud": self._cloud,
                "network": self._network_id or "default",
                "limits": {"cpu": record.get("cpu"), "cpu_policy": record.get("cpu_policy"),
                           "memory_mb": record.get("memory")},
            },
        )  # fmt: skip

    # ---------------------------------------------------------------- down
    def delete(self) -> None:
        """The run's containers through Zun (and any a killed bring-up left with its label), then its images."""
        if self._claim is None:
            return
        api = self._api or ZunApi(connect(self._cloud, self._clouds_yaml), self._cloud)
        _delete_run(api, self.run_label, float(self._options["poll_interval"]))
        if self._loaded and not self._options.get("keep_image"):
            report = SweepReport()
            loaded = [{"kind": kind, "ref": self._image, **engine_where(engine)}
                      for _host, engine in self._loaded for kind in (ENGINE_KIND, IMAGE_KIND)]  # fmt: skip
            _remove_images(self.run_label, loaded, report)
            if report.errors:
                raise TargetError(f"zun: removing the payload image failed: {'; '.join(report.errors)}")
        self._uuids, self._loaded, self._hosts = {}, [], []
        self._claim.release()  # only once everything is gone: a failed down() leaves the run to a sweep
        self._claim = None

    # --------------------------------------------------------------- sweep
    @classmethod
    def sweep(cls, label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
        """Delete run ``label``'s containers in the cloud it recorded, then the images it loaded on the hosts."""
        for _run, cloud, clouds_yaml in recorded_clouds(label, objects, RUN_KIND, "zun containers", report):
            try:
                api = ZunApi(connect(cloud, clouds_yaml), cloud)
                left = api.of_run(label)
                if left and not report.dry_run:
                    _delete_run(api, label, 1.0)
                report.add("zun containers", *(f"{c.get('name')} (cloud {cloud})" for c in left))
            except Exception as exc:  # noqa: BLE001 - one cloud's failure is reported, the sweep goes on
                report.error(f"run {label}: zun containers in cloud {cloud}: {secrets.redact(str(exc))}")
                return  # the images stay while containers of the run may still use them
        _remove_images(label, objects, report)

    @classmethod
    def discover(cls) -> dict[str, list[dict[str, Any]]]:
        """Recorded zun runs whose containers are still in their cloud (only a recorded run says which cloud)."""
        found: dict[str, list[dict[str, Any]]] = {}
        for label, objects in recorded_objects({RUN_KIND, ENGINE_KIND, IMAGE_KIND}).items():
            for _run, cloud, clouds_yaml in recorded_clouds(label, objects, RUN_KIND, "zun containers"):
                try:
                    left = ZunApi(connect(cloud, clouds_yaml), cloud).of_run(label)
                except Exception:  # noqa: BLE001, S112 - a cloud that does not answer has nothing to find
                    continue
                if left:
                    found.setdefault(label, []).extend(objects)
        return found


def _zun_host(host: InventoryHost) -> str:
    """The name Zun gives an inventory's compute host: ``dlinfra_zun_host``, else the inventory name."""
    return str(host.vars.get("dlinfra_zun_host") or host.name)


def _address(record: dict[str, Any], network_id: str) -> str | None:
    """The container's address on the run's network (Zun's ``addresses``: network ID -> ports)."""
    addresses = record.get("addresses") or {}
    ports = addresses.get(network_id) if network_id else next(iter(addresses.values()), None)
    return str(ports[0]["addr"]) if ports else None


def _delete_run(api: ZunApi, label: str, interval: float) -> None:
    """Delete every container carrying ``label`` and wait until Zun no longer lists them."""
    uuids = [str(c["uuid"]) for c in api.of_run(label)]
    for uuid in uuids:
        api.delete(uuid)
    api.wait(uuids, lambda record: record is None, "deleted", 300, interval)


def _remove_images(label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
    """The payload images run ``label`` loaded on the compute hosts, removed as the docker provider's sweep does."""
    kinds = {ENGINE_KIND: "engine", IMAGE_KIND: "image"}
    ours = [{**o, "kind": kinds[str(o.get("kind"))]} for o in objects if o.get("kind") in kinds]
    if ours:
        sweep_run(label, ours, report, dry_run=report.dry_run)
