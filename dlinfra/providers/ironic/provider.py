"""The ``ironic`` provider: bare-metal nodes deployed through OpenStack Ironic, then reached over SSH.

What ``up`` does, in order (docs/openstack.md says it for users):

1. resolve the nodes (``nodes``: names or UUIDs; or ``resource_class`` + ``count``: that many
   ``available`` nodes of the class) and check each: it exists, is not in maintenance, is ``available``
   (or ``manageable``, to be adopted); and each is reached either as the inventory host of its name (or host
   var ``dlinfra_ironic_node``), or at the IPv4 address its ``network_data`` records, with the SSH settings
   of the layer's one inventory host; any problem is one :class:`~dlinfra.errors.TargetError` naming the node,
   before anything changes;
2. claim the run label in the run registry and record the cloud and every node *before* deploying;
3. run ``playbooks/providers/ironic/up.yml`` here (``connection: local``): the ``openstack.cloud``
   collection's ``baremetal_node_action`` deploys each node (instance_info, a config drive carrying the
   inventory key's public key), without waiting; or, with ``adopt``, Ironic's adoption (openstacksdk: the
   collection has no such action): ``manage``, instance_info, ``adopt``, then boot device disk and power on
   once ``active``;
4. poll each node to ``active`` (``deploy failed`` -> its ``last_error``; ``deploy_timeout`` -> the
   node and its state), then reach each over SSH, host key checked, exactly as the ``ssh`` provider does
   (:func:`dlinfra.providers.ssh.provider.target_from_host`, ``read_facts``).

``down`` undeploys (``down.yml``, ``state: absent``) only the recorded nodes that are deployed, polls
them back to ``available`` and releases the claim. Credentials come only the OpenStack way
(``clouds.yaml`` and ``OS_CLOUD`` / the ``cloud`` option); dlinfra never reads or logs them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlinfra.errors import DlinfraError, SpecError, TargetError
from dlinfra.inventory import InventoryHost
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.ironic.nodes import (
    NODE_KIND,
    SETTLE_TIMEOUT_S,
    TAKEN,
    node_address,
    node_state,
    recorded_nodes,
    run_node_playbook,
    taken_by_live_runs,
    undeploy,
    wait_for_state,
)
from dlinfra.providers.openstack_cloud import CloudProvider, cloud_option, connect, poll_interval
from dlinfra.providers.options import NON_EMPTY, Option
from dlinfra.providers.ssh.provider import read_facts, target_from_host
from dlinfra.runtime.progress import note
from dlinfra.runtime.wait import retry_until

if TYPE_CHECKING:
    from dlinfra.runtime.sweep_report import SweepReport

#: instance_info keys the deploy sets: the image a ``direct`` deploy writes (what baremetal_node_action documents),
#: or ``boot_iso``, the bootable ISO a ``ramdisk`` deploy has the node boot by virtual media (the module passes
#: instance_info on as it is).
INSTANCE_INFO_KEYS = ("image_source", "image_checksum", "image_disk_format", "boot_iso")


class IronicProvider(CloudProvider):
    """``bm`` targets: Ironic nodes deployed for the run, reached as the inventory hosts of the same name.

    Nodes cannot carry a run label through the ``openstack.cloud`` modules (they accept only
    ``image_*`` keys of instance_info), so what a run deployed is known from its claim in the run
    registry alone: :meth:`discover` reports the recorded nodes that are still deployed, and
    :meth:`sweep` undeploys those of a dead run (never a node a live run has recorded). A run whose
    recorded clouds.yaml is gone (a test's Ironic, removed with its folder) is skipped, not retried.
    """

    name = "ironic"
    layers: ClassVar[Mapping[str, str | None]] = {"bm": None}
    options: ClassVar[Mapping[str, Option]] = {
        "cloud": cloud_option("Ironic"),
        "nodes": Option("node names or UUIDs to deploy (each reached as the inventory host of that name)", "list"),
        "resource_class": Option("take `count` available nodes of this resource class instead of naming them",
                                 "str", pattern=NON_EMPTY, shape="a resource class name"),
        "count": Option("how many nodes of resource_class", "int", 1, low=1, high=1024),
        "instance_info": Option(f"{', '.join(INSTANCE_INFO_KEYS)} for the deploy", "mapping"),
        "config_drive": Option("put the inventory key's SSH public key in a config drive", "bool", True),
        "adopt": Option("take over nodes already installed instead of deploying them (Ironic's adoption: "
                        "manageable -> active, nothing written to their disks; instance_info.image_source names "
                        "what they run), then power them on", "bool", False),
        "deploy_timeout": Option("how long a node may take to become active (undeploy waits at least 300 s)",
                                 "number", 1800, above=0, unit="seconds"),
        "poll_interval": poll_interval("node"),
    }  # fmt: skip

    def __init__(self, layer: str) -> None:
        super().__init__(layer)
        self._picked: list[tuple[Any, InventoryHost]] = []
        self._recorded: dict[str, str] = {}  # node id -> name, for every node this run may have deployed
        self._drive_keys: dict[str, str] | None = None  # node id -> the SSH public key its config drive carries
        self._addresses: dict[str, str] = {}  # node id -> the address its network_data records (no host of its name)
        self._cloud_host: InventoryHost | None = None  # whose SSH settings reach the nodes at those addresses

    # ------------------------------------------------------------ validate
    @classmethod
    def validate(cls, layer: str, options: Mapping[str, Any], where: str) -> None:
        super().validate(layer, options, where)
        nodes = options.get("nodes")
        rclass = options.get("resource_class")
        if nodes is not None:
            if not isinstance(nodes, list) or not nodes or not all(isinstance(n, str) and n for n in nodes):
                raise SpecError(f"{where}.nodes: must be a non-empty list of node names or UUIDs")
            if len(set(nodes)) != len(nodes):
                raise SpecError(f"{where}.nodes: names a node twice")
            if rclass is not None or "count" in options:
                raise SpecError(f"{where}.nodes: give either nodes or resource_class (+ count), not both")
        elif rclass is None:
            raise SpecError(
                f"{where}: provider ironic needs nodes or resource_class",
                "e.g. nodes: [node-1] or resource_class: baremetal-gpu, count: 2",
            )
        info = options.get("instance_info") or {}
        bad = sorted(set(map(str, info)) - set(INSTANCE_INFO_KEYS))
        if bad:
            raise SpecError(
                f"{where}.instance_info: unknown key(s) {', '.join(bad)}",
                f"the deploy takes {', '.join(INSTANCE_INFO_KEYS)}",
            )
        if not all(isinstance(v, str) for v in info.values()):
            raise SpecError(f"{where}.instance_info: values must be strings")
        if options.get("adopt") and not info.get("image_source"):
            raise SpecError(
                f"{where}.adopt: adoption needs instance_info.image_source",
                "name the image the nodes run (Ironic records it; nothing is written)",
            )

    # ------------------------------------------------------------------ up
    def create_dependencies(self, spec: LayerSpec) -> None:
        """Check the cloud, the nodes and their inventory hosts, then claim the run and record the nodes."""
        self.connect_cloud(spec)
        nodes = self._resolve_nodes(spec.options)
        self._cloud_host = spec.hosts[0] if len(spec.hosts) == 1 else None
        self._picked = [(node, self._host_for(node, spec)) for node in nodes]
        deploys = spec.options["config_drive"] and not spec.options.get("adopt")
        self._drive_keys = self._config_drive_keys(spec) if deploys else None
        self.claim_run()
        for node, _host in self._picked:
            self._claim.add(NODE_KIND, key=node.id, node=node.id, name=node.name, cloud=self._cloud,
                            clouds_yaml=self._clouds_yaml)  # fmt: skip
            self._recorded[node.id] = node.name or node.id

    def _resolve_nodes(self, options: Mapping[str, Any]) -> list[Any]:
        baremetal = self._conn.baremetal
        try:
            if options.get("nodes"):
                found = []
                for ref in options["nodes"]:
                    node = node_state(self._conn, ref)
                    if node is None:
                        raise TargetError(
                            f"ironic node {ref}: not found in cloud {self._cloud}",
                            "enroll it (openstack baremetal node create) or fix layer_options.bm.nodes",
                        )
                    found.append(node)
            else:
                rclass, count = str(options["resource_class"]), int(options["count"])
                taken = taken_by_live_runs()
                candidates = [
                    n
                    for n in baremetal.nodes(details=True, resource_class=rclass)
                    if n.provision_state in self._takes and not n.is_maintenance and n.id not in taken
                ]
                candidates.sort(key=lambda n: n.name or n.id)
                if len(candidates) < count:
                    raise TargetError(
                        f"ironic: {count} {' or '.join(sorted(self._takes))} node(s) of resource class {rclass} "
                        "asked for, "
                        f"{len(candidates)} found in cloud {self._cloud}",
                        "enroll and provide more nodes, or lower layer_options.bm.count",
                    )
                found = candidates[:count]
        except DlinfraError:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK's errors (connection refused, HTTP) name the cause
            raise TargetError(f"ironic: cannot list nodes in cloud {self._cloud}: {exc}") from None
        for node in found:
            self._check_node(node)
        return found

    def _check_node(self, node: Any) -> None:
        label = f"ironic node {node.name or node.id} ({node.id})"
        if node.is_maintenance:
            raise TargetError(
                f"{label} is in maintenance: {node.maintenance_reason or 'no reason given'}",
                "fix it, then: openstack baremetal node maintenance unset " + (node.name or node.id),
            )
        if node.provision_state == "active" and node.id in self._recorded:
            return  # deployed by this very run (an up after a failed wait)
        if node.provision_state not in self._takes:
            raise TargetError(
                f"{label} is {node.provision_state}, not {' or '.join(sorted(self._takes))}",
                "deploy only available nodes (adopt: available or manageable ones): undeploy it or provide it "
                "(openstack baremetal node undeploy / manage / provide)",
            )

    @property
    def _takes(self) -> frozenset[str]:
        """The provision states a node may be in to be taken by this run."""
        return frozenset({"available", "manageable"} if self._options.get("adopt") else {"available"})

    def _host_for(self, node: Any, spec: LayerSpec) -> InventoryHost | None:
        """The inventory host the node is reached as; None: at the address its network_data records."""
        refs = {node.id, *([node.name] if node.name else [])}
        for host in spec.hosts:
            if host.name in refs or str(host.vars.get("dlinfra_ironic_node", "")) in refs:
                return host
        label = f"ironic node {node.name or node.id}"
        address = node_address(self._conn, node.id)
        if address is None:
            raise TargetError(
                f"{label}: no inventory host in {spec.inventory} to reach it as, and no IPv4 address in its "
                "network_data",
                "record its address in Ironic (openstack baremetal node set --network-data FILE), add a host "
                "named after the node, or set a host's var dlinfra_ironic_node to the node's name or UUID",
            )
        if len(spec.hosts) != 1:
            raise TargetError(
                f"{label}: reached at {address} (its network_data) as which inventory host? {spec.inventory} "
                f"gives {len(spec.hosts)} host(s) for layer bm",
                "keep one inventory host for the layer: its user, key and known_hosts reach the nodes",
            )
        self._addresses[node.id] = address
        return None

    def _config_drive_keys(self, spec: LayerSpec) -> dict[str, str]:
        keys: dict[str, str] = {}
        for node, named in self._picked:
            host = named or self._cloud_host
            assert host is not None  # _host_for made sure of it
            pub = (
                Path(os.path.expanduser(host.key_file)).with_name(Path(host.key_file).name + ".pub")
                if host.key_file
                else None
            )
            if pub is None or not pub.is_file():
                raise TargetError(
                    f"ironic node {node.name or node.id}: config_drive needs the public key of host {host.name}'s "
                    f"SSH key ({pub or 'no ansible_ssh_private_key_file set'})",
                    "put KEY.pub beside the key, or set layer_options.bm.config_drive: false",
                )
            keys[node.id] = pub.read_text().strip()
        return keys

    def create(self, spec: LayerSpec) -> list[Target]:
        if spec.options.get("adopt"):
            self._adopt(spec)
        else:
            self._deploy(spec)
        targets = []
        for node, host in self._picked:
            target = self._target(node, host)
            target.provider = self.name
            target.details.update({"ironic_node": node.id, "ironic_node_name": node.name,
                                   "resource_class": node.resource_class})  # fmt: skip
            targets.append(target)
        return targets

    def _target(self, node: Any, host: InventoryHost | None) -> Target:
        """The node as the inventory host of its name, or at its network_data address as the layer's one host."""
        if host is not None:
            return target_from_host(host, self.layer)
        assert self._cloud_host is not None
        target = target_from_host(self._cloud_host, self.layer)
        target.name = target.physical_host = node.name or node.id
        target.address = self._addresses[node.id]
        target.details["address_from"] = "network_data"
        return target

    def _adopt(self, spec: LayerSpec) -> None:
        """Ironic's adoption of each node not yet active: manage it (when available), record its image, adopt
        it, wait until active; then boot it from its disk and power it on. Adoption leaves the power and the boot
        device as they were (Ironic skips the boot device while adopting, on purpose); a deploy would leave both
        set, so dlinfra sets them through Ironic once the node is active."""
        baremetal = self._conn.baremetal
        timeout = float(spec.options["deploy_timeout"])
        names = {n.id: n.name or n.id for n, _h in self._picked}
        states = {n.id: node_state(self._conn, n.id).provision_state for n, _h in self._picked}
        step = ""
        try:
            for node_id in (i for i, state in states.items() if state != "active"):
                step = f"node {names[node_id]}: manage"
                if states[node_id] == "available":
                    baremetal.set_node_provision_state(node_id, "manage", wait=True, timeout=timeout)
                step = f"node {names[node_id]}: instance_info, adopt"
                baremetal.update_node(node_id, instance_info=dict(spec.options.get("instance_info") or {}))
                baremetal.set_node_provision_state(node_id, "adopt")
            wait_for_state(self._conn, names, "active", timeout, float(spec.options["poll_interval"]),
                           "adopt")  # fmt: skip
            for node_id, name in names.items():
                if node_state(self._conn, node_id).power_state != "power on":
                    step = f"node {name}: boot device disk"
                    supported = baremetal.get_node_supported_boot_devices(node_id).get("supported_boot_devices")
                    if "disk" in (supported or []):  # fake-hardware's: pxe only
                        baremetal.set_node_boot_device(node_id, "disk", persistent=True)
                    step = f"node {name}: power on"
                    note(f"ironic: powering on node {name}")
                    baremetal.set_node_power_state(node_id, "power on", wait=True, timeout=timeout)
        except DlinfraError:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK's errors (HTTP, timeouts) name the cause
            message = f"ironic: {step} failed in cloud {self._cloud}: {exc}"
            raise TargetError(message, "see the node's last_error in Ironic") from None

    def _deploy(self, spec: LayerSpec) -> None:
        """Deploy each node not yet active (up.yml), then wait until all are active."""
        todo = []
        for node, _host in self._picked:
            if node_state(self._conn, node.id).provision_state == "active":
                continue
            entry: dict[str, Any] = {"id": node.id, "name": node.name or node.id,
                                     "instance_info": dict(spec.options.get("instance_info") or {})}  # fmt: skip
            if self._drive_keys is not None:
                entry["config_drive"] = {
                    "meta_data": {
                        "uuid": node.id,
                        "name": node.name or node.id,
                        "hostname": node.name or node.id,
                        "public_keys": {"dlinfra": self._drive_keys[node.id]},
                    }
                }
            todo.append(entry)
        if todo:
            run_node_playbook(
                "up.yml", self._cloud, todo, label=self.run_label, clouds_yaml=self._clouds_yaml,
                artifacts_dir=self._artifacts,
            )  # fmt: skip
        wait_for_state(
            self._conn,
            {n.id: n.name or n.id for n, _h in self._picked},
            "active",
            float(spec.options["deploy_timeout"]),
            float(spec.options["poll_interval"]),
            "deploy",
        )

    def wait_ready(self, targets: list[Target]) -> None:
        """Each deployed machine answers SSH (host key checked) and gives its facts; retried while it boots."""
        timeout = float(self._options["deploy_timeout"])
        interval = max(float(self._options["poll_interval"]), 0.5)

        def ready(target: Target) -> Target:  # SSH refuses while the machine boots
            what = f"ironic: {target.name} deployed but does not answer SSH"
            return retry_until(what, lambda: read_facts(target), timeout=timeout, interval=interval)

        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            list(pool.map(ready, targets))

    # ---------------------------------------------------------------- down
    def delete(self) -> None:
        if self._claim is None:
            return
        if self._recorded:
            conn = self._conn or connect(self._cloud, self._clouds_yaml)
            undeploy(
                conn,
                self._cloud,
                self._clouds_yaml,
                dict(self._recorded),
                label=self.run_label,
                timeout=max(float(self._options["deploy_timeout"]), SETTLE_TIMEOUT_S),
                interval=float(self._options["poll_interval"]),
                artifacts_dir=self._artifacts,
            )
        self._recorded = {}
        self._picked = []
        self._claim.release()  # only once the nodes are back: a failed down() leaves the run to a sweep
        self._claim = None

    # --------------------------------------------------------------- sweep
    @classmethod
    def sweep(cls, label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
        """Undeploy the nodes run ``label`` recorded that are still deployed (not those a live run recorded)."""
        by_cloud: dict[tuple[str, str | None], dict[str, str]] = {}
        for obj in objects:
            if obj.get("kind") == NODE_KIND and obj.get("node") and obj.get("cloud"):
                place = (str(obj["cloud"]), obj.get("clouds_yaml") or None)
                by_cloud.setdefault(place, {})[str(obj["node"])] = str(obj.get("name") or obj["node"])
        if not by_cloud:
            return
        live = taken_by_live_runs()
        for (cloud, clouds_yaml), nodes in by_cloud.items():
            if clouds_yaml and not Path(clouds_yaml).is_file():  # e.g. a test's Ironic, gone with its folder
                report.skip(f"run {label}: ironic nodes {', '.join(nodes.values())}: {clouds_yaml} is gone")
                continue
            try:
                conn = connect(cloud, clouds_yaml)
                mine = {}
                for node_id, name in nodes.items():
                    if node_id in live:
                        report.skip(f"run {label}: ironic node {name} is recorded by a live run")
                        continue
                    node = node_state(conn, node_id)
                    if node is not None and node.provision_state in TAKEN:
                        mine[node_id] = name
                if report.dry_run:
                    report.add("ironic nodes", *(f"{n} ({i}, cloud {cloud})" for i, n in mine.items()))
                    continue
                if mine:
                    undeploy(conn, cloud, clouds_yaml, mine, label=label, timeout=1800, interval=1.0)
                    report.add("ironic nodes", *(f"{n} ({i}, cloud {cloud})" for i, n in mine.items()))
            except Exception as exc:  # noqa: BLE001 - one cloud's failure is reported, the sweep goes on
                report.error(f"run {label}: ironic nodes in cloud {cloud}: {exc}")

    @classmethod
    def discover(cls) -> dict[str, list[dict[str, Any]]]:
        """What the run registry's claims (live and dead) say this provider deployed and is still deployed.

        Ironic nodes cannot carry a run label through the ``openstack.cloud`` modules, so a run that left
        no claim cannot be found here: only recorded nodes are reported.
        """
        found: dict[str, list[dict[str, Any]]] = {}
        conns: dict[tuple[str, str | None], Any] = {}
        for label, objects in recorded_nodes().items():
            for obj in objects:
                place = (str(obj.get("cloud") or ""), obj.get("clouds_yaml") or None)
                if place[1] and not Path(place[1]).is_file():
                    continue
                try:
                    if place not in conns:
                        conns[place] = connect(*place)
                    node = node_state(conns[place], str(obj.get("node")))
                except Exception:  # noqa: BLE001, S112 - a cloud that does not answer has nothing to find
                    continue
                if node is not None and node.provision_state in TAKEN:
                    found.setdefault(label, []).append(obj)
        return found
