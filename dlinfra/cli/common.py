"""Helpers shared by subcommands."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from dlinfra.errors import DlinfraError
from dlinfra.results.store import ResultsStore, open_store


def _width(stream: object) -> int | None:
    """Rich wraps to 80 columns when piped; tables of results read better wide in logs and files."""
    isatty = getattr(stream, "isatty", lambda: False)()
    return None if isatty else int(os.environ.get("COLUMNS", "160"))


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))


def store_from(ctx: click.Context) -> ResultsStore:
    """The results store named by the global --db option (or its default)."""
    root = ctx.find_root()
    return open_store(root.obj.db if root.obj else None)


#: ``--seed``: the bootstrap's RNG seed, for every command that draws intervals.
seed_option = click.option(
    "--seed", type=int, default=0, show_default=True, help="Bootstrap RNG seed (same seed, same output)."
)
#: ``--statistic``: the outlier policy of every command that summarises repeats.
statistic_option = click.option(
    "--statistic",
    type=click.Choice(["mean", "trimmed"]),
    default="mean",
    show_default=True,
    help="mean = every run; trimmed = drop each layer's fastest and slowest run (MLPerf style, >= 3 runs).",
)


def emit_report(result: Any, fmt: str, out: Path | None, view: str) -> bool:
    """Render a report (or a comparison) as ``fmt`` to stdout, or to the file ``out``; True when written to it."""
    from dlinfra.report.render import render

    width = console.width if console.is_terminal and out is None else None
    text = render(result, fmt, width=width, view=view)
    if out is None:
        click.echo(text, nl=not text.endswith("\n"))
        return False
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise DlinfraError(f"cannot write {out}: {exc.strerror or exc}", "choose another --out") from None
    return True
