"""``dlinfra testbed``: a local testbed of SSH hosts in network namespaces (needs root)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import click
from rich.table import Table

from dlinfra.cli.common import console, shown
from dlinfra.testbed.local import LocalTestbed
from dlinfra.text import excerpt

#: The most hosts one testbed may have: each is a network namespace with its own sshd on this machine.
MAX_HOSTS = 60


def _pattern(regex: str, what: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A click callback refusing values that do not fully match ``regex``, naming the flag and quoting the value."""
    compiled = re.compile(regex, re.ASCII)

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and not compiled.fullmatch(value):
            raise click.BadParameter(f"must be {what}, got {excerpt(value)}", ctx, param)
        return value

    return check


NAME_OPTION = click.option(
    "--name",
    default="dlinfra",
    show_default=True,
    callback=_pattern(r"[A-Za-z0-9-]{1,24}", "1-24 letters, digits or '-'"),
    help="Testbed name: several testbeds can coexist.",
)


@click.group(
    epilog="""\b
Examples:
  sudo dlinfra testbed up --local --hosts 3
  sudo dlinfra testbed up --local --hosts 2 --name ci --subnet 10.213.90.0/24
  dlinfra testbed status
  sudo dlinfra testbed down
"""
)
def testbed() -> None:
    """Create, inspect and remove a local testbed: N SSH hosts in network namespaces on this machine."""


@testbed.command(
    "up",
    epilog="""\b
Examples:
  sudo dlinfra testbed up --local --hosts 3
  sudo dlinfra testbed up --local --hosts 8 --name bench --inventory-out inventory/bench.yml
""",
)
@click.option("--local", "local", is_flag=True, required=True, help="Build the hosts on this machine (the only kind).")
@click.option("--hosts", type=click.IntRange(1, MAX_HOSTS), default=3, show_default=True, help="How many hosts.")
@NAME_OPTION
@click.option(
    "--subnet",
    default=None,
    callback=_pattern(r"[0-9.]{7,15}(/[0-9]{1,2})?", "an IPv4 network like 10.213.90.0/24"),
    help="IPv4 /24 for the hosts (default: the first free one from 10.213.47.0).",
)
@click.option(
    "--inventory-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the inventory here (it is always written to the testbed's state folder).",
)
def up(local: bool, hosts: int, name: str, subnet: str | None, inventory_out: Path | None) -> None:
    """Create HOSTS SSH hosts (idempotent: a second call restarts what is missing)."""
    started = time.monotonic()
    st = LocalTestbed(name).up(hosts, subnet=subnet, inventory_out=inventory_out)
    console.print(
        f"testbed [bold]{st.name}[/bold] up: {len(st.hosts)} hosts on {st.bridge} ({st.subnet}) "
        f"in {time.monotonic() - started:.1f} s"
    )
    console.print(f"inventory: {st.inventory}")
    if inventory_out:
        console.print(f"inventory copy: {inventory_out}")


@testbed.command("status", epilog="\b\nExamples:\n  dlinfra testbed status\n  dlinfra testbed status --json")
@NAME_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(name: str, as_json: bool) -> None:
    """Show the testbed's hosts: namespace, sshd, SSH answering. Exit 1 when not fully up."""
    info = LocalTestbed(name).status()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    elif not info["hosts"]:
        console.print(f"testbed {name} is down (nothing exists)")
    else:
        table = Table("host", "address", "netns", "sshd", "ssh", title=f"testbed {name} on {info['bridge']}")
        for h in info["hosts"]:
            table.add_row(
                h["name"], h["address"], *("yes" if h[k] else "[red]no[/red]" for k in ("netns", "sshd", "ssh"))
            )
        console.print(table)
        console.print(f"inventory: {info['inventory']}")
    if not info["up"]:
        raise SystemExit(1)


@testbed.command(
    "down",
    epilog="\b\nExamples:\n  sudo dlinfra testbed down\n  sudo dlinfra testbed down --name ci\n"
    "  sudo dlinfra testbed down --dry-run",
)
@NAME_OPTION
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
def down(name: str, dry_run: bool) -> None:
    """Remove everything 'up' made for this testbed and what ran on its hosts, and nothing else (idempotent).

    That is: the hosts' dockerds (their containers, data roots, exec roots and every mount under
    them), podman containers on the hosts, sshds, namespaces, veths, the bridge, the iptables rules
    commented dlinfra-testbed:NAME, and the state folder. Never this machine's own dockerd.
    """
    removed = LocalTestbed(name).down(dry_run=dry_run)
    if not removed:
        console.print(f"testbed {name} was not up: nothing to remove")
        return
    table = Table("kind", "count", "would remove" if dry_run else "removed", title=f"testbed {name}")
    for kind, items in removed.items():
        table.add_row(kind, str(len(items)), shown("\n".join(items)))
    console.print(table)
    console.print(f"testbed {name} {'would be removed (dry run)' if dry_run else 'removed'}")


@testbed.command(
    "stop-host", epilog="\b\nExamples:\n  sudo dlinfra testbed stop-host dlinfra-h2   # simulate a dead host"
)
@click.argument("host", callback=_pattern(r"[A-Za-z0-9.-]{1,64}", "a testbed host name like dlinfra-h2"))
@NAME_OPTION
def stop_host(host: str, name: str) -> None:
    """Kill every process of HOST (sshd, sessions, payload), as if it died."""
    LocalTestbed(name).stop_host(host)
    console.print(f"host {host} stopped")


@testbed.command("start-host", epilog="\b\nExamples:\n  sudo dlinfra testbed start-host dlinfra-h2")
@click.argument("host", callback=_pattern(r"[A-Za-z0-9.-]{1,64}", "a testbed host name like dlinfra-h2"))
@NAME_OPTION
def start_host(host: str, name: str) -> None:
    """Start HOST's sshd again after stop-host."""
    LocalTestbed(name).start_host(host)
    console.print(f"host {host} started")
