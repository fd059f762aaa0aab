"""The payload process's own temporary directory, removed on the way out.

TensorFlow's autograph writes one generated source file per converted function into the temporary
directory and removes them in an ``atexit`` hook. The payload leaves through ``os._exit`` (see
:mod:`dlinfra.payload.__main__`), which skips those hooks, so every run left its files behind: 2,454 of
them in the temporary directory of one test machine after a day. Each process now writes into one
directory named for the payload, which :func:`leave` removes before it exits. A process stopped by a
signal (a cell's timeout, a stopped cell) cannot remove it: the launcher sets ``TMPDIR`` to the cell's
run folder, so it is left there, where the cell's next prepare or a teardown removes it, not in the
host's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import NoReturn

PREFIX = "dlinfra-payload-"


def enter() -> None:
    """Make a fresh directory the default for ``tempfile`` and for the children's ``TMPDIR``."""
    try:
        path = tempfile.mkdtemp(prefix=PREFIX)
    except OSError:  # no writable temporary directory: TF's own writes will say so, not this
        return
    tempfile.tempdir = path
    os.environ["TMPDIR"] = path


def leave(code: int) -> NoReturn:
    """Flush, remove this process's directory (only one :func:`enter` made), and exit at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    path = tempfile.tempdir
    if path and os.path.basename(path).startswith(PREFIX):
        shutil.rmtree(path, ignore_errors=True)
    os._exit(code)


def run(main: Callable[[], int]) -> NoReturn:
    """``main`` in its own temporary directory, then :func:`leave`, however it ends: also through
    ``SystemExit`` (argparse's errors and ``--help``), which would otherwise skip the removal."""
    enter()
    try:
        code = main()
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    leave(code)
