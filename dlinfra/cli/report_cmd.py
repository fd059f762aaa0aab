"""``dlinfra report``: placeholder until its issue lands."""

import click

from dlinfra.errors import DlinfraError


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def report(args: tuple[str, ...]) -> None:
    """(not built yet)"""
    raise DlinfraError("'dlinfra report' is not built yet")
