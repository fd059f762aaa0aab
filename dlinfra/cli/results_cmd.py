"""``dlinfra results``: look into and export the results store."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from dlinfra.cli.common import console, open_output, out_option, shown, store_from
from dlinfra.layers import layer_label
from dlinfra.results.store import CONTAMINATED

#: Columns of `results show`, one row per process per run.
_RUN_COLUMNS = (
    "workload", "layer", "provider", "mode", "role", "host", "repeat", "status", "examples/s", "elapsed s", "others %",
    "speed CV %",
)  # fmt: skip


def _speed_cv(run: dict[str, Any]) -> float | None:
    """The CPU's speed within the run: the CV of its chunks of identical steps (``metrics.steadiness``)."""
    steadiness = (run.get("record") or {}).get("metrics", {}).get("steadiness") or {}
    value = steadiness.get("cv_pct")
    return float(value) if isinstance(value, (int, float)) else None


def _noise_lines(runs: list[dict[str, Any]]) -> list[str]:
    """For each workload x layer whose runs' throughput varied by more than the report's CV limit: why, as far as
    the records say (the CPU's own speed, others, steal)."""
    # Imported here, not at the top: the report's statistics load SciPy, which only this summary needs.
    from dlinfra.report.stats import CV_LIMIT_PCT, explain_cv

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        if r["status"] == "ok" and not r.get("contaminated") and r["examples_per_sec"] is not None:
            groups.setdefault((r["workload"], r["layer"]), []).append(r)
    lines = []
    for (workload, layer), group in sorted(groups.items()):
        rates = [float(r["examples_per_sec"]) for r in group]
        if len(rates) < 2 or not statistics.fmean(rates):
            continue
        cv = statistics.stdev(rates) / statistics.fmean(rates) * 100
        speeds = [s for s in map(_speed_cv, group) if s is not None]
        if cv <= CV_LIMIT_PCT or not speeds:
            continue
        others = max((100 * (r.get("foreign_share") or 0.0) for r in group), default=0.0)
        steal = max((100 * (r.get("steal_share") or 0.0) for r in group), default=0.0)
        why = explain_cv(statistics.median(speeds), others, steal)
        lines.append(f"{workload} {layer}: throughput CV {cv:.1f}% over {len(rates)} runs: {why}")
    return lines


@click.group(
    epilog="""\b
Examples:
  dlinfra results list
  dlinfra results show latest
  dlinfra results export --campaign latest --format parquet --out runs.parquet
  dlinfra --db postgresql://bench@db.example/dlinfra results list
"""
)
def results() -> None:
    """List, show and export stored results."""


@results.command("list", epilog="\b\nExamples:\n  dlinfra results list\n  dlinfra --db other.db results list")
@click.pass_context
def list_campaigns(ctx: click.Context) -> None:
    """List campaigns, newest first, with their cell and run counts."""
    with store_from(ctx) as store:
        rows = store.campaigns()
    if not rows:
        console.print("The results store holds no campaigns yet: run 'dlinfra bench' or 'dlinfra run'.")
        return
    table = Table("campaign", "name", "created (UTC)", "cells", "failed", "contaminated", "runs")
    for r in rows:
        table.add_row(
            shown(r["campaign_id"]), shown(r["name"]), shown(r["created_utc"]),
            *(str(r[k]) for k in ("cells", "failed", "contaminated", "runs")),
        )  # fmt: skip
    console.print(table)


@results.command(
    "show",
    epilog="\b\nExamples:\n  dlinfra results show latest\n  dlinfra results show demo-20261122 --json",
)
@click.argument("campaign", default="latest")
@click.option("--json", "as_json", is_flag=True, help="Print the full run records as JSON lines.")
@click.pass_context
def show(ctx: click.Context, campaign: str, as_json: bool) -> None:
    """Show the runs of CAMPAIGN (an id, a unique prefix, a name, or 'latest') and every failed attempt."""
    with store_from(ctx) as store:
        campaign_id = store.resolve_campaign(campaign)
        runs = store.runs(campaign_id)
        attempts = store.cells(campaign_id, all_attempts=True)
    if as_json:
        for run in runs:
            click.echo(json.dumps(run["record"], sort_keys=True))
        return
    table = Table(title=f"campaign {shown(campaign_id)}")
    for name in _RUN_COLUMNS:
        table.add_column(name)
    for r in runs:
        config = ((r.get("record") or {}).get("provenance") or {}).get("cell_config") or {}
        status = shown(r["status"]) if r["status"] == "ok" else f"[red]{shown(r['failure_reason'] or '')}[/red]"
        if r.get("contaminated"):
            status = "[yellow]contaminated[/yellow]"
        table.add_row(
            shown(r["workload"] or "-"),
            shown(layer_label(r["layer"] or "-", config)),
            *(shown(r[k] or "-") for k in ("provider", "mode")),
            shown(f"{r['role']}:{r['task_index']}"), shown(r["physical_host"]), str(r["repeat"]), status,
            f"{r['examples_per_sec']:.1f}" if r["examples_per_sec"] is not None else "-",
            f"{r['elapsed_s']:.2f}" if r["elapsed_s"] is not None else "-",
            f"{100 * r['foreign_share']:.1f}" if r.get("foreign_share") is not None else "-",
            f"{speed:.1f}" if (speed := _speed_cv(r)) is not None else "-",
        )  # fmt: skip
    console.print(table)
    console.print(
        "others %: the largest share of a run's CPUs that other programs (and, in a guest, the host) took while it "
        "measured; a run over the campaign's interference.max_foreign_share is contaminated. speed CV %: how much "
        "the time of identical chunks of steps varied within the run (the CPU's own speed; about 1 when steady)",
        style="dim",
    )
    for line in _noise_lines(runs):
        console.print(escape(line), style="yellow")
    final = {(a["cell_hash"], a["repeat"]): a for a in attempts}  # ordered by attempt: the last one wins
    for a in attempts:
        if a["status"] == "ok":
            continue
        latest = final[(a["cell_hash"], a["repeat"])]
        later = f" (attempt {latest['attempt']}: {latest['status']})" if latest is not a else ""
        what, colour = ("contaminated", "yellow") if a["status"] == CONTAMINATED else ("failed", "red")
        console.print(
            f"[{colour}]{shown(a['layer'])}/{shown(a['workload'])} cell {shown(a['cell_hash'][:12])} "
            f"repeat {a['repeat']} attempt {a['attempt']} {what}:[/{colour}] {shown(a['failure_reason'] or '')}{later}"
        )


@results.command(
    "export",
    epilog="\b\nExamples:\n  dlinfra results export --format csv --out runs.csv\n"
    "  dlinfra results export --campaign latest --format parquet --out runs.parquet",
)
@click.option("--campaign", default=None, help="Campaign id, prefix, name or 'latest' (default: all).")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@out_option("File to write.", required=True)
@click.pass_context
def export(ctx: click.Context, campaign: str | None, fmt: str, out: Path) -> None:
    """Export run rows (one per process per run) to CSV or Parquet."""
    from dlinfra.results.export import export_runs  # deferred: pulls pandas; 'dlinfra --help' imports this module

    with store_from(ctx) as store:
        campaign_id = store.resolve_campaign(campaign) if campaign else None
        with open_output(out, binary=True) as handle:
            count = export_runs(store, campaign_id, fmt, handle)
    console.print(f"wrote {count} runs to {shown(out)}")
