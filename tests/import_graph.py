"""dlinfra's module import graph, as the import tests read it from the source (no module is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / "dlinfra").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the dlinfra modules it imports anywhere in its body (``from pkg import mod`` is ``pkg.mod``)."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str | None] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(resolve(a.name) for a in node.names if a.name.split(".")[0] == "dlinfra")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                if source.split(".")[0] != "dlinfra":
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    edges.add(full if full in modules else resolve(source))
        graph[name] = {e for e in edges if e is not None and e != name}
    return graph
