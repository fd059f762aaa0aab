"""The ``dlinfra`` command: a click group whose subcommands load on first use.

Subcommands live one per module (``*_cmd.py``) and import their heavy
dependencies (TensorFlow, pandas, ansible-runner) inside the command body, so
``dlinfra --help`` stays fast and works on a machine with only the controller.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

from dlinfra import __version__, secrets
from dlinfra.errors import DlinfraError

#: name -> "module:attribute"; the order is the order --help lists them in.
SUBCOMMANDS = {
    "testbed": "dlinfra.cli.testbed_cmd:testbed",
    "run": "dlinfra.cli.run_cmd:run",
    "bench": "dlinfra.cli.bench_cmd:bench",
    "results": "dlinfra.cli.results_cmd:results",
    "report": "dlinfra.cli.report_cmd:report",
    "compare": "dlinfra.cli.compare_cmd:compare",
    "check": "dlinfra.cli.check_cmd:check",
    "sweep": "dlinfra.cli.sweep_cmd:sweep",
}


@dataclass
class Settings:
    """Global options every subcommand may use (``ctx.obj``)."""

    db: str | None
    debug: bool


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute = target.split(":")
        return getattr(importlib.import_module(module), attribute)


EPILOG = """\b
Examples:
  dlinfra testbed up --local --hosts 3     # three SSH hosts on this machine
  dlinfra run campaigns/demo.yml           # provision, deploy, run, collect
  dlinfra bench mnist-dnn --steps 50       # one local run, stored as layer bm
  dlinfra results list                     # what the store holds
  dlinfra report --format html --out r.html
  dlinfra compare latest~1 latest          # what changed since the campaign before
  dlinfra check                            # exit non-zero when an 'expect' of the spec fails
"""


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dlinfra")
@click.option(
    "--db",
    envvar="DLINFRA_DB",
    metavar="URL",
    help="Results store: an SQLite file path (default ./dlinfra-results.db) or postgresql://USER@HOST/DB. "
    "Env: DLINFRA_DB.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, db: str | None, debug: bool) -> None:
    """Provision bare-metal, VM and container layers, run identical TensorFlow
    benchmarks on each, and report what each layer costs against bare metal."""
    ctx.obj = Settings(db=db, debug=debug)


def _error(message: str) -> None:
    """One error line, secrets redacted: a message may quote a URL, a command or a spec value."""
    click.echo(f"dlinfra: error: {secrets.redact(message)}", err=True)


def _traceback() -> None:
    """The current exception's traceback (``--debug``), secrets redacted like every other line."""
    click.echo(secrets.redact(traceback.format_exc()), err=True, nl=False)


def _tools_beside_interpreter() -> None:
    """Put the interpreter's own bin folder first on PATH.

    Why: dlinfra runs ansible-playbook, ansible-inventory and ansible-galaxy as commands, and they are
    installed beside dlinfra itself. Called as ``.venv/bin/dlinfra`` without the venv activated, they were
    not on PATH and every run stopped at "ansible-inventory is not installed". (Not resolved: a venv's
    python is a link to the system's.)
    """
    here = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if here not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([here, path]) if path else here


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure a user can fix is one line on stderr and a non-zero exit."""
    args = sys.argv[1:] if argv is None else argv
    _tools_beside_interpreter()
    debug = "--debug" in args
    # Before anything runs: the secrets of the environment and of the command line (--db URL) are known,
    # so no artifact, stored row or message can carry them.
    secrets.register_environ()
    for arg in args:
        secrets.register_text(arg)
    try:
        result = cli.main(args=args, prog_name="dlinfra", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "dlinfra"
        _error(f"{exc.format_message()} (see '{where} --help')")
        return exc.exit_code
    except click.ClickException as exc:
        _error(exc.format_message())
        return exc.exit_code
    except (KeyboardInterrupt, click.Abort):
        _error("interrupted; results already stored are kept")
        return 130
    except DlinfraError as exc:
        if debug:
            _traceback()
        _error(str(exc))
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if debug:
            _traceback()
        _error(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback, and report it)")
        return 1
    return result if isinstance(result, int) else 0
