"""``dlinfra sweep``: remove what crashed dlinfra runs left behind (never a live run's objects)."""

from __future__ import annotations

import click
from rich.table import Table

from dlinfra.cli.common import console, shown


@click.command(
    epilog="""\b
Examples:
  sudo dlinfra sweep                      # every dead run's containers, daemons, guests, folders...
  sudo dlinfra sweep --dry-run            # list them, remove nothing
  sudo dlinfra sweep --run 3f9a1c2e       # one run (a ctr run_id, or a vm label like r1a2b3c4d)
  sudo dlinfra sweep --campaign demo-20261124T101500Z   # what a crashed 'dlinfra run' of it left
  sudo dlinfra sweep --testbed            # and every local testbed, as 'dlinfra testbed down'
  sudo dlinfra sweep --testbed ci         # and the testbed named ci (even one whose state folder is lost)
"""
)
@click.option("--run", "run_label", metavar="LABEL", default=None, help="Only this run (its ctr run_id or vm label).")
@click.option("--campaign", metavar="ID", default=None, help="Only the dead runs of this campaign's 'dlinfra run'.")
@click.option(
    "--all",
    "all_runs",
    is_flag=True,
    help="Every dead run (the default): recorded ones, and labelled objects of runs that left no record.",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option(
    "--testbed",
    "testbed",
    is_flag=False,
    flag_value="*",
    default=None,
    metavar="[NAME]",
    help="Also take down every local testbed (or testbed NAME), with what runs on it, as 'testbed down'.",
)
def sweep(run_label: str | None, campaign: str | None, all_runs: bool, dry_run: bool, testbed: str | None) -> int:
    """Find and remove every object of dlinfra runs whose controller is gone.

    A run claims its label before it creates anything and holds that claim while it lives, so
    a run killed with SIGKILL is told from a live one; the live one is never touched. Exit 0
    when everything found was removed, 1 when something could not be (listed on stderr).
    """
    # deferred: pulls ansible-runner; 'dlinfra --help' imports this module
    from dlinfra.orchestration.sweep import sweep as do_sweep

    if sum(bool(x) for x in (run_label, campaign, all_runs)) > 1:
        raise click.UsageError("give one of --run LABEL, --campaign ID or --all")
    include: bool | str = False if testbed is None else (True if testbed == "*" else testbed)
    report = do_sweep(run_label, campaign=campaign, include_testbed=include, dry_run=dry_run)
    for message in report.skipped:
        console.print(f"kept: {shown(message)}")
    if report.empty:
        console.print("nothing to sweep")
    else:
        verb = "would remove" if dry_run else "removed"
        table = Table("kind", "count", verb, title=f"sweep: {report.summary()}")
        for kind, items in report.by_kind():
            table.add_row(kind, str(len(items)), shown("\n".join(items)))
        console.print(table)
    for message in report.errors:
        click.echo(f"dlinfra: sweep: {message}", err=True)
    return 1 if report.errors else 0
