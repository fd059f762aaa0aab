"""What a sweep did: the report that :mod:`.sweep` and the providers' own sweep functions fill in.

Why a module of its own: the container provider fills it, and :mod:`.sweep` calls the provider; with the
report in ``sweep`` the two imported each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Report kinds, in the order they are listed.
KINDS = (
    "ansible runs",
    "containers",
    "networks",
    "images",
    "daemons",
    "processes",
    "mounts",
    "data roots",
    "guests",
    "volumes",
    "namespaces",
    "links",
    "iptables rules",
    "run folders",
    "logs",
    "files",
    "state files",
)


@dataclass
class SweepReport:
    """What a sweep removed (or, dry, would remove) per kind, what it kept and why, and what failed."""

    dry_run: bool = False
    removed: dict[str, list[str]] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, kind: str, *items: str) -> None:
        if items:
            self.removed.setdefault(kind, []).extend(items)

    def skip(self, message: str) -> None:
        self.skipped.append(message)

    def error(self, message: str) -> None:
        self.errors.append(message)

    def merge(self, other: SweepReport) -> None:
        for kind, items in other.removed.items():
            self.add(kind, *items)
        self.runs += other.runs
        self.skipped += other.skipped
        self.errors += other.errors

    @property
    def empty(self) -> bool:
        return not any(self.removed.values())

    def by_kind(self) -> list[tuple[str, list[str]]]:
        """(kind, items) in :data:`KINDS` order, then any other kind; empty kinds left out."""
        order = list(KINDS) + sorted(k for k in self.removed if k not in KINDS)
        return [(k, self.removed[k]) for k in order if self.removed.get(k)]

    def summary(self) -> str:
        """``2 containers, 1 daemons, ...`` (or ``nothing``)."""
        return ", ".join(f"{len(items)} {kind}" for kind, items in self.by_kind()) or "nothing"
