"""No import cycles among dlinfra's modules, counting function-local imports (the usual way to hide one).

Why: a cycle makes the import order decide whether a module works, and the function-local import that
dodges it hides the real dependency. Imports under ``if TYPE_CHECKING:`` count too: they name a dependency
all the same, and moving a shared type to its own module is the fix.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO

#: Known cycles that are left on purpose, as sorted module lists. Keep it empty.
ALLOWED_CYCLES: list[list[str]] = []


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


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_function_local_and_relative_imports() -> None:
    graph = import_graph()
    assert "dlinfra.payload.dispatch" in graph["dlinfra.payload.run"]  # imported inside execute()
    assert "dlinfra.report.html" in graph["dlinfra.report.render"]  # imported inside render()
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_among_dlinfra_modules() -> None:
    graph = import_graph()
    found = [c for c in cycles(graph) if c not in ALLOWED_CYCLES]
    report = [" <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(report)
