"""A nova run's objects in its cloud: the playbooks that create and delete them, what of a run is still there, and
what the run registry recorded of it. The provider's ``down`` and ``dlinfra sweep`` remove a run through here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlinfra.errors import TargetError
from dlinfra.providers.libvirt.seed import make_client_key
from dlinfra.providers.openstack_cloud import run_cloud_playbook
from dlinfra.runtime.runs_registry import recorded_objects, runs_dir
from dlinfra.runtime.wait import WaitTimedOut, wait_for

#: The run registry's entry kinds: the run's Nova objects (one entry), and one image it uploads.
RUN_KIND = "nova-run"
IMAGE_KIND = "nova-image"
#: Server metadata key carrying the run label (flavor and keypair carry it in their names).
LABEL_KEY = "dlinfra_run"
#: How long a delete may take until Nova no longer lists the run's servers.
SETTLE_TIMEOUT_S = 300.0
#: How many times a server that a delete left in ERROR is asked to delete again.
DELETE_RETRIES = 2


def run_nova_playbook(book: str, cloud: str, extravars: dict[str, Any], *, label: str,
                      clouds_yaml: str | None = None, artifacts_dir: Path | None = None) -> None:  # fmt: skip
    """Run ``playbooks/providers/nova/BOOK`` here."""
    run_cloud_playbook(
        "nova", book, cloud, extravars, label=label, clouds_yaml=clouds_yaml, artifacts_dir=artifacts_dir
    )


def run_servers(conn: Any, prefix: str, label: str) -> list[Any]:
    """The servers of run ``label``: named PREFIX<n> and carrying the label in their metadata."""
    pattern = f"^{re.escape(prefix)}[0-9]+$"
    return [s for s in conn.compute.servers(details=True, name=pattern) if (s.metadata or {}).get(LABEL_KEY) == label]


def run_dir(label: str) -> Path:
    """The run's private folder beside its state file: the SSH key pair and the guests' known_hosts."""
    return runs_dir() / f"{label}.nova"


def run_key(label: str) -> Path:
    return make_client_key(run_dir(label))


def leftovers(conn: Any, label: str, prefix: str, flavor: str, images: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What of a run is still in the cloud, by kind (names)."""
    left: dict[str, list[str]] = {"server": [s.name for s in run_servers(conn, prefix, label)]}
    left["flavor"] = [flavor] if conn.compute.find_flavor(flavor, ignore_missing=True) is not None else []
    left["keypair"] = [flavor] if conn.compute.find_keypair(flavor, ignore_missing=True) is not None else []
    left["image"] = [i["name"] for i in images if find_image(conn, i) is not None]
    return left


def find_image(conn: Any, image: Mapping[str, Any]) -> Any | None:
    """A recorded upload, by ID when known, else by its name among the images with its hash tag."""
    if image.get("id"):
        return conn.image.find_image(str(image["id"]), ignore_missing=True)
    if not image.get("tag"):
        return None
    return next((i for i in conn.image.images(tag=str(image["tag"])) if i.name == image["name"]), None)


def remove_run(
    conn: Any,
    cloud: str,
    clouds_yaml: str | None,
    label: str,
    prefix: str,
    flavor: str,
    images: list[dict[str, Any]],
    *,
    artifacts_dir: Path | None = None,
    interval: float = 1.0,
) -> None:
    """Delete run ``label``'s servers, flavor, keypair and ``images`` (down.yml), then wait until Nova lists
    none of its servers."""
    servers = [{"id": s.id, "name": s.name} for s in run_servers(conn, prefix, label)]
    found = [{"id": str(i.id), "name": str(i.name)} for i in (find_image(conn, img) for img in images) if i]
    left = leftovers(conn, label, prefix, flavor, [])
    if servers or found or left["flavor"] or left["keypair"]:
        extravars = {"nova_servers": servers, "nova_flavor": flavor if left["flavor"] else "",
                     "nova_keypair": flavor if left["keypair"] else "", "nova_images": found}  # fmt: skip
        run_nova_playbook("down.yml", cloud, extravars, label=label, clouds_yaml=clouds_yaml,
                          artifacts_dir=artifacts_dir)  # fmt: skip
    retries = DELETE_RETRIES
    remaining: list[Any] = []
    stuck: list[str] = []  # why waiting longer is pointless: a delete that failed again

    def gone() -> bool:
        nonlocal retries
        remaining[:] = run_servers(conn, prefix, label)
        failed = [s for s in remaining if s.status == "ERROR" and not s.task_state]
        if failed and not retries:
            stuck[:] = ["deleted in ERROR, and again"]
        elif failed:  # a delete that failed in the compute service leaves the server in ERROR: ask again
            retries -= 1
            again = {"nova_servers": [{"id": s.id, "name": s.name} for s in failed], "nova_flavor": "",
                     "nova_keypair": "", "nova_images": []}  # fmt: skip
            run_nova_playbook("down.yml", cloud, again, label=label, clouds_yaml=clouds_yaml,
                              artifacts_dir=artifacts_dir)  # fmt: skip
        return not remaining

    try:  # a teardown: not cancelled by a stopping campaign
        wait_for(f"nova: servers of run {label} gone", gone, timeout=SETTLE_TIMEOUT_S, interval=interval,
                 cancellable=False, give_up=lambda: stuck[0] if stuck else None)  # fmt: skip
    except WaitTimedOut:
        names = "; ".join(f"{s.name} {s.status}: {(s.fault or {}).get('message', '')}" for s in remaining)
        raise TargetError(
            f"nova: servers of run {label} still listed after delete: {names}",
            f"dlinfra sweep --run {label} tries again; see openstack server show",
        ) from None


def recorded_runs() -> dict[str, list[dict[str, Any]]]:
    """Every run state file's nova entries, by label, for the runs that recorded a nova run."""
    recorded = recorded_objects({RUN_KIND, IMAGE_KIND})
    return {label: objs for label, objs in recorded.items() if any(o.get("kind") == RUN_KIND for o in objs)}
