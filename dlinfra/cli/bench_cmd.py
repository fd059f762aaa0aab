"""``dlinfra bench``: run the payload on this machine (layer bm) and store the result.

The payload runs as a subprocess exactly as it does on a target, so a bench
result and a campaign result come from the same code path and the same record.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.table import Table

from dlinfra.cli.common import console, store_from
from dlinfra.errors import DlinfraError
from dlinfra.inventory import parse_cpus
from dlinfra.orchestration.spec import FORMATS, INT_BOUNDS, NUMBER_BOUNDS
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.record import RecordError, RunRecord, config_hash
from dlinfra.results.store import CellOutcome
from dlinfra.safe_yaml import excerpt, plain

EPILOG = """\b
Examples:
  dlinfra bench mnist-dnn --steps 200
  dlinfra bench mnist-dnn --data mnist_5k.csv.gz --target-accuracy 0.9 --max-steps 3000
  dlinfra bench resnet50 --batch-size 8 --image-size 64 --cpus 0-3 --repeats 3
  dlinfra bench gemm --size 1760x128x1760 --steps 50
  dlinfra bench rnn --cell gru --size 512x16x25
  dlinfra bench sysbench-cpu --time 5
  dlinfra --db team.db bench logreg --data mnist/ --repeats 5
"""

#: option name -> payload flag, for the options passed through when given.
PASSTHROUGH = {
    "batch_size": "--batch-size", "warmup_steps": "--warmup-steps", "steps": "--steps", "data": "--data",
    "cpus": "--cpus", "target_accuracy": "--target-accuracy", "max_steps": "--max-steps",
    "eval_every": "--eval-every", "image_size": "--image-size", "num_classes": "--num-classes",
    "size": "--size", "cell": "--cell", "learning_rate": "--learning-rate", "threads": "--threads",
    "time_s": "--time", "seed": "--seed",
}  # fmt: skip


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click's FloatRange lets NaN through (it fails every comparison); a rate or accuracy of NaN is no number."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", ctx, param)
    return value


def _text(kind: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A string flag checked against the campaign spec's format for the same parameter (``size``, ``data``)."""
    pattern, what = FORMATS[kind]

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and (not pattern.fullmatch(value) or not value.isprintable()):
            raise click.BadParameter(f"must be {what}, got {excerpt(value)}", ctx, param)
        return value

    return check


