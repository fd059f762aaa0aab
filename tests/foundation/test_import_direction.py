"""dlinfra's packages import downwards only, and never another package's private names.

The levels (docs/architecture.md draws them): the CLI drives the run engine; the engine drives the providers;
the providers use the testbed helpers, images, the run-time services (Ansible runner, progress, run registry),
targets and transports; everything rests on the records, errors and text helpers. A package may import its own
modules and any package on a lower level, never one on its own level or above. Function-local imports and those
under ``if TYPE_CHECKING:`` count: they name a dependency all the same.
"""

from __future__ import annotations

import ast

from import_graph import import_graph
from support import REPO

#: From the top down. A top-level module (``dlinfra/text.py``) counts as a package of its own.
LEVELS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("orchestration",),
    ("report",),
    ("providers",),
    ("testbed", "images"),
    ("runtime",),
    ("inventory", "target"),
    ("transport",),
    ("payload", "results", "safe_yaml"),
    ("record", "text", "secrets", "cache", "cancel", "layers"),
    ("errors", "dlinfra"),
)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "dlinfra"


def _level(package: str) -> int:
    for level, packages in enumerate(LEVELS):
        if package in packages:
            return level
    raise AssertionError(f"package {package} has no level: add it to LEVELS and docs/architecture.md")


def test_every_import_goes_down() -> None:
    against = []
    for module, imported in sorted(import_graph().items()):
        for other in sorted(imported):
            a, b = _package(module), _package(other)
            if a != b and _level(b) <= _level(a):
                against.append(f"{module} -> {other}")
    assert not against, "imports against the direction (LEVELS):\n" + "\n".join(against)


def test_no_module_uses_another_packages_private_names() -> None:
    """``from dlinfra.x.y import _helper`` and ``y._helper`` from outside ``dlinfra.x``: a private name is its
    package's to change."""
    found = []
    for path in sorted((REPO / "dlinfra").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        aliases: dict[str, str] = {}  # local name -> the dlinfra module it is bound to
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dlinfra"):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and _package(node.module) != _package(module):
                        found.append(f"{module}: from {node.module} import {alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("dlinfra") and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _package(aliases[node.value.id]) != _package(module)
            ):
                found.append(f"{module}: {node.value.id}.{node.attr}")
    assert not found, "private names used across packages:\n" + "\n".join(sorted(set(found)))


def test_every_function_local_dlinfra_import_says_why() -> None:
    """A dlinfra import inside a function has a comment on its line or the line above saying why it is not at the
    top: an optional heavy dependency, an import cycle or the CLI's start-up time. Otherwise it belongs at the top."""
    found = set()
    for path in sorted((REPO / "dlinfra").rglob("*.py")):
        lines = path.read_text().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    ours = any(a.name.split(".")[0] == "dlinfra" for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    ours = bool(node.level) or (node.module or "").split(".")[0] == "dlinfra"
                else:
                    continue
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                if ours and "#" not in lines[node.lineno - 1] and not above.startswith("#"):
                    found.add(f"{path.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not found, "dlinfra imports inside a function without a comment saying why:\n" + "\n".join(sorted(found))


def test_the_levels_name_every_package_once() -> None:
    named = [p for level in LEVELS for p in level]
    assert len(named) == len(set(named))
    packages = {p.name for p in (REPO / "dlinfra").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in (REPO / "dlinfra").glob("*.py") if p.stem != "__init__"}
    assert packages | modules | {"dlinfra"} == set(named)
