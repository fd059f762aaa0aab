"""Factories of valid result records for tests that need rows without running TensorFlow."""

from __future__ import annotations

from dlinfra.record import Metrics, Provenance, RunRecord, StepTimes, config_hash


def make_record(
    campaign: str = "c1",
    cell: dict | None = None,
    repeat: int = 0,
    role: str = "single",
    task_index: int = 0,
    throughput: float = 1000.0,
    status: str = "ok",
) -> RunRecord:
    cell = cell or {"workload": "mnist-dnn", "layer": "bm", "mode": "single", "batch_size": 64}
    return RunRecord(
        provenance=Provenance(
            campaign_id=campaign,
            cell_config=cell,
            cell_hash=config_hash(cell),
            repeat=repeat,
            layer=cell["layer"],
            physical_host="host1",
            target_address="10.0.0.1",
            role=role,
            task_index=task_index,
            workload=cell["workload"],
            mode=cell["mode"],
            cpu_model="Test CPU",
            cpu_set=[0, 1],
            memory_bytes=1 << 30,
            tf_version="2.21.0",
            python_version="3.11.7",
            payload_hash="abc123",
            start_utc="2026-11-22T00:00:00+00:00",
            end_utc="2026-11-22T00:00:10+00:00",
            status=status,
            failure_reason=None if status == "ok" else "worker:1 unreachable",
        ),
        metrics=Metrics(
            examples_per_sec=throughput,
            elapsed_s=10.0,
            warmup_steps=10,
            measured_steps=3,
            global_step=13,
            step_times=StepTimes.summarise([0.1, 0.11, 0.12]),
        ),
    )
