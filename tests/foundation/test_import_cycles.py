"""No import cycles among dlinfra's modules, counting function-local imports (the usual way to hide one).

Why: a cycle makes the import order decide whether a module works, and the function-local import that
dodges it hides the real dependency. Imports under ``if TYPE_CHECKING:`` count too: they name a dependency
all the same, and moving a shared type to its own module is the fix.
"""

from __future__ import annotations

from import_graph import import_graph

#: Known cycles that are left on purpose, as sorted module lists. Keep it empty.
ALLOWED_CYCLES: list[list[str]] = []


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
