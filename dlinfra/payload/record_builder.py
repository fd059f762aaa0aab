"""Turns what a run knows and measured into the one :class:`RunRecord` it writes."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlinfra.payload import identity
from dlinfra.payload.errors import PayloadError
from dlinfra.payload.measure import utc
from dlinfra.record import Metrics, Provenance, RunRecord, config_hash


@dataclass
class Context:
    """What the controller knows and the payload cannot: passed as ``--context-json``."""

    campaign_id: str = "adhoc"
    cell_config: dict[str, Any] | None = None
    cell_hash: str | None = None
    repeat: int = 0
    layer: str = "bm"
    provider: str = ""
    physical_host: str = field(default_factory=socket.gethostname)
    target_address: str | None = None
    emulated: bool = False
    devices: list[str] = field(default_factory=list)
    target_details: dict[str, Any] = field(default_factory=dict)
    #: The shipped data set this run reads, as the controller checked it (recorded as ``provenance.data``).
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str | None) -> Context:
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PayloadError(f"--context-json is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise PayloadError("--context-json must be a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise PayloadError(f"--context-json has unknown key(s): {', '.join(unknown)}")
        ctx = cls(**{k: v for k, v in data.items() if v is not None})
        if not isinstance(ctx.layer, str) or not isinstance(ctx.provider, str):
            raise PayloadError("--context-json layer and provider must be strings")
        if not isinstance(ctx.repeat, int) or ctx.repeat < 0:
            raise PayloadError("--context-json repeat must be an integer >= 0")
        if not isinstance(ctx.devices, list):
            raise PayloadError("--context-json devices must be a list")
        if not isinstance(ctx.target_details, dict):
            raise PayloadError("--context-json target_details must be an object")
        if not isinstance(ctx.data, dict):
            raise PayloadError("--context-json data must be an object")
        return ctx


def build(
    ctx: Context,
    run_config: dict[str, Any],
    role: str,
    task_index: int,
    workload: str,
    mode: str,
    started: float,
    metrics: Metrics,
    failure: str | None,
    devices: list[str] | None = None,
) -> RunRecord:
    cell_config = ctx.cell_config if ctx.cell_config is not None else run_config
    return RunRecord(
        provenance=Provenance(
            campaign_id=ctx.campaign_id,
            cell_config=cell_config,
            cell_hash=ctx.cell_hash or config_hash(cell_config),
            repeat=ctx.repeat,
            layer=ctx.layer,
            provider=ctx.provider,
            physical_host=ctx.physical_host,
            target_address=ctx.target_address or identity.target_address(),
            role=role,
            task_index=task_index,
            workload=workload,
            mode=mode,
            cpu_model=identity.cpu_model(),
            cpu_set=identity.cpu_set(),
            memory_bytes=identity.memory_bytes(),
            tf_version=identity.tf_version(),
            python_version=platform.python_version(),
            payload_hash=identity.payload_hash(),
            start_utc=utc(started),
            end_utc=utc(time.time()),
            status="failed" if failure else "ok",
            failure_reason=failure,
            hostname=socket.gethostname(),
            kernel=f"{platform.release()} {platform.version()}",
            emulated=bool(ctx.emulated),
            devices=sorted({*ctx.devices, *(devices or [])}),
            target_details=dict(ctx.target_details),
            data=dict(ctx.data),
        ),
        metrics=metrics,
    )


class RecordSink:
    """Writes exactly one record per process, whichever thread gets there first."""

    def __init__(self, out: str | None, stdout: Any, echo: bool = False) -> None:
        self.out = out
        self.stdout = stdout
        #: Also print the record written to ``out`` on stdout: a controller holding the process's channel then
        #: has it the moment it is written, without fetching the file after the process ended.
        self.echo = echo
        self._lock = threading.Lock()
        self.written = False

    def write(self, record: RunRecord) -> bool:
        """Write ``record`` unless one was already written; True if this call wrote it."""
        with self._lock:
            if self.written:
                return False
            text = record.to_json()
            if self.out:
                path = Path(self.out)
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
                with os.fdopen(fd, "w") as f:
                    f.write(text + "\n")
                os.replace(tmp, path)
            if self.echo or not self.out:
                self.stdout.write(text + "\n")
                self.stdout.flush()
            self.written = True
            sys.stderr.flush()
            return True
