"""Ironic's nodes as a run sees them: their states, the waits for a state, the deploy and undeploy playbooks, and
what runs recorded of them. The provider's ``up``/``down`` and ``dlinfra sweep`` go through here.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from dlinfra.errors import TargetError
from dlinfra.providers.openstack_cloud import run_cloud_playbook
from dlinfra.runtime.runs_registry import live_runs, recorded_objects
from dlinfra.runtime.wait import WaitTimedOut, wait_for

#: The run registry's entry kind for one node a run deploys.
NODE_KIND = "ironic-node"
#: Provision states of a node a run has deployed (or is deploying): what down and sweep undo.
DEPLOYED = frozenset({"active", "deploy failed", "error"})
#: States a node passes through on its own; down and sweep wait for them to settle.
MOVING = frozenset({"deploying", "wait call-back", "deleting", "cleaning", "clean wait", "deploy wait", "adopting"})
#: What discover() reports: a node some run took and has not given back yet.
TAKEN = DEPLOYED | MOVING - {"cleaning", "clean wait"}
SETTLE_TIMEOUT_S = 300.0


def node_state(conn: Any, node_id: str) -> Any | None:
    """The node (by UUID or name) as Ironic has it now, or None when there is none."""
    from openstack.exceptions import NotFoundException

    try:
        return conn.baremetal.get_node(node_id)
    except NotFoundException:
        return None


def node_address(conn: Any, node_id: str) -> str | None:
    """The IPv4 address in the node's ``network_data`` (API 1.66): the static network an operator records for a
    node in Ironic, which Ironic writes into its config drive. None when it records none."""
    try:
        answer = conn.baremetal.get(f"/nodes/{node_id}?fields=network_data", microversion="1.66")
    except Exception as exc:  # noqa: BLE001 - keystoneauth's errors (connection refused, timeouts) name the cause
        raise TargetError(f"ironic node {node_id}: cannot read its network_data: {exc}") from None
    if answer.status_code != 200:
        raise TargetError(
            f"ironic node {node_id}: cannot read its network_data: HTTP {answer.status_code}",
            "network_data needs Ironic API 1.66 or later; else name an inventory host after the node",
        )
    data = answer.json().get("network_data") or {}
    for network in data.get("networks") or []:
        if str(network.get("type", "")).startswith("ipv4") and network.get("ip_address"):
            return str(network["ip_address"])
    return None


def last_error(conn: Any, node: Any) -> str:
    """The node's ``last_error``, else the newest ERROR event of its history (API 1.78). Why both: after a failed
    deploy step Ironic powers the node off, and a power action that succeeds clears ``last_error`` (seen with the
    ``ramdisk`` deploy of a Redfish node whose ISO could not be mounted), while the history keeps the cause."""
    if node.last_error:
        return str(node.last_error)

    def newest_error() -> str | None:
        try:
            answer = conn.baremetal.get(f"/nodes/{node.id}/history", microversion="1.78")
            events = answer.json().get("history") or [] if answer.status_code == 200 else []
        except Exception:  # noqa: BLE001 - an older Ironic (no history) or a lost connection: nothing to add
            return "no error given"
        errors = [str(e.get("event", "")) for e in events if e.get("severity") == "ERROR"]
        return errors[-1] if errors else None

    try:  # the event is written as the node fails: give it a few seconds
        return str(wait_for(f"ironic node {node.id}'s error", newest_error, timeout=5, interval=1, cancellable=False))
    except WaitTimedOut:
        return "no error given"


def run_node_playbook(
    book: str,
    cloud: str,
    nodes: list[dict[str, Any]],
    *,
    label: str,
    clouds_yaml: str | None = None,
    artifacts_dir: Path | None = None,
) -> None:
    """Run ``playbooks/providers/ironic/BOOK`` here on ``nodes``."""
    run_cloud_playbook(
        "ironic",
        book,
        cloud,
        {"ironic_nodes": nodes},
        label=label,
        clouds_yaml=clouds_yaml,
        artifacts_dir=artifacts_dir,
    )


def wait_for_state(conn: Any, nodes: dict[str, str], goal: str, timeout: float, interval: float, what: str) -> None:
    """Poll every node (id -> name) until it reaches ``goal``; one error naming the nodes that did not."""
    pending = dict(nodes)
    failed: list[str] = []
    states: dict[str, str] = {}

    def settled() -> bool:
        for node_id, name in list(pending.items()):
            node = node_state(conn, node_id)
            if node is None:
                failed.append(f"node {name} ({node_id}) is gone from Ironic")
                pending.pop(node_id)
                continue
            states[node_id] = str(node.provision_state)
            if node.provision_state == goal:
                pending.pop(node_id)
            elif node.provision_state in ("deploy failed", "clean failed", "error") or (
                node.provision_state not in MOVING and node.provision_state not in (goal, "deleted", "available")
            ):
                if (goal, node.provision_state) in (("available", "active"), ("active", "manageable")):
                    continue  # the undeploy (adopt) request is still on its way
                failed.append(f"node {name} ({node_id}) is {node.provision_state}: {last_error(conn, node)}")
                pending.pop(node_id)
        return not pending

    try:  # a bring-up the campaign stopped ends the wait (a teardown runs outside any cancellable scope)
        wait_for(f"ironic: {what}", settled, timeout=timeout, interval=interval)
    except WaitTimedOut:
        failed += [f"node {n} ({i}) still {states.get(i, '?')} after {timeout:g} s" for i, n in pending.items()]
    if failed:
        raise TargetError(f"ironic: {what}: " + "; ".join(failed), "see the node's last_error in Ironic")


def recorded_nodes() -> dict[str, list[dict[str, Any]]]:
    """Every run state file's ironic-node entries, by label."""
    return recorded_objects({NODE_KIND})


def taken_by_live_runs() -> set[str]:
    """Node ids recorded by runs whose controller is alive (this one included)."""
    return {str(o.get("node")) for info in live_runs() for o in info.of_kind(NODE_KIND)}


def undeploy(
    conn: Any,
    cloud: str,
    clouds_yaml: str | None,
    nodes: dict[str, str],
    *,
    label: str,
    timeout: float,
    interval: float,
    artifacts_dir: Path | None = None,
) -> None:
    """Undeploy those of ``nodes`` (id -> name) that are deployed, and wait until they are available again."""
    states: dict[str, Any] = {}

    def settled() -> bool:  # a node still deploying cannot be undeployed: let it settle first
        states.update((i, node_state(conn, i)) for i in nodes)
        return not any(n is not None and n.provision_state in MOVING for n in states.values())

    with contextlib.suppress(WaitTimedOut):  # still moving after the bound: undeploy what can be, then wait
        wait_for(f"ironic: nodes of run {label} settling", settled, timeout=SETTLE_TIMEOUT_S, interval=interval)
    todo = {i: nodes[i] for i, n in states.items() if n is not None and n.provision_state in DEPLOYED | MOVING}
    if not todo:
        return
    undeploy = [i for i in todo if states[i].provision_state in DEPLOYED]
    if undeploy:
        nodes_down = [{"id": i, "name": todo[i]} for i in undeploy]
        run_node_playbook(
            "down.yml", cloud, nodes_down, label=label, clouds_yaml=clouds_yaml, artifacts_dir=artifacts_dir
        )
    wait_for_state(conn, todo, "available", timeout, interval, "undeploy")
