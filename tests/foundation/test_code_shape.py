"""The shape rules of docs/architecture.md that a reader feels first: no function of 80 lines or more in dlinfra/,
and no nested function or lambda that binds state through a default argument (``def f(x=x)``: a closure, or
an explicit argument, says what it uses)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "dlinfra"
MAX_LINES = 80
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions() -> Iterator[tuple[Path, Function]]:
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, Function):
                yield path, node


def test_no_function_of_80_lines_or_more() -> None:
    long = [
        f"{path.relative_to(ROOT.parent)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path, fn in _functions()
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 >= MAX_LINES
    ]
    assert not long, "split these:\n" + "\n".join(long)


def test_no_nested_function_binds_state_through_default_arguments() -> None:
    bound = []
    for path, outer in _functions():
        for inner in ast.walk(outer):
            if inner is outer or not isinstance(inner, (*Function.__args__, ast.Lambda)):
                continue
            defaults = [*inner.args.defaults, *(d for d in inner.args.kw_defaults if d is not None)]
            names = sorted({n.id for d in defaults for n in ast.walk(d) if isinstance(n, ast.Name)})
            if names:
                bound.append(f"{path.relative_to(ROOT.parent)}:{inner.lineno} binds {', '.join(names)}")
    assert not bound, "pass these as arguments or close over them:\n" + "\n".join(bound)