def _cpus(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            parse_cpus(value)
        except ValueError as exc:
            raise click.BadParameter(f"must be a CPU list like 0-3,8 ({exc})", ctx, param) from None
    return value


def _ints(name: str, low: int | None = None) -> click.IntRange:
    lo, hi = INT_BOUNDS[name]
    return click.IntRange(lo if low is None else low, hi)


@click.command(epilog=EPILOG)
@click.argument("workload", metavar="WORKLOAD")
@click.option("--batch-size", type=_ints("batch_size"), help="Examples per step (default: per workload).")
@click.option("--steps", type=_ints("steps", 0), help="Measured steps (default 100).")
@click.option("--warmup-steps", type=_ints("warmup_steps"), help="Steps before timing starts (default 10).")
@click.option(
    "--data",
    callback=_text("data"),
    help="'synthetic' (default) or a data path: MNIST IDX folder/CSV, CIFAR-10 binary, images.",
)
@click.option("--cpus", callback=_cpus, help="Pin the payload to these CPUs, e.g. 0-3.")
@click.option(
    "--target-accuracy",
    type=click.FloatRange(0, 1, min_open=True),
    callback=_finite,
    help="Train to this accuracy.",
)
@click.option("--max-steps", type=_ints("steps"), help="With --target-accuracy: give up after this many.")
@click.option("--eval-every", type=_ints("steps", 0), help="Held-out accuracy every N steps.")
@click.option("--image-size", type=_ints("image_size"), help="Image side for alexnet/resnet50/inception3.")
@click.option("--num-classes", type=_ints("num_classes", 2), help="Classes of synthetic image data.")
@click.option("--size", callback=_text("size"), help="Kernel sizes: gemm MxNxK, conv WxHxCxNxKxRxS, rnn HxNxT.")
@click.option("--cell", type=click.Choice(["vanilla", "lstm", "gru"]), help="rnn cell.")
@click.option(
    "--learning-rate",
    type=click.FloatRange(*NUMBER_BOUNDS["learning_rate"], min_open=True),
    callback=_finite,
    help="Learning rate (default: per workload).",
)
@click.option("--threads", type=_ints("threads"), help="sysbench threads.")
@click.option("--time", "time_s", type=_ints("time"), help="sysbench seconds.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), help="Data shuffling / synthetic data seed.")
@click.option("--repeats", type=_ints("repeats"), default=1, show_default=True, help="Runs, one cell each.")
@click.option(
    "--timeout",
    type=click.IntRange(1, int(NUMBER_BOUNDS["cell_timeout"][1])),
    default=3600,
    show_default=True,
    help="Seconds per run.",
)
@click.pass_context
def bench(ctx: click.Context, workload: str, repeats: int, timeout: int, **options: object) -> None:
    """Run WORKLOAD once (or --repeats times) on this machine as layer bm and store the records.

    WORKLOAD is one of: mnist-dnn, logreg, cifar10-cnn, alexnet, resnet50, inception3,
    gemm, conv, rnn, sysbench-cpu, sysbench-memory, sysbench-threads, sysbench-fileio.
    """
    if workload not in WORKLOADS:
        raise DlinfraError(f"unknown workload {excerpt(workload)}", f"choose one of: {', '.join(WORKLOADS)}")
    if options.get("data") and options["data"] != "synthetic" and not os.path.exists(str(options["data"])):
        raise DlinfraError(f"--data {plain(options['data'], tail=True)}: no such file or folder")
    flags: list[str] = []
    for name, flag in PASSTHROUGH.items():
        if options.get(name) is not None:
            flags += [flag, str(options[name])]
    cell_config = {"workload": workload, "mode": "single", **{k: v for k, v in options.items() if v is not None}}
    cell_hash = config_hash(cell_config)
    now = datetime.now(UTC)
    campaign_id = f"bench-{now:%Y%m%dT%H%M%S}"
    host = socket.gethostname()
    records: list[RunRecord] = []
    with store_from(ctx) as store:
        store.add_campaign(
            campaign_id, f"bench {workload}", {"kind": "bench", "host": host, "cell": cell_config, "repeats": repeats}
        )
        for repeat in range(repeats):
            console.print(f"[bold]{workload}[/] repeat {repeat + 1}/{repeats} on {host} …")
            context = {
                "campaign_id": campaign_id,
                "cell_config": cell_config,
                "cell_hash": cell_hash,
                "repeat": repeat,
                "layer": "bm",
                "physical_host": host,
            }
            started = datetime.now(UTC).isoformat(timespec="seconds")
            record = _run_payload(workload, flags, context, timeout)
            p = record.provenance
            store.store_cell(
                CellOutcome(
                    campaign_id,
                    cell_hash,
                    repeat,
                    "bm",
                    workload,
                    cell_config,
                    p.status,
                    p.failure_reason,
                    started,
                    datetime.now(UTC).isoformat(timespec="seconds"),
                ),
                [record],
            )
            records.append(record)
    _summary(campaign_id, records)
    failed = [r for r in records if r.provenance.status != "ok"]
    if failed:
        raise DlinfraError(
            f"{len(failed)} of {len(records)} run(s) failed: {failed[0].provenance.failure_reason}",
            f"stored in campaign {campaign_id}",
        )


def _run_payload(workload: str, flags: list[str], context: dict[str, object], timeout: int) -> RunRecord:
    """One payload process; its stderr streams to the terminal, its record comes back through a file."""
    with tempfile.TemporaryDirectory(prefix="dlinfra-bench-") as tmp:
        out = Path(tmp) / "record.json"
        cmd = [
            sys.executable,
            "-m",
            "dlinfra.payload",
            "run",
            "--workload",
            workload,
            *flags,
            "--context-json",
            json.dumps(context),
            "--out",
            str(out),
        ]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=timeout, env=os.environ.copy(), check=False)
        except subprocess.TimeoutExpired:
            raise DlinfraError(f"the payload ran longer than --timeout {timeout}s and was stopped") from None
        if not out.is_file():
            raise DlinfraError(f"the payload wrote no record (exit {proc.returncode})", "see its messages above")
        try:
            return RunRecord.from_json(out.read_text())
        except RecordError as exc:
            raise DlinfraError(f"the payload wrote an invalid record: {exc}") from None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _summary(campaign_id: str, records: list[RunRecord]) -> None:
    table = Table(title=f"campaign {campaign_id} (layer bm)")
    for name in ("repeat", "status", "examples/s", "median step ms", "p95 step ms", "accuracy", "elapsed s"):
        table.add_column(name, justify="right" if name not in ("status",) else "left")
    for r in records:
        m, p = r.metrics, r.provenance
        median = m.step_times.median * 1000 if m.step_times.median is not None else None
        p95 = m.step_times.p95 * 1000 if m.step_times.p95 is not None else None
        status = "ok" if p.status == "ok" else f"[red]failed[/]: {p.failure_reason}"
        table.add_row(
            str(p.repeat),
            status,
            _fmt(m.examples_per_sec, ",.1f"),
            _fmt(median, ".3f"),
            _fmt(p95, ".3f"),
            _fmt(m.final_accuracy, ".4f"),
            _fmt(m.elapsed_s, ".1f"),
        )
    console.print(table)
    extra = records[-1].metrics.extra if records else {}
    if "gflops_per_sec" in extra:
        console.print(f"kernel: {extra['gflops_per_sec']:.2f} GFLOP/s, {extra['time_per_op_s'] * 1e3:.3f} ms per op")
    if "sysbench" in extra:
        console.print("sysbench: " + ", ".join(f"{k}={v:g}" for k, v in sorted(extra["sysbench"].items())))
    console.print(f"stored in campaign {campaign_id}: see 'dlinfra results show {campaign_id}'")
