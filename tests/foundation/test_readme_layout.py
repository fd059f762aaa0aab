"""README's layout table is the newcomer's map: every path it names exists, every file it names in a folder's
row is in that folder, and every package of dlinfra has a row."""

from __future__ import annotations

import re

from support import REPO


def _layout_rows() -> list[tuple[list[str], str]]:
    text = (REPO / "README.md").read_text()
    table = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) >= 3 and "`" in cells[1]:
            rows.append((re.findall(r"`([^`]+)`", cells[1]), cells[2]))
    return rows


def test_every_path_in_the_layout_exists() -> None:
    rows = _layout_rows()
    assert len(rows) >= 10, "README's layout table was not found"
    missing = []
    for paths, what in rows:
        missing += [p for p in paths if not (REPO / p).exists()]
        for folder in (p for p in paths if p.endswith("/")):
            named = re.findall(r"`([\w/]+\.py)`", what)
            missing += [f"{folder}{name}" for name in named if not (REPO / folder / name).exists()]
    assert not missing, f"README's layout names paths that do not exist: {missing}"


def test_every_package_has_a_row() -> None:
    named = {p.rstrip("/") for paths, _ in _layout_rows() for p in paths}
    packages = {f"dlinfra/{d.name}" for d in (REPO / "dlinfra").iterdir() if (d / "__init__.py").is_file()}
    assert packages <= named, f"README's layout has no row for {sorted(packages - named)}"
