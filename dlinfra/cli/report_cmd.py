"""``dlinfra report``: what each layer costs against the baseline, with confidence intervals and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dlinfra.cli.common import (
    emit_report,
    err_console,
    open_output,
    out_option,
    seed_option,
    statistic_option,
    store_from,
)
from dlinfra.errors import DlinfraError
from dlinfra.report import SEEDS

EPILOG = """\b
Examples:
  dlinfra report                                   # latest campaign, throughput vs bm, terminal table
  dlinfra report --campaign demo --metric elapsed  # a campaign by name, wall time instead
  dlinfra report --baseline ctr                    # overhead of ctr-vm against ctr
  dlinfra report --format html --out report.html   # one self-contained page with plots
  dlinfra report --format csv --out overhead.csv   # '#' lines carry the warnings
  dlinfra report --format csv --view scaling       # another view as CSV
  dlinfra report --format json | jq .warnings
  dlinfra report --format svg --out overhead.svg   # the overhead plot alone (png too)
  dlinfra report --wide --full-config              # every column and every config key
  dlinfra report --compare-seed 000                # beside seed 000's published figures
  dlinfra report --view series                     # add CPU, memory, network per node over time
  dlinfra report --format csv --view series        # ... one row per node and second
  dlinfra report --statistic trimmed               # drop each layer's fastest and slowest run
  dlinfra report --campaign latest~1               # the campaign before the latest
\b
Overhead > 0 means worse than the baseline (slower, or longer). The interval is
a 95% t-interval of the ratio of means over repeats; see docs/report.md.
"""

VIEWS = (
    "overhead",
    "expectations",
    "drift",
    "scaling",
    "ps",
    "shared",
    "sync_async",
    "run_times",
    "system",
    "series",
    "step_times",
    "seed",
)


@click.command(epilog=EPILOG)
@click.option(
    "--campaign", default="latest", show_default=True, help="Campaign id, unique prefix, name, 'latest' or 'latest~N'."
)
@click.option("--baseline", default="bm", show_default=True, help="Layer to compare the others against.")
@click.option(
    "--metric",
    type=click.Choice(["throughput", "elapsed", "time-to-accuracy"]),
    default="throughput",
    show_default=True,
    help="throughput = examples/s; elapsed = wall time launch to finish; time-to-accuracy = s to the target.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "csv", "json", "html", "svg", "png"]),
    default="table",
    show_default=True,
    help="svg and png: the overhead plot alone (each layer against the baseline, 95% CI); png needs --out.",
)
@out_option("Write to this file instead of stdout.")
@click.option(
    "--compare-seed",
    type=click.Choice(SEEDS),
    help="Put the seed study's published figures beside this campaign's, as ratios (001: its verdicts).",
)
@click.option(
    "--view",
    type=click.Choice(VIEWS),
    default="overhead",
    show_default=True,
    help="Which view --format csv writes (the other formats show every view); series (per node and second) "
    "is built only when named here.",
)
@click.option(
    "--full-config",
    is_flag=True,
    help="Every config key in the tables (by default: the keys that tell a workload's configs apart, the rest "
    "once above the table).",
)
@click.option("--wide", is_flag=True, help="Every column in the terminal tables (by default: what fits the width).")
@click.option(
    "--include-contaminated",
    is_flag=True,
    help="Keep the runs of contaminated attempts (other programs took more of their CPUs than the campaign's "
    "interference.max_foreign_share); by default they are left out and counted.",
)
@seed_option
@statistic_option
@click.pass_context
def report(
    ctx: click.Context,
    campaign: str,
    baseline: str,
    metric: str,
    fmt: str,
    out: Path | None,
    compare_seed: str | None,
    view: str,
    seed: int,
    statistic: str,
    include_contaminated: bool,
    full_config: bool,
    wide: bool,
) -> None:
    """Compare the layers of a campaign: median, IQR and CV per layer, overhead
    against the baseline with a 95% CI and a verdict, scaling,
    parameter-server and sync/async views, system use per role, and warnings."""
    if view == "seed" and not compare_seed:
        raise DlinfraError("--view seed needs --compare-seed", "e.g. --compare-seed 000 --view seed")
    with store_from(ctx) as store:
        from dlinfra.report.build import build_report  # after the store is checked: SciPy takes a second

        result = build_report(
            store,
            campaign,
            baseline,
            metric,
            seed=seed,
            compare_seed=compare_seed,
            statistic=statistic,
            series=view == "series",
            include_contaminated=include_contaminated,
        )
    if fmt in ("svg", "png"):
        _write_plot(result, fmt, out)
        return
    if not emit_report(result, fmt, out, view, wide=wide, full_config=full_config):
        return
    err_console.print(
        f"wrote {fmt} report of campaign {result.campaign_id} to {out} ({len(result.warnings)} warning(s))"
    )
    for w in result.warnings:
        err_console.print(f"  ! {w.line()}", markup=False, highlight=False)


def _write_plot(result: Any, fmt: str, out: Path | None) -> None:
    """The overhead plot alone, as SVG (text: stdout too) or PNG (into --out only: it is binary)."""
    from dlinfra.report.html import overhead_figure  # late: matplotlib

    if out is None and fmt == "png":
        raise DlinfraError("--format png writes a binary file", "add --out FILE.png")
    data = overhead_figure(result, fmt)
    if out is None:
        click.echo(data, nl=False)
        return
    with open_output(out, binary=fmt == "png") as handle:
        handle.write(data)
    err_console.print(f"wrote the overhead plot of campaign {result.campaign_id} to {out}", highlight=False)
