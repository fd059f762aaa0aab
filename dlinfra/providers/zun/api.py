"""Zun's container API, as the ``zun`` provider speaks it: openstacksdk's session against the catalog's
``container`` endpoint.

Why not Ansible's ``uri`` module: the ``openstack.cloud`` collection has no Zun module, and a ``uri`` task would
carry the cloud's token in its arguments, which ansible-runner's events keep. Why not a Zun client library:
openstacksdk has no Zun resources, but its session authenticates, retries and finds the endpoint; Zun's API is
small (create, show, delete, list).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlinfra.errors import TargetError
from dlinfra.runtime.wait import WaitTimedOut, wait_for

#: 1.39 takes ``host`` (the compute host to place the container on; admin), 1.40 ``entrypoint``.
API_VERSION = {"OpenStack-API-Version": "container 1.40"}
#: The label every container of a run carries (the same key as the docker and podman providers').
LABEL_KEY = "dlinfra.run"
#: Statuses a container rests in; ``Error`` carries Zun's ``status_reason``.
SETTLED = ("Running", "Stopped", "Error")


def settled(record: dict[str, Any] | None) -> bool:
    """Whether a container is gone (None) or rests in one of :data:`SETTLED`."""
    return record is None or record.get("status") in SETTLED


class ZunApi:
    """One cloud's Zun endpoint."""

    def __init__(self, conn: Any, cloud: str) -> None:
        self.conn = conn
        self.cloud = cloud
        try:
            self.endpoint = str(conn.endpoint_for("container")).rstrip("/")
        except Exception as exc:  # noqa: BLE001 - keystoneauth's catalog errors are many kinds
            raise TargetError(
                f"zun: cloud {cloud} has no container service in its catalog ({type(exc).__name__})",
                "check that Zun is deployed there (openstack catalog list shows a 'container' service)",
            ) from None

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.conn.session.request(
            f"{self.endpoint}{path}", method, headers=API_VERSION, raise_exc=False, **kwargs
        )

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create and start a container (``run=true``); Zun answers 202 and places it in the background."""
        reply = self._call("POST", "/containers?run=true", json=body)
        if reply.status_code != 202:
            raise TargetError(
                f"zun: creating container {body.get('name')} in cloud {self.cloud} failed: "
                f"HTTP {reply.status_code}: {_message(reply)}",
                "check the layer options (image, network, cpu, memory_mb) and the compute host names",
            )
        return dict(reply.json())

    def show(self, uuid: str) -> dict[str, Any] | None:
        """A container's record, or None once it is gone."""
        reply = self._call("GET", f"/containers/{uuid}")
        if reply.status_code == 404:
            return None
        if reply.status_code != 200:
            raise TargetError(f"zun: reading container {uuid} failed: HTTP {reply.status_code}: {_message(reply)}")
        return dict(reply.json())

    def of_run(self, label: str) -> list[dict[str, Any]]:
        """The containers that carry run ``label`` (of every project the credentials see)."""
        reply = self._call("GET", "/containers?all_projects=true")
        if reply.status_code == 403:  # not an admin: the project's own
            reply = self._call("GET", "/containers")
        if reply.status_code != 200:
            raise TargetError(f"zun: listing containers failed: HTTP {reply.status_code}: {_message(reply)}")
        return [c for c in reply.json().get("containers", []) if (c.get("labels") or {}).get(LABEL_KEY) == label]

    def delete(self, uuid: str) -> None:
        """Delete a container (``force``: a running one too); a container already gone is no error."""
        reply = self._call("DELETE", f"/containers/{uuid}?force=true")
        if reply.status_code not in (202, 204, 404):
            raise TargetError(f"zun: deleting container {uuid} failed: HTTP {reply.status_code}: {_message(reply)}")

    def wait(self, uuids: list[str], done: Callable[[dict[str, Any] | None], bool], what: str, timeout: float,
             interval: float) -> dict[str, dict[str, Any] | None]:  # fmt: skip
        """Poll the containers until ``done`` holds for every record (None: gone); the project's one wait."""
        records: dict[str, dict[str, Any] | None] = {}

        def all_done() -> bool:
            for uuid in uuids:
                if uuid not in records or not done(records[uuid]):
                    records[uuid] = self.show(uuid)
            return all(done(records[u]) for u in uuids)

        def states() -> str:
            return ", ".join(f"{u}: {(records.get(u) or {}).get('status', 'gone')}" for u in uuids)

        try:
            wait_for(f"zun: containers {what}", all_done, timeout=timeout, interval=interval)
        except WaitTimedOut as exc:
            raise TargetError(f"{exc.message} ({states()})",
                              "raise layer_options.ctr.start_timeout, or see zun-compute's log") from None  # fmt: skip
        return records


def _message(reply: Any) -> str:
    """Zun's error message from a reply (its JSON ``errors`` list), else the first characters of the body."""
    try:
        errors = reply.json().get("errors") or []
        if errors:
            return "; ".join(str(e.get("detail") or e.get("title")) for e in errors)[:500]
    except ValueError:
        pass
    return str(reply.text)[:300]
