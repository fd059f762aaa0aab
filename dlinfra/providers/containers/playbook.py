"""Container provisioning is Ansible: the up/down playbooks of the ``payload_container`` role, run for one run.

``playbooks/providers/containers/up.yml`` loads the payload image where it is missing (role
``payload_image``) and creates the run's bridge network and containers (role ``payload_container``,
``community.docker`` / ``containers.podman``); ``down.yml`` removes what carries the run's label. This
module writes the inventory those playbooks take (per host: how Ansible reaches it, its engine, the
image to load, the containers, computed here), runs them through
:func:`dlinfra.runtime.ansible.run_playbook` and reads each container's inspect record back
from the ``dlinfra_report`` the play sets.

Where modules run: an engine of this machine (a local-testbed host's dockerd socket, podman joining
its namespace, or this machine's own engine) is driven from the controller (connection ``local``, the
controller's interpreter); any other host over SSH with its own interpreter (``community.docker``
needs ``requests`` there).
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dlinfra.errors import DlinfraError
from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.run import _CLAIMS, RESULTS_IN_CONTAINER, ContainerSpec, engine_where, role_network
from dlinfra.runtime.ansible import PlaybookResult, new_ident, run_playbook
from dlinfra.runtime.runs_registry import claim

UP = "providers/containers/up.yml"
DOWN = "providers/containers/down.yml"
GROUP = "dlinfra_ctr_hosts"
#: The up play's tasks (role payload_image) that load the payload image into a host's engine.
IMAGE_LOAD_TASKS = ("Load the image from where it is on the host", "Copy the saved image", "Load it into the engine")


@dataclass
class PlayHost:
    """One host of a run's container playbooks: how Ansible reaches it, its engine and what goes there."""

    name: str
    engine: Engine
    #: Ansible connection variables for a host over SSH (``SshEndpoint.ansible_vars()`` and its interpreter);
    #: empty for an engine of this machine (connection local).
    ansible: dict[str, Any] = field(default_factory=dict)
    containers: list[ContainerSpec] = field(default_factory=list)
    #: Host folder of the run's results (containers with ``runs_mount`` get ``RUNS_ROOT/NAME``); "" for none.
    runs_root: str = ""
    #: Host folder of the shipped data sets (containers with ``data_mount`` see it read-only); "" for none.
    data_root: str = ""
    #: The saved payload image to load where its tag is missing: (controller path of the tarball, reference).
    image: tuple[str, str] | None = None
    #: With down: image references to remove (the ones this run loaded).
    remove_images: list[str] = field(default_factory=list)

    def host_vars(self, run_id: str) -> dict[str, Any]:
        """This host's inventory variables for the up/down playbooks."""
        engine = self.engine
        hv: dict[str, Any] = (
            dict(self.ansible)
            if engine.via
            else {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
            }
        )
        hv.update(
            {
                "payload_container_run_id": run_id,
                "payload_container_engine": engine.kind,
                "payload_container_docker_host": f"unix://{engine.socket}" if engine.socket else "",
                "payload_container_podman_runtime": engine.runtime,
                "payload_container_podman_ulimits": list(engine.ulimits),
                "payload_container_netns": engine.netns if engine.kind == "podman" and engine.netns else "",
                "payload_container_runs_root": self.runs_root,
                "payload_container_data_root": self.data_root,
                "payload_container_containers": [role_container(engine, spec) for spec in self.containers],
                "payload_container_remove_images": list(self.remove_images),
            }
        )
        if self.image is not None:
            tarball, ref = self.image
            hv.update(
                {
                    "payload_image_tarball": tarball,
                    "payload_image_ref": ref,
                    "payload_image_tarball_on_host": not engine.via,
                    "payload_image_engine": engine.kind,
                    "payload_image_socket": engine.socket or "",
                    "payload_image_podman_runtime": engine.runtime,
                }
            )
        return hv


