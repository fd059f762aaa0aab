"""``dlinfra bench``: run the payload on this machine (layer bm) and store the result.

The payload runs as a subprocess exactly as it does on a target, so a bench
result and a campaign result come from the same code path and the same record.
"""

from __future__ import annotations

import json
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
from dlinfra.orchestration.spec import INT_BOUNDS, NUMBER_BOUNDS
from dlinfra.payload.cpuset import CpuSetError, parse_cpuset
from dlinfra.payload.params import PARAM, PARAMS, Param, to_argv
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.record import RecordError, RunRecord, config_hash
from dlinfra.results.store import CellOutcome
from dlinfra.text import excerpt, plain

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


def _checked(param: Param) -> Callable[[click.Context, click.Parameter, str | None], object]:
    """A table parameter's option: converted and bounded as the payload and a campaign spec do it."""

    def check(ctx: click.Context, option: click.Parameter, value: str | None) -> object:
        if value is None:
            return None
        try:
            return param.from_text(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, option) from None

    return check


def _cpus(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            parse_cpuset(value)
        except CpuSetError as exc:
            raise click.BadParameter(f"must be a CPU list like 0-3,8 ({exc})", ctx, param) from None
    return value


def _param_options(f: Callable[..., None]) -> Callable[..., None]:
    """One option per workload parameter of the table (unset: the payload's default, and not in the config)."""
    for param in reversed(PARAMS):
        f = click.option(
            param.flag,
            param.name,
            metavar=param.var,
            callback=_checked(param),
            help=f"{param.describe()} [{param.scope()}]",
        )(f)
    return f


@click.command(epilog=EPILOG)
@click.argument("workload", metavar="WORKLOAD")
@_param_options
@click.option("--cpus", metavar="CPUS", callback=_cpus, help="pin the payload to these CPUs, e.g. 0-3")
@click.option(
    "--repeats", type=click.IntRange(*INT_BOUNDS["repeats"]), default=1, show_default=True, help="Runs, one cell each."
)
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
    if "single" not in WORKLOADS[workload].run_modes:
        raise DlinfraError(
            f"{workload} runs in mode {' or '.join(WORKLOADS[workload].run_modes)} only: bench runs one process",
            "put it in a campaign (docs/campaigns.md)",
        )
    data = str(options.get("data") or "synthetic")
    if data != "synthetic" and not os.path.exists(data):
        raise DlinfraError(f"--data {plain(data, tail=True)}: no such file or folder")
    if data != "synthetic" and not (os.path.isdir(data) or os.path.isfile(data)):
        raise DlinfraError(f"--data {plain(data, tail=True)} is not a regular file or a folder", "name a data set")
    flags, cell_config = payload_args(workload, options)
    cell_hash = config_hash(cell_config)
    now = datetime.now(UTC)
    campaign_id = f"bench-{now:%Y%m%dT%H%M%S}"
    host = socket.gethostname()
    records: list[RunRecord] = []
    with store_from(ctx, write=True) as store:
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


def payload_args(workload: str, options: dict[str, object]) -> tuple[list[str], dict[str, object]]:
    """The payload flags and the cell config of a bench run: every option given goes to the payload, and into
    the config unless the table says it does not change what is measured (``--cpus`` is in it, as it always was).
    A parameter that ``workload`` does not read is an error rather than silently ignored."""
    kind = WORKLOADS[workload].kind
    for param in PARAMS:
        if options.get(param.name) is not None and not param.applies_to(workload, kind):
            raise DlinfraError(f"{param.flag} does not apply to {workload}", f"it applies to {param.scope()}")
    given = {k: v for k, v in options.items() if v is not None}
    flags = to_argv(given)
    if "cpus" in given:
        flags += ["--cpus", str(given["cpus"])]
    config = {"workload": workload, "mode": "single"}
    config.update({k: v for k, v in given.items() if k not in PARAM or PARAM[k].hashed})
    return flags, config


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
