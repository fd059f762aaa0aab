"""``dlinfra cache``: what dlinfra's build cache holds on the disk, and pruning it (a full disk names it)."""

from __future__ import annotations

import time

import click
from rich.table import Table

from dlinfra.cache import cache_root, cache_usage, prune_cache
from dlinfra.cli.common import console, shown


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f}"


def _ago(when: float | None) -> str:
    if when is None:
        return "-"
    hours = (time.time() - when) / 3600
    if hours < 1:
        return f"{hours * 60:.0f} min ago"
    return f"{hours:.0f} h ago" if hours < 48 else f"{hours / 24:.0f} d ago"


@click.command(
    epilog="""\b
Examples:
  dlinfra cache                           # each kind: entries, GB on the disk, last use
  dlinfra cache --prune --dry-run         # what pruning would remove
  dlinfra cache --prune                   # remove the builds not used for a day
  dlinfra cache --prune --unused-for 0    # every build not in use (not used in the last 10 minutes)
"""
)
@click.option("--prune", is_flag=True, help="Remove the builds not used for --unused-for hours.")
@click.option(
    "--unused-for",
    "hours",
    type=click.FloatRange(0, 24 * 3650),
    default=24,
    show_default=True,
    metavar="HOURS",
    help="With --prune: remove builds last used longer ago than this (never one used in the last 10 minutes).",
)
@click.option("--dry-run", is_flag=True, help="With --prune: list what would be removed; remove nothing.")
def cache(prune: bool, hours: float, dry_run: bool) -> int:
    """List the cache ($DLINFRA_CACHE, else ~/.cache/dlinfra), or prune its builds.

    Every entry is a build keyed by its inputs (guest images, saved payload images, root filesystems,
    wheelhouses...), made again when next needed; a use marks it. An entry used in the last 10 minutes is
    kept: another run may be reading it. The venvs are not pruned here (checkouts run from them).
    """
    if dry_run and not prune:
        raise click.UsageError("--dry-run goes with --prune")
    if prune:
        removed = prune_cache(hours * 3600, dry_run=dry_run)
        verb = "would remove" if dry_run else "removed"
        console.print(f"{verb} {len(removed)} entr{'y' if len(removed) == 1 else 'ies'}")
        for path in removed:
            console.print(f"  {shown(str(path.relative_to(cache_root())))}")
    usage = cache_usage()
    if not usage:
        console.print(f"the cache is empty ({shown(str(cache_root()))})")
        return 0
    table = Table("kind", "entries", "GB", "last used", "pruned", title=f"cache: {shown(str(cache_root()))}")
    for kind in usage:
        table.add_row(kind.kind, str(kind.entries), _gb(kind.size_bytes), _ago(kind.last_used),
                      "yes" if kind.prunable else "no")  # fmt: skip
    table.add_row("total", "", _gb(sum(k.size_bytes for k in usage)), "", "")
    console.print(table)
    return 0
