"""Helpers shared by subcommands."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import click
from rich.console import Console
from rich.markup import escape

from dlinfra import secrets
from dlinfra.errors import DlinfraError
from dlinfra.results.store import ResultsStore, open_store
from dlinfra.text import plain, printable


def _width(stream: object) -> int | None:
    """Rich wraps to 80 columns when piped; tables of results read better wide in logs and files."""
    isatty = getattr(stream, "isatty", lambda: False)()
    return None if isatty else int(os.environ.get("COLUMNS", "160"))


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))


def shown(value: object) -> str:
    """Stored or given text as a Rich table cell or line shows it: secrets masked by value, markup escaped,
    terminal controls made visible (a campaign name is data, never a command to the terminal)."""
    return escape(printable(secrets.redact(str(value))))


def store_from(ctx: click.Context, *, write: bool = False) -> ResultsStore:
    """The results store named by the global --db option (or $DLINFRA_DB, or the default file).

    Only a command that stores results passes ``write``: the others open an existing store read-only."""
    root = ctx.find_root()
    return open_store(root.obj.db if root.obj else None, write=write)


#: ``--seed``: the seed of the drift test's random permutations (intervals are Welch t-intervals: no draws).
seed_option = click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the drift test's permutations (same seed, same output).",
)
#: ``--statistic``: the outlier policy of every command that summarises repeats.
statistic_option = click.option(
    "--statistic",
    type=click.Choice(["mean", "trimmed"]),
    default="mean",
    show_default=True,
    help="mean = every run; trimmed = drop each layer's fastest and slowest run (MLPerf style, >= 3 runs).",
)


def _checked_out(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``--out`` is checked before any work: a FIFO (which would block the write), a device or a folder is
    refused, as is a missing folder."""
    if value is None:
        return None
    where = plain(value, 200, tail=True)
    try:
        info = value.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise click.BadParameter(f"{where}: {exc.strerror or exc}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise click.BadParameter(f"{where} is not a regular file", param_hint="'--out'")
    if info is None and not value.absolute().parent.is_dir():
        raise click.BadParameter(f"{where}: its folder does not exist", param_hint="'--out'")
    return value


def out_option(help_text: str, *, required: bool = False) -> Any:
    """``--out FILE`` of report, compare and results export: one definition, checked before any work."""
    return click.option(
        "--out",
        type=click.Path(dir_okay=False, path_type=Path),
        required=required,
        callback=_checked_out,
        help=help_text,
    )


@contextmanager
def open_output(out: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """``out`` opened for writing without blocking (a FIFO put there since ``--out`` was checked fails, it does
    not hang) and checked to be a regular file before it is truncated."""
    where = plain(out, 200, tail=True)
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY, 0o644)
    except OSError as exc:
        raise DlinfraError(f"cannot write {where}: {exc.strerror or exc}", "choose another --out") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DlinfraError(f"--out {where} is not a regular file", "choose another --out")
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
        yield handle


def emit_report(result: Any, fmt: str, out: Path | None, view: str, **layout: bool) -> bool:
    """Render a report (or a comparison) as ``fmt`` to stdout, or to the file ``out``; True when written to it.
    ``layout``: the terminal table's ``wide`` and ``full_config``."""
    # deferred: pulls pandas and SciPy (a second); every subcommand and 'dlinfra --help' import this module
    from dlinfra.report.render import render

    width = console.width if console.is_terminal and out is None else None
    text = render(result, fmt, width=width, view=view, **layout)
    if out is None:
        text = printable(text)  # stored names reach a terminal as text, not as escape sequences
        click.echo(text, nl=not text.endswith("\n"))
        return False
    try:
        with open_output(out) as handle:
            handle.write(text)
    except OSError as exc:
        raise DlinfraError(f"cannot write {plain(out, 200, tail=True)}: {exc.strerror or exc}") from None
    return True
