"""Helpers shared by subcommands."""

from __future__ import annotations

import click
from rich.console import Console

from dlinfra.results.store import ResultsStore, open_store

console = Console()
err_console = Console(stderr=True)


def store_from(ctx: click.Context) -> ResultsStore:
    """The results store named by the global --db option (or its default)."""
    return open_store(ctx.find_root().obj.db if ctx.find_root().obj else None)
