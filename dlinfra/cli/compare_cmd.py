"""``dlinfra compare A B``: what changed between two campaigns, cell by cell, and in their metadata."""

from __future__ import annotations

from pathlib import Path

import click

from dlinfra.cli.common import emit_report, err_console, out_option, seed_option, shown, statistic_option, store_from

EPILOG = """\b
Examples:
  dlinfra compare latest~1 latest                 # the last campaign against the one before
  dlinfra compare before after --format markdown  # campaigns by name
  dlinfra compare c1 c2 --metric elapsed --statistic trimmed
  dlinfra compare c1 c2 --format json | jq '.views.compare'
\b
change_pct is (mean B - mean A) / mean A of the metric; the interval is a 95%
Welch t-interval over repeats; the verdict says whether B is faster, slower or no
different (the CI holds 0). Cells in one campaign only are listed. See docs/compare.md.
"""


@click.command(epilog=EPILOG)
@click.argument("a")
@click.argument("b")
@click.option(
    "--metric",
    type=click.Choice(["throughput", "elapsed", "time-to-accuracy"]),
    default="throughput",
    show_default=True,
    help="The metric compared (as in 'dlinfra report').",
)
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json", "html"]), default="table")
@out_option("Write to this file instead of stdout.")
@click.option(
    "--view",
    type=click.Choice(["compare", "metadata"]),
    default="compare",
    show_default=True,
    help="Which view --format csv writes (the other formats show both).",
)
@seed_option
@statistic_option
@click.option(
    "--threshold",
    type=float,
    default=0.0,
    show_default=True,
    metavar="PCT",
    help="A change whose whole CI lies within +-PCT percent is 'no difference' too (practical equivalence).",
)
@click.pass_context
def compare(
    ctx: click.Context,
    a: str,
    b: str,
    metric: str,
    fmt: str,
    out: Path | None,
    view: str,
    seed: int,
    statistic: str,
    threshold: float,
) -> None:
    """Compare campaign B against campaign A (ids, unique prefixes, names, 'latest' or
    'latest~N'): the change of the metric per matched cell with a 95% Welch t-interval
    and a verdict, cells that ran in one campaign only, and the metadata that differs."""
    with store_from(ctx) as store:
        from dlinfra.report.compare import build_compare  # after the store is checked: SciPy takes a second

        result = build_compare(store, a, b, metric, seed=seed, statistic=statistic, threshold_pct=threshold)
    if emit_report(result, fmt, out, view):
        err_console.print(
            f"wrote {fmt} comparison of {shown(result.against_id)} and {shown(result.campaign_id)} to {shown(out)}"
        )
