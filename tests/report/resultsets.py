"""Result sets with a known truth, written through the real results store.

Each generator draws run values from a known distribution (seeded), builds real
:class:`RunRecord` objects and stores them cell by cell with ``store_cell``,
exactly as the controller does, so the report reads what a campaign would leave.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from dlinfra.layers import LAYERS
from dlinfra.record import Metrics, Provenance, RunRecord, StepTimes, SystemSample, config_hash
from dlinfra.results.store import CellOutcome, ResultsStore

_counter = itertools.count()


def draws(mean: float, cv_pct: float, n: int, seed: int) -> list[float]:
    """n values with the given mean and coefficient of variation (normal, seeded)."""
    rng = np.random.default_rng(seed)
    return list(rng.normal(mean, mean * cv_pct / 100, n))


def _record(
    campaign_id: str,
    cell_config: dict[str, Any],
    repeat: int,
    role: str,
    task_index: int,
    *,
    throughput: float | None,
    elapsed: float | None,
    tta: float | None,
    payload_hash: str,
    emulated: bool,
    status: str,
    cpu_model: str,
    step_mean: float,
    python_version: str,
) -> RunRecord:
    layer = cell_config["layer"]
    rng = np.random.default_rng(next(_counter))
    steps = list(rng.normal(step_mean, step_mean * 0.03, 40).clip(min=step_mean / 10))
    system = [
        SystemSample(
            elapsed_s=float(t),
            cpu_percent=float(50 + 10 * t),
            rss_bytes=int(200e6 + 1e6 * t),
            net_rx_bytes=int(t * 2e6),
            net_tx_bytes=int(t * 1e6),
            disk_read_bytes=0,
            disk_write_bytes=0,
        )
        for t in range(6)
    ]
    return RunRecord(
        provenance=Provenance(
            campaign_id=campaign_id,
            cell_config=cell_config,
            cell_hash=config_hash(cell_config),
            repeat=repeat,
            layer=layer,
            physical_host="host1",
            target_address=f"10.0.0.{task_index + 1}" if layer == "bm" else f"192.168.1.{task_index + 1}",
            role=role,
            task_index=task_index,
            workload=cell_config["workload"],
            mode=cell_config.get("mode", "single"),
            cpu_model=cpu_model,
            cpu_set=[0, 1],
            memory_bytes=8 << 30,
            tf_version="2.21.0",
            python_version=python_version,
            payload_hash=payload_hash,
            start_utc=f"2026-11-22T00:{repeat:02d}:00+00:00",
            end_utc=f"2026-11-22T00:{repeat:02d}:30+00:00",
            status=status,
            failure_reason=None if status == "ok" else "worker 1 unreachable",
            emulated=emulated,
        ),
        metrics=Metrics(
            examples_per_sec=throughput,
            elapsed_s=elapsed,
            warmup_steps=10,
            measured_steps=40,
            global_step=50,
            batch_size=cell_config.get("batch_size", 64),
            step_times=StepTimes.summarise(steps),
            final_accuracy=0.9,
            time_to_accuracy_s=tta,
            system=system,
        ),
    )


class Campaign:
    """One campaign in a store: each ``add(layer, values, ...)`` stores one cell, one repeat per value."""

    def __init__(self, store: ResultsStore, campaign_id: str, name: str | None = None) -> None:
        self.store, self.id = store, campaign_id
        store.add_campaign(campaign_id, name or campaign_id, {"generated": True})

    def add(
        self,
        layer: str,
        values: list[float],
        *,
        workload: str = "mnist-dnn",
        metric: str = "throughput",
        mode: str = "single",
        workers: int = 1,
        ps: int = 0,
        extra: dict[str, Any] | None = None,
        payload_hash: str = "sha256:payload-a",
        emulated: bool = False,
        failed: int = 0,
        cpu_model: str = "Intel Xeon Test",
        python_version: str = "3.12.3",
        tta: list[float] | None = None,
    ) -> None:
        # As a campaign writes it: every cell names its layer's provider (each layer's default here).
        config: dict[str, Any] = {
            "workload": workload,
            "layer": layer,
            "provider": LAYERS[layer].default_provider,
            "mode": mode,
            "batch_size": 64,
            **(extra or {}),
        }
        if mode != "single":
            config.update(workers=workers, ps=ps)
        roles = [("single", 0)] if mode == "single" else [("chief", 0)] + [("worker", i) for i in range(workers)]
        roles += [("ps", i) for i in range(ps)]
        cell = config_hash(config)
        for repeat, value in enumerate([*values, *([None] * failed)]):
            status = "ok" if value is not None else "failed"
            records = []
            for role, index in roles:
                reports = role in ("single", "chief")
                thr = el = None
                if value is not None and metric == "throughput":
                    thr, el = (value if reports else None), 6400 / value
                elif value is not None:
                    thr, el = 6400 / value if reports else None, value
                records.append(
                    _record(
                        self.id,
                        config,
                        repeat,
                        role,
                        index,
                        throughput=thr,
                        elapsed=el,
                        tta=(tta[repeat] if tta and value is not None and reports else None),
                        payload_hash=payload_hash,
                        emulated=emulated,
                        status=status,
                        cpu_model=cpu_model,
                        step_mean=(64 / value if metric == "throughput" and value else 0.01),
                        python_version=python_version,
                    )
                )
            self.store.store_cell(
                CellOutcome(
                    campaign_id=self.id,
                    cell_hash=cell,
                    repeat=repeat,
                    layer=layer,
                    workload=workload,
                    config=config,
                    status=status,
                    failure_reason=None if status == "ok" else "worker 1 unreachable",
                ),
                records,
            )


def ten_percent_slower(store: ResultsStore, campaign_id: str = "c-slow", n: int = 10) -> None:
    """bm at 1000 examples/s, vm 10% slower (900), ctr the same as bm (A/A), CV 2%."""
    c = Campaign(store, campaign_id, "ten-percent")
    c.add("bm", draws(1000, 2, n, seed=1))
    c.add("vm", draws(900, 2, n, seed=2))
    c.add("ctr", draws(1000, 2, n, seed=3))


def demo_like(store: ResultsStore, campaign_id: str = "c-demo") -> None:
    """A campaign shaped like ``make demo``'s, wider: bm, ctr, vm and ctr-vm; mnist-dnn in single and ps-async
    mode with several parameters; sysbench-cpu with two parameters; the guests emulated (their rows refused)."""
    c = Campaign(store, campaign_id, "demo")
    single = {"steps": 3000, "data": "synthetic", "optimizer": "sgd"}
    for i, (layer, rate) in enumerate((("bm", 1000.0), ("ctr", 975.0))):
        c.add(layer, draws(rate, 3, 6, seed=i), extra=single)
        c.add(layer, draws(rate * 1.6, 3, 4, seed=i + 10), extra={**single, "batch_size": 128})
    for layer in ("vm", "ctr-vm"):
        c.add(layer, draws(310, 4, 3, seed=20), extra=single, emulated=True)
    for placement in ("pack", "spread"):
        extra = {"steps": 3000, "data": "synthetic", "placement": placement}
        c.add("bm", draws(400, 4, 3, seed=30), mode="ps-async", workers=2, ps=1, extra=extra)
        c.add("ctr", draws(385, 4, 3, seed=31), mode="ps-async", workers=2, ps=1, extra=extra, failed=1)
    for threads in (1, 2):
        for i, layer in enumerate(("bm", "ctr", "vm", "ctr-vm")):
            emulated = layer in ("vm", "ctr-vm")
            rate = (120.0 if emulated else 2500.0) * threads
            extra = {"time": 2, "threads": threads, "data": "synthetic"}
            c.add(layer, draws(rate, 5, 4, seed=40 + i), workload="sysbench-cpu", extra=extra, emulated=emulated)
