"""The cluster layout of a distributed run: from ``TF_CONFIG`` or from flags.

The layout is resolved before TensorFlow is imported; flags are turned into a
standard ``TF_CONFIG`` so TensorFlow's own resolvers see the same cluster.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from dlinfra.payload.errors import PayloadError

TASK_TYPES = ("chief", "worker", "ps")


@dataclass(frozen=True)
class Cluster:
    """Who is in the cluster and which task this process is."""

    jobs: dict[str, list[str]]
    task_type: str
    task_index: int

    @property
    def address(self) -> str:
        return self.jobs[self.task_type][self.task_index]

    @property
    def controller_task(self) -> tuple[str, int]:
        """The task that runs the training loop's coordination and the control channel."""
        return ("chief", 0) if self.jobs.get("chief") else ("worker", 0)

    @property
    def is_controller(self) -> bool:
        return (self.task_type, self.task_index) == self.controller_task

    def tasks(self) -> list[tuple[str, int, str]]:
        """Every task as (type, index, address)."""
        return [(t, i, a) for t in TASK_TYPES for i, a in enumerate(self.jobs.get(t, []))]

    def peers(self) -> list[tuple[str, int, str]]:
        """Every task except the controller."""
        return [t for t in self.tasks() if (t[0], t[1]) != self.controller_task]

    def tf_config(self) -> dict[str, Any]:
        return {"cluster": self.jobs, "task": {"type": self.task_type, "index": self.task_index}}

    def control_address(self, port: int | None) -> tuple[str, int]:
        """Host and port of the control channel: the controller's port + 1 unless given."""
        kind, index = self.controller_task
        host, _, base = self.jobs[kind][index].rpartition(":")
        return host.strip("[]"), port if port else int(base) + 1


def _split_address(value: str, flag: str) -> str:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PayloadError(f"{flag}: {value!r} is not HOST:PORT")
    return f"{host}:{port}"


def _addresses(value: str | None, flag: str) -> list[str]:
    if not value:
        return []
    return [_split_address(v, flag) for v in value.split(",") if v.strip()]


def resolve(
    mode: str,
    chief: str | None = None,
    workers: str | None = None,
    ps: str | None = None,
    role: str | None = None,
    task_index: int | None = None,
    environ: dict[str, str] | None = None,
) -> Cluster | None:
    """The cluster for ``mode`` from flags (which win) or ``TF_CONFIG``; None for a single process."""
    env = os.environ if environ is None else environ
    flags_given = any(v is not None for v in (chief, workers, ps, role))
    if mode == "single":
        if flags_given:
            raise PayloadError("--chief/--workers/--ps/--role make no sense with --mode single")
        return None
    if flags_given:
        jobs = {
            "chief": _addresses(chief, "--chief"),
            "worker": _addresses(workers, "--workers"),
            "ps": _addresses(ps, "--ps"),
        }
        if role is None:
            raise PayloadError("--role is required with --chief/--workers/--ps (chief, worker or ps)")
        task_type, index, origin = role, task_index or 0, "--role/--task-index"
    else:
        raw = env.get("TF_CONFIG")
        if not raw:
            raise PayloadError(f"--mode {mode} needs a cluster: set TF_CONFIG or give --chief/--workers/--ps --role")
        try:
            config = json.loads(raw)
            jobs = {k: [_split_address(a, f"TF_CONFIG cluster.{k}") for a in v] for k, v in config["cluster"].items()}
            task_type, index = config["task"]["type"], int(config["task"]["index"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PayloadError(f"TF_CONFIG is not a valid cluster description: {exc}") from None
        origin = "TF_CONFIG task"
    jobs = {k: v for k, v in jobs.items() if v}
    unknown = sorted(set(jobs) - set(TASK_TYPES))
    if unknown:
        raise PayloadError(f"cluster has unsupported job(s) {', '.join(unknown)}: use chief, worker, ps")
    if task_type not in TASK_TYPES:
        raise PayloadError(f"{origin}: role {task_type!r} is not one of {', '.join(TASK_TYPES)}")
    if not 0 <= index < len(jobs.get(task_type, [])):
        raise PayloadError(f"{origin}: {task_type}:{index} is not in the cluster")
    if len(jobs.get("chief", [])) > 1:
        raise PayloadError("a cluster has at most one chief")
    if mode == "ps-async" and not (jobs.get("chief") and jobs.get("worker") and jobs.get("ps")):
        raise PayloadError("--mode ps-async needs a chief, at least one worker and at least one ps")
    if mode == "sync":
        if jobs.get("ps"):
            raise PayloadError("--mode sync (MultiWorkerMirroredStrategy) takes no ps tasks")
        if not jobs.get("worker"):
            raise PayloadError("--mode sync needs at least one worker")
    return Cluster(jobs=jobs, task_type=task_type, task_index=index)
