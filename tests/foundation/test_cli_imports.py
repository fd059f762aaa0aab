"""A ``dlinfra`` process that never connects or builds a data set does not import what only those need.

Why: the suite starts ~500 CLI processes (each hostile case is one) and a user's refused spec or ``--help`` should
answer at once; fabric with paramiko and invoke (~0.1 s) and NumPy (~0.07 s) took half of a process's start.
``make bench`` prints the start time beside its goal (bench/suite.py); this test keeps the structure that gives it.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Imported only where they are used: a connection (dlinfra.transport.fabric_link), a data set's generation.
HEAVY = ("fabric", "paramiko", "invoke", "numpy", "tensorflow")

PROBE = """
import json, sys
import dlinfra.cli.app, dlinfra.orchestration.plan, dlinfra.orchestration.sweep, dlinfra.target
print(json.dumps(sorted(m for m in sys.argv[1:] if m in sys.modules)))
"""


def test_the_cli_and_the_campaign_plan_import_no_connection_or_numerics_library() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], "import these where they are used, not at the top of a module"
