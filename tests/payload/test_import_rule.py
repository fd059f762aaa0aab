"""The payload runs on targets with only TensorFlow, NumPy and psutil: check what it imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from support import REPO

PAYLOAD = REPO / "dlinfra" / "payload"
ALLOWED_THIRD_PARTY = {"tensorflow", "numpy", "psutil"}
ALLOWED_DLINFRA = {"dlinfra", "dlinfra.record", "dlinfra.errors"}
#: GPU libraries the payload uses where a host has them (dlinfra.payload.gpu): imported only inside a function,
#: with a comment on the line saying why, so a target without them runs the payload all the same.
OPTIONAL_GPU = {"pynvml", "cupy", "cupyx", "torch"}
#: Controller-side packages the payload must never pull in, directly or through dlinfra.
FORBIDDEN = {
    "pandas",
    "click",
    "ansible",
    "ansible_runner",
    "yaml",
    "fabric",
    "openstack",
    "libvirt",
    "psycopg",
    "matplotlib",
    "pyarrow",
    "dlinfra.results",
    "dlinfra.cli",
    "sqlite3",
}


def _optional_imports(tree: ast.AST, lines: list[str]) -> set[int]:
    """The ids of imports of :data:`OPTIONAL_GPU` inside a function with a comment on their line."""
    found = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Import)
                    and {a.name for a in node.names} <= OPTIONAL_GPU
                    and "# optional" in lines[node.lineno - 1]
                ):
                    found.add(id(node))
    return found


def test_payload_sources_import_only_stdlib_tf_numpy_psutil_and_dlinfra_record() -> None:
    bad = []
    for path in sorted(PAYLOAD.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, str(path))
        optional = _optional_imports(tree, text.splitlines())
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if name.startswith("dlinfra.payload") or name in ALLOWED_DLINFRA:
                    continue
                if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY:
                    continue
                bad.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not bad, "\n".join(bad)


def test_importing_every_payload_module_adds_no_controller_module() -> None:
    """In a fresh interpreter: what the payload adds beyond TF/NumPy/psutil is stdlib or dlinfra's allowed parts."""
    code = """
import json, sys, pkgutil, importlib
import tensorflow, numpy, psutil
before = set(sys.modules)
import dlinfra.payload
for m in pkgutil.walk_packages(dlinfra.payload.__path__, "dlinfra.payload."):
    if m.name != "dlinfra.payload.__main__":
        importlib.import_module(m.name)
print(json.dumps({"added": sorted(set(sys.modules) - before), "all": sorted(sys.modules)}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    added = {m for m in result["added"] if not m.startswith("dlinfra.payload")}
    strange = sorted(
        m
        for m in added
        if m.split(".")[0] not in sys.stdlib_module_names
        and m not in ALLOWED_DLINFRA
        and m.split(".")[0] not in ALLOWED_THIRD_PARTY
    )
    assert not strange, f"the payload imported {strange}"
    loaded = set(result["all"])
    # TF itself may load optional packages on some machines; what the payload adds must not include these.
    assert not {m for m in added if m.split(".")[0] in FORBIDDEN}
    assert not {m for m in loaded if m.startswith(("dlinfra.results", "dlinfra.cli"))}
    assert "dlinfra.payload.dispatch" in loaded  # the walk really imported the TF-side modules


def test_parsing_and_validation_do_not_import_tensorflow() -> None:
    """Bad input is reported before TF loads (fast), and --cpus can pin before TF sizes its pools."""
    code = (
        "import sys, io\n"
        "from dlinfra.payload import cli, run, data, cluster, affinity, identity\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
        "print('clean')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and "clean" in proc.stdout, proc.stderr[-2000:]