def role_container(engine: Engine, spec: ContainerSpec) -> dict[str, Any]:
    """One entry of ``payload_container_containers``: the container as the role takes it (checked here first)."""
    if not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$", spec.name):
        raise DlinfraError(f"container name {spec.name!r} is not valid", "letters, digits, '.', '_', '-'")
    spec.resources.validate(f"host {engine.host}")
    if spec.ports and spec.network.kind != "bridge":
        raise DlinfraError(f"container {spec.name}: ports are published only in bridge mode (got {spec.network})")
    volumes = [f"{spec.results_dir}:{RESULTS_IN_CONTAINER}:rw"] if spec.results_dir else []
    volumes += [f"{host_dir}:{inside}:rw" for host_dir, inside in spec.volumes]
    item: dict[str, Any] = {
        "name": spec.name,
        "image": spec.image,
        "network": role_network(engine, spec.network),
        "labels": {str(k): str(v) for k, v in spec.labels.items()},
        "read_only": spec.read_only,
        "volumes": volumes,
        "ports": [int(p) for p in spec.ports],
        "env": {str(k): str(v) for k, v in spec.env.items()},
        "command": list(spec.command),
    }
    res = spec.resources
    optional = {
        "user": spec.user,
        "runs_mount": spec.runs_mount,
        "data_mount": spec.data_mount,
        "cpuset": res.cpuset,
        "cpus": float(res.cpus) if res.cpus is not None else None,
        "memory_bytes": int(res.memory_bytes) if res.memory_bytes is not None else None,
        "gpus": res.gpus,
        # runc is left out: the engine's default, so a plain container's item (and its play) is as before
        "runtime": spec.runtime if spec.runtime != "runc" else None,
        "runtime_flags": list(spec.runtime_flags) or None,
    }
    item.update({key: value for key, value in optional.items() if value is not None})
    return item


def inventory(hosts: list[PlayHost], run_id: str) -> dict[str, Any]:
    """The inventory of a run's container playbooks: every host with its variables."""
    return {"all": {"children": {GROUP: {"hosts": {h.name: h.host_vars(run_id) for h in hosts}}}}}


def play(
    book: str,
    hosts: list[PlayHost],
    run_id: str,
    *,
    artifacts_dir: Path | None = None,
    quiet: bool = True,
    build_tasks: tuple[str, ...] = (),
) -> PlaybookResult:
    """Run ``book`` (:data:`UP` or :data:`DOWN`) for these hosts through the wrapper; raise on any failure."""
    with tempfile.TemporaryDirectory(prefix="dlinfra-ctr-") as tmp:
        where = Path(artifacts_dir) if artifacts_dir else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        inv = where / f"ctr-{run_id}-{Path(book).stem}-inventory.yml"
        inv.write_text(yaml.safe_dump(inventory(hosts, run_id), sort_keys=False))
        result = run_playbook(
            book,
            inventory=inv,
            artifacts_dir=artifacts_dir,
            ident=new_ident("ctr", Path(book).stem, run_id),
            quiet=quiet,
            build_tasks=build_tasks,
        )
    result.raise_for_failure()
    return result


def run_up(
    hosts: list[PlayHost],
    run_id: str,
    *,
    artifacts_dir: Path | None = None,
    quiet: bool = True,
    images_kept: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run up.yml for these hosts; per host its report: ``containers`` (name -> inspect record), ``runs_root``.

    ``images_kept``: the hosts keep the image after the run, so loading it is a first-time build (a campaign's
    efficiency leaves it out); an image removed at down is loaded again by every run, and counts."""
    build_tasks = IMAGE_LOAD_TASKS if images_kept else ()
    result = play(UP, hosts, run_id, artifacts_dir=artifacts_dir, quiet=quiet, build_tasks=build_tasks)
    reports = {}
    for host in hosts:
        report = result.reports.get(host.name) or {}
        missing = [c.name for c in host.containers if c.name not in (report.get("containers") or {})]
        if missing:
            raise DlinfraError(f"{UP}: host {host.name} reported no record of {', '.join(missing)}", "a bug")
        reports[host.name] = report
    return reports


def run_down(
    hosts: list[PlayHost], run_id: str, *, artifacts_dir: Path | None = None, quiet: bool = True
) -> PlaybookResult:
    """Run down.yml for these hosts: what carries the run's label, their ``remove_images`` and ``runs_root``."""
    return play(DOWN, hosts, run_id, artifacts_dir=artifacts_dir, quiet=quiet)


def run_container(engine: Engine, spec: ContainerSpec, *, artifacts_dir: Path | None = None) -> dict:
    """Start one container on an engine of this machine (the up playbook) and return its inspect record.

    The run's label is claimed first (``dlinfra sweep`` never touches a live run's containers);
    :func:`remove_run` lets go of it.
    """
    if spec.run_id not in _CLAIMS:
        _CLAIMS[spec.run_id] = claim(spec.run_id, "engine", key=engine.label, **engine_where(engine))
    else:
        _CLAIMS[spec.run_id].add("engine", key=engine.label, **engine_where(engine))
    host = PlayHost(engine.host, engine, containers=[spec])
    return run_up([host], spec.run_id, artifacts_dir=artifacts_dir)[host.name]["containers"][spec.name]
