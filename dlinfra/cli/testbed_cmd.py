"""``dlinfra testbed``: placeholder until its issue lands."""

import click

from dlinfra.errors import DlinfraError


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def testbed(args: tuple[str, ...]) -> None:
    """(not built yet)"""
    raise DlinfraError("'dlinfra testbed' is not built yet")
