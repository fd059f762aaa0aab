"""``dlinfra run``: run (or resume) a campaign spec and store every cell as it ends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table

from dlinfra.cli.common import console, err_console, shown, store_from
from dlinfra.errors import DlinfraError
from dlinfra.orchestration.plan import RunInput, preflight

if TYPE_CHECKING:
    from dlinfra.orchestration.campaign import CampaignResult, CellSummary
    from dlinfra.orchestration.cells import Cell
    from dlinfra.runtime import interrupt


@click.command(
    epilog="""\b
Examples:
  dlinfra run campaigns/demo.yml
  dlinfra run campaigns/demo.yml --inventory inventory/cluster.yml
  dlinfra run campaigns/demo.yml --layer bm --layer ctr   # leave the guests out this time
  dlinfra run campaigns/demo.yml --resume                 # the latest campaign of that name
  dlinfra run campaigns/demo.yml --resume --campaign-id demo-20261122T040000Z
  dlinfra run campaigns/demo.yml --set steps=10000 --set repeats=10 --dry-run   # the cells, nothing run
  dlinfra --db postgresql://bench@db.example/dlinfra run campaigns/seed000.yml --artifacts /var/tmp/art
"""
)
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--resume", is_flag=True, help="Skip cells already stored as ok for this campaign (same config hash).")
@click.option("--campaign-id", default=None, help="Campaign id (default: NAME-UTCSTAMP; with --resume: the latest).")
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for Ansible run artifacts (secrets scrubbed). Default: artifacts/CAMPAIGN_ID.",
)
@click.option("--inventory", default=None, help="Ansible inventory (path or testbed:NAME); overrides the spec's.")
@click.option(
    "--layer",
    "layers",
    multiple=True,
    help="Run only this layer of the spec (repeatable); cells are the same, so --resume can add the rest later.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec field (dotted path, YAML value), checked like the file: steps=10000, "
    "layer_options.vm.vcpus=4, workloads.0.matrix.batch_size=[32,64]. Repeatable; stored with the campaign.",
)
@click.option(
    "--dry-run", is_flag=True, help="Check everything and list the cells it would run; touch nothing, run no code."
)
@click.option(
    "--allow-inventory-code",
    is_flag=True,
    help="Let Ansible run an inventory script or inventory plugin (they run code: refused without this flag, "
    "and never run by --dry-run).",
)
@click.option("--skip-deploy", is_flag=True, help="Do not run the deploy playbook; still check every payload hash.")
@click.option("--quiet", is_flag=True, help="No progress output; the summary only.")
@click.pass_context
def run(
    ctx: click.Context,
    spec: Path,
    resume: bool,
    campaign_id: str | None,
    artifacts: Path | None,
    inventory: str | None,
    layers: tuple[str, ...],
    overrides: tuple[str, ...],
    dry_run: bool,
    allow_inventory_code: bool,
    skip_deploy: bool,
    quiet: bool,
) -> int:
    """Run the campaign SPEC: provision, deploy, run every cell x repeat, store each as it ends."""
    # Bad input fails here, before the store is opened (created) or anything is built or provisioned.
    checked = preflight(
        spec,
        layers=list(layers),
        inventory=inventory,
        campaign_id=campaign_id,
        overrides=list(overrides),
        allow_inventory_code=allow_inventory_code,
        dry_run=dry_run,
    )
    # deferred: the run engine pulls ansible-runner; 'dlinfra --help' imports this module
    from dlinfra.orchestration.campaign import planned_cells, run_campaign

    cells = planned_cells(checked)  # a workload's hosts that match no host fail here, before the store is made
    if dry_run:
        return _dry_run(checked, cells)

    from dlinfra.runtime import interrupt  # deferred with the run engine, as above

    result: CampaignResult | None = None
    with interrupt.installed() as policy:  # SIGINT, SIGTERM, SIGHUP: seen in every phase from here on
        try:
            with store_from(ctx, write=True) as store:
                result = run_campaign(
                    checked,
                    store,
                    campaign_id=campaign_id,
                    resume=resume,
                    artifacts=artifacts,
                    skip_deploy=skip_deploy,
                    console=err_console,
                    quiet=quiet,
                )
        except (KeyboardInterrupt, DlinfraError) as exc:
            if policy.signum is None:
                raise
            if not isinstance(exc, KeyboardInterrupt):  # what the stop made fail (a cancelled playbook)
                err_console.print(f"  stopped: {shown(str(exc))}", highlight=False)
    if result is not None:
        _print_outcome(result, spec)
    if policy.signum is not None:
        _print_interrupted(policy, spec)
        return policy.exit_code
    if result is not None and result.interrupted:
        return 130
    return 1 if result is None or result.failed else 0


def _print_interrupted(policy: interrupt.Policy, spec: Path) -> None:
    """The last line of an interrupted run: what stopped it, and the command that goes on from there."""
    from dlinfra.runtime.runs_registry import current_campaign  # deferred: only an interrupted run needs it

    cid = current_campaign()
    again = f"dlinfra run {spec} --resume" + (f" --campaign-id {cid}" if cid else "")
    console.print(
        f"interrupted by {policy.signal_name} during {shown(policy.during)}: the cells that ended are stored, "
        f"what the campaign made is taken down; go on with '{shown(again)}'",
        highlight=False,
        soft_wrap=True,  # one line, whatever the width: the command in it is copied whole
    )


def _print_outcome(result: CampaignResult, spec: Path) -> None:
    """The cells that ran, one row each, then one line per layer failure and the campaign's summary lines."""
    table = Table(
        "cell", "repeat", "status", "wall s", "payload s", "overhead s", "others %",
        title=f"campaign {result.campaign_id}",
    )  # fmt: skip
    for s in result.ran:
        table.add_row(*_cell_row(s))
    if result.ran:
        console.print(table)
    for failure in result.layer_failures:
        console.print(f"[red]{shown(str(failure))}[/red]")
    ok = len(result.ran) - len(result.failed)
    retry = f"; retry the failed cells with 'dlinfra run {spec} --resume'" if result.failed else ""
    console.print(
        f"campaign {result.campaign_id}: {ok} ok, {len(result.failed)} failed, "
        f"{result.skipped} skipped (already stored)"
        + (" — interrupted; stored cells are kept, rerun with --resume" if result.interrupted else retry)
    )
    if result.stopping:
        console.print(f"repeats: {shown(result.stopping)}")
    contaminated = [s for s in result.ran if s.run.status == "ok" and s.verdict is not None and s.verdict.contaminated]
    if contaminated or result.contaminated_attempts:
        console.print(
            f"interference: {len(contaminated)} cell run(s) contaminated at the end, "
            f"{result.contaminated_attempts} contaminated attempt(s) run again; the report leaves contaminated runs "
            "out ('dlinfra results show' says who ran on their CPUs)"
        )
    if result.efficiency is not None:
        builds = f"; first-time builds ({result.build_s:.0f} s) left out" if result.build_s >= 0.5 else ""
        console.print(
            f"campaign efficiency {result.efficiency:.2f}: the payloads measured {result.payload_s:.0f} s "
            f"of {result.wall_s - result.build_s:.0f} s wall time{builds}"
        )


