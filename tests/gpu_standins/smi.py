"""An ``nvidia-smi`` stand-in, because no GPU runs where the tests run: a script on a test's PATH that prints
what the real tool prints on a GPU host, in its format (the files beside this module: typical H100 values written
by hand, not captured, since no GPU has been lent to this work yet), for the queries dlinfra
makes, and fails as the real one does on a field it does not know (exit 2, the message on stdout)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The fields the CSVs beside this module answer, in order: those of the facts module's query.
QUERY_FIELDS = (
    "index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm,clocks.max.mem"
)
SCRIPT = """#!{python}
import sys
from pathlib import Path

args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query is None:
    sys.stdout.write(Path({banner!r}).read_text())
elif query != {fields!r} or "--format=csv,noheader,nounits" not in args:
    print('Field "%s" is not a valid field to query.' % query)
    sys.exit(2)
else:
    sys.stdout.write(Path({csv!r}).read_text())
"""


def install(bin_dir: Path, csv: str = "nvidia-smi-query-gpu.csv") -> Path:
    """Write the stand-in as ``bin_dir/nvidia-smi``, answering the query with ``csv``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        SCRIPT.format(
            python=sys.executable,
            banner=str(HERE / "nvidia-smi-banner.txt"),
            fields=QUERY_FIELDS,
            csv=str(HERE / csv),
        )
    )
    script.chmod(0o755)
    return script
