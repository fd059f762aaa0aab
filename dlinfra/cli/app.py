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

from dlinfra import __version__, safe_yaml, secrets
from dlinfra.errors import DlinfraError
from dlinfra.text import bounded, excerpt

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
    "cache": "dlinfra.cli.cache_cmd:cache",
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


#: A clouds.yaml is small; one over these bounds is not read for its secrets.
CLOUD_LIMITS = safe_yaml.Limits(max_bytes=1 << 20, max_nodes=20_000)
#: Where openstacksdk looks for clouds.yaml and secure.yaml, after ``$OS_CLIENT_CONFIG_FILE`` (its own order).
CLOUD_FILES = ("clouds.yaml", "secure.yaml")
CLOUD_FOLDERS = (Path("."), Path("~/.config/openstack"), Path("/etc/openstack"))


def register_cloud_secrets() -> None:
    """Register the secrets of every clouds.yaml openstacksdk could read, at start-up, whatever the command.

    Why before any use: a password of clouds.yaml that also appears in a spec value or a path (pasted by
    mistake) must be masked in the very first error, long before any cloud is connected. Read within bounds;
    a file that cannot be read is openstacksdk's to report, when it is used.
    """
    files = [Path(os.environ["OS_CLIENT_CONFIG_FILE"])] if os.environ.get("OS_CLIENT_CONFIG_FILE") else []
    files += [folder.expanduser() / name for folder in CLOUD_FOLDERS for name in CLOUD_FILES]
    for path in files:
        if not path.is_file():
            continue
        try:
            secrets.register_obj(safe_yaml.load(path, "clouds.yaml", CLOUD_LIMITS).data)
        except (DlinfraError, OSError):
            continue


def _error(message: str) -> None:
    """One error line, secrets redacted (a message may quote a URL, a command or a spec value) and bounded: the
    last guard behind :func:`dlinfra.text.excerpt`, which every message that quotes input uses."""
    click.echo(f"dlinfra: error: {bounded(secrets.redact(message))}", err=True)


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
    register_cloud_secrets()
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
        what = f"unexpected {type(exc).__name__}: {excerpt(str(exc), 200)}"
        _error(f"{what} (rerun with --debug for the traceback, and report it)")
        return 1
    return result if isinstance(result, int) else 0
