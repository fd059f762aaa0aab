"""``dlinfra check``: hold a campaign to the expectations of its spec, for CI and scripts."""

from __future__ import annotations

import click

from dlinfra.cli.common import seed_option, statistic_option, store_from
from dlinfra.errors import DlinfraError
from dlinfra.text import printable

#: Exit status: every expectation holds / one fails / none fails but some could not be checked.
OK, FAILED, INSUFFICIENT = 0, 1, 3

EPILOG = """\b
Examples:
  dlinfra check                     # the latest campaign
  dlinfra check nightly --statistic trimmed
\b
Exit status: 0 when every expectation holds; 1 when one fails (its 95%
Welch t-interval is not inside the bound); 3 when none fails but some
could not be checked (insufficient data: fewer than 2 runs, no baseline,
no run matching); 2 for bad input. One line per failure on stdout, a
summary on stderr. See docs/compare.md.
"""


@click.command(epilog=EPILOG)
@click.argument("campaign", default="latest")
@seed_option
@statistic_option
@click.pass_context
def check(ctx: click.Context, campaign: str, seed: int, statistic: str) -> int:
    """Check CAMPAIGN (id, unique prefix, name, 'latest' or 'latest~N') against the
    'expect' entries of its spec: one line per expectation that fails or cannot be checked."""
    # deferred: pulls pandas and SciPy (a second); 'dlinfra --help' imports this module
    from dlinfra.report.expectations import FAIL, NO_DATA, PASS, evaluate

    with store_from(ctx) as store:
        campaign_id = store.resolve_campaign(campaign)
        expect = store.campaign_spec(campaign_id).get("expect")
        if not isinstance(expect, list) or not expect:
            raise DlinfraError(
                f"campaign {campaign_id} has no expectations to check",
                "add an 'expect' list to its spec (docs/compare.md)",
            )
        outcomes = evaluate(store, campaign_id, expect, seed=seed, statistic=statistic)
    for o in outcomes:
        if o.status != PASS:
            click.echo(printable(o.line()))  # stored names are data: inert on a terminal
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, NO_DATA)}
    click.echo(
        f"campaign {printable(campaign_id)}: {len(expect)} expectation(s), {len(outcomes)} check(s): "
        f"{counts[PASS]} pass, {counts[FAIL]} fail, {counts[NO_DATA]} insufficient data",
        err=True,
    )
    return FAILED if counts[FAIL] else INSUFFICIENT if counts[NO_DATA] else OK