def _cell_row(s: CellSummary) -> tuple[str, ...]:
    """One stored cell run as the table shows it: status, wall and payload time, overhead, others' CPU share."""
    elapsed = s.run.payload_elapsed_s
    share = s.verdict.foreign_share if s.verdict is not None else None
    status = "ok" if s.run.status == "ok" else f"[red]failed[/red]: {shown(s.run.failure_reason or '')}"
    if s.run.status == "ok" and s.verdict is not None and s.verdict.contaminated:
        status = "[yellow]contaminated[/yellow]"
    return (
        s.cell.label(),
        str(s.repeat),
        status,
        f"{s.run.wall_s:.2f}",
        f"{elapsed:.2f}" if elapsed is not None else "-",
        f"{s.overhead_s:.2f}" if s.overhead_s is not None else "-",
        f"{100 * share:.1f}" if share is not None else "-",
    )


#: Cell config keys the dry-run table shows in their own columns (the rest go in "config").
_OWN_COLUMNS = ("layer", "provider", "workload", "host", "hosts")


def _dry_run(checked: RunInput, cells: list[Cell]) -> int:
    """Print the cells a run would run (layer, provider, hosts, config) and how many runs that is."""
    spec = checked.spec
    table = Table("#", "layer", "provider", "workload", "hosts", "config", title=f"{spec.name}: cells (dry run)")
    for i, cell in enumerate(cells, 1):
        c = cell.config
        hosts = c.get("host") or ", ".join(c.get("hosts", []))
        config = " ".join(f"{k}={v}" for k, v in sorted(c.items()) if k not in _OWN_COLUMNS)
        table.add_row(str(i), cell.layer, cell.provider, cell.workload, shown(str(hosts)), shown(config))
    console.print(table)
    repeats = f"{spec.repeats} repeat(s) = {len(cells) * spec.repeats}"
    if spec.adaptive is not None:
        repeats = f"up to {spec.repeats} repeat(s) ({shown(str(spec.adaptive))}) = up to {len(cells) * spec.repeats}"
    console.print(
        f"{len(cells)} cell(s) x {repeats} run(s) on inventory "
        f"{shown(str(checked.inventory_path))}; dry run: nothing was built, provisioned or stored"
    )
    return 0
