"""``dlinfra results``: look into and export the results store."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from dlinfra.cli.common import console, open_output, out_option, shown, store_from
from dlinfra.results.store import CONTAMINATED

#: Columns of `results show`, one row per process per run.
_RUN_COLUMNS = (
    "workload", "layer", "provider", "mode", "role", "host", "repeat", "status", "examples/s", "elapsed s", "others %",
)  # fmt: skip


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
        status = shown(r["status"]) if r["status"] == "ok" else f"[red]{shown(r['failure_reason'] or '')}[/red]"
        if r.get("contaminated"):
            status = "[yellow]contaminated[/yellow]"
        table.add_row(
            *(shown(r[k] or "-") for k in ("workload", "layer", "provider", "mode")),
            shown(f"{r['role']}:{r['task_index']}"), shown(r["physical_host"]), str(r["repeat"]), status,
            f"{r['examples_per_sec']:.1f}" if r["examples_per_sec"] is not None else "-",
            f"{r['elapsed_s']:.2f}" if r["elapsed_s"] is not None else "-",
            f"{100 * r['foreign_share']:.1f}" if r.get("foreign_share") is not None else "-",
        )  # fmt: skip
    console.print(table)
    console.print(
        "others %: the largest share of a run's CPUs that other programs (and, in a guest, the host) took while it "
        "measured; a run over the campaign's interference.max_foreign_share is contaminated",
        style="dim",
    )
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
