"""A provider's options, declared once: name, kind, default, bounds, help, secret or not.

Why one record per option: the spec loader, ``--dry-run``, the bring-up and the docs all need the same facts
about an option. A provider declares them in its ``options`` map; :meth:`Provider.validate` (which the dry run
runs) checks every given value against them before anything is built, and the docs' option tables are tested
against them (tests/providers/test_options.py). Checks that tie options together (``placement: single`` with
``processes_per_host``) stay in the provider's own ``validate``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dlinfra import secrets
from dlinfra.errors import SpecError
from dlinfra.inventory import MAX_HOSTS
from dlinfra.payload.cpuset import CpuSetError, parse_cpuset
from dlinfra.text import excerpt

#: One inventory host pattern: a name, a group, ``all``, ``group[i]`` or ``group[i:j]``, Ansible's operators.
HOST_PATTERN = re.compile(r"[\w.:@\[\]*?!&,~^$-]{1,255}", re.ASCII)

#: A string with something in it: the ``pattern`` of options that name a thing (a cloud, a network).
NON_EMPTY = re.compile(r"\S.*", re.DOTALL)

#: What a value must be. ``patterns``: a list of inventory host patterns; ``cpuset``: ``"0-3,8"`` or a list of
#: CPU numbers; ``path``: a file or folder on the controller; ``any``: the provider checks it itself.
Kind = Literal["int", "number", "bool", "str", "choice", "list", "patterns", "cpuset", "mapping", "path", "any"]


@dataclass(frozen=True)
class Option:
    """One option of ``layer_options.LAYER`` as its provider takes it."""

    help: str
    kind: Kind = "str"
    #: What the provider uses when the option is absent (None: nothing, or worked out at bring-up; see help).
    default: Any = None
    #: Bounds of an ``int`` or ``number``: ``low`` and ``high`` inclusive, ``above`` exclusive (0: positive).
    low: float | None = None
    high: float | None = None
    above: float | None = None
    #: The unit of a number, for messages and docs (``seconds``).
    unit: str = ""
    #: The values a ``choice`` takes.
    choices: tuple[str, ...] = ()
    #: What a ``str`` must match as a whole, and that shape in words (``an image reference``).
    pattern: re.Pattern[str] | None = None
    shape: str = ""
    #: A credential: never echoed in a message, and registered for masking (dlinfra.secrets) once it is checked.
    secret: bool = False

    def check(self, value: Any, at: str) -> None:
        """Raise a :class:`SpecError` naming ``at`` when ``value`` is not of this option's kind and bounds."""
        if value is None:
            return  # absent: the default
        if self.secret:
            secrets.register(value)
        problem = self._problem(value)
        if not problem and self.kind == "patterns":
            for i, pattern in enumerate(value):
                if not isinstance(pattern, str) or not HOST_PATTERN.fullmatch(pattern):
                    raise SpecError(
                        f"{at}.{i}: {excerpt(pattern, 40)} is not a host pattern", "a name, a group or group[i]"
                    )
        if problem:
            shown = "(hidden)" if self.secret else excerpt(value, 40)
            raise SpecError(f"{at}: {shown} {problem}", self.hint())

    def _problem(self, value: Any) -> str | None:
        kind = self.kind
        if kind in ("int", "number"):
            numeric = int if kind == "int" else (int, float)
            if isinstance(value, bool) or not isinstance(value, numeric):
                return f"must be {self.describe()}"
            if isinstance(value, float) and not math.isfinite(value):
                return "must be a finite number"
            low = self.low is not None and value < self.low
            if low or (self.above is not None and value <= self.above) or (self.high is not None and value > self.high):
                return f"must be {self.describe()}"
        elif kind == "bool" and not isinstance(value, bool):
            return "must be true or false"
        elif kind == "str" and not isinstance(value, str):
            return "must be a string"
        elif kind == "path" and not isinstance(value, (str, os.PathLike)):
            return "must be a path"
        elif kind == "str" and self.pattern is not None and not self.pattern.fullmatch(value):
            return f"is not {self.shape}"
        elif kind == "choice" and value not in self.choices:
            return f"is not one of {', '.join(self.choices)}"
        elif kind == "list" and not isinstance(value, list):
            return "must be a list"
        elif kind == "patterns" and (not isinstance(value, list) or len(value) > MAX_HOSTS):
            return "must be a list of host patterns (names, groups, all[0])"
        elif kind == "mapping" and not isinstance(value, dict):
            return "must be a mapping"
        elif kind == "cpuset" and value != "":
            try:
                parse_cpuset(value)
            except CpuSetError as exc:
                return f"must be a CPU list like '0-3,8' ({exc})"
        return None

    def describe(self) -> str:
        """What a value must be, in words (``a positive integer``, ``a number from 1 to 86400``)."""
        if self.kind not in ("int", "number"):
            return self.shape or {
                "bool": "true or false",
                "choice": f"one of {', '.join(self.choices)}",
                "str": "a string",
                "path": "a path on the controller",
                "list": "a list",
                "patterns": "a list of host patterns",
                "mapping": "a mapping",
                "cpuset": "a CPU list like 0-3,8",
            }.get(self.kind, "checked by the provider")
        noun = ("integer" if self.kind == "int" else "number") + (f" of {self.unit}" if self.unit else "")
        high = f" (at most {_num(self.high)})" if self.high is not None else ""
        if self.above == 0 or (self.low == 1 and self.kind == "int"):
            return f"a positive {noun}{high}"
        if self.low == 0:
            return f"a non-negative {noun}{high}"
        article = "an" if noun.startswith("integer") else "a"
        if self.low is not None and self.high is not None:
            return f"{article} {noun} from {_num(self.low)} to {_num(self.high)}"
        if self.low is not None:
            return f"{article} {noun} of at least {_num(self.low)}"
        return f"{article} {noun}{high}"

    def hint(self) -> str | None:
        return f"e.g. {self.default}" if self.default not in (None, "", [], {}) and not self.secret else None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def check_options(declared: Mapping[str, Option | str], options: Mapping[str, Any], where: str) -> None:
    """Every given option of ``declared`` against its record (unknown keys are the caller's to refuse). A plug-in
    written before options were typed declares a help string only: its values are its own to check."""
    for key, value in options.items():
        option = declared.get(key)
        if isinstance(option, Option):
            option.check(value, f"{where}.{key}")


def with_defaults(declared: Mapping[str, Option | str], options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every declared option that is absent (or None) at its declared default.

    Why: a default lives in its declaration only (the docs' tables are made from it); code reads
    ``opts["key"]``, never ``opts.get("key", literal)``, so the two cannot drift (tests/providers/test_options.py).
    """
    defaults = {k: o.default for k, o in declared.items() if isinstance(o, Option) and o.default is not None}
    return {**defaults, **{k: v for k, v in options.items() if v is not None}}


def option_rows(declared: Mapping[str, Option | str]) -> list[tuple[str, str, str, str]]:
    """(name, what it must be, default, help) per option, as the docs' tables show them (YAML's spelling)."""
    rows = []
    for name, option in sorted(declared.items()):
        if not isinstance(option, Option):
            rows.append((name, "", "", option))  # a plug-in's help string
            continue
        default = (
            ""
            if option.default is None
            else str(option.default).lower()
            if option.kind == "bool"
            else str(option.default)
        )
        rows.append((name, option.describe(), default, option.help))
    return rows


def _yaml(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def reference(classes: Mapping[str, Any]) -> str:
    """docs/provider-options.md: one table per provider (by its registered name), from the declarations."""
    lines = [
        "# Provider options",
        "",
        "Generated from each provider's declared options (`dlinfra/providers/options.py`); "
        "`tests/providers/test_options.py` fails when this page and the declarations differ. "
        "Regenerate it with `scripts/provider-options.py > docs/provider-options.md`.",
    ]
    for name, cls in sorted(classes.items()):
        layers = ", ".join(cls.layers)
        lines += [
            "",
            f"## `{name}` ({layers})",
            "",
            "| option | must be | default | what it does |",
            "|---|---|---|---|",
        ]
        for option, must, default, help_text in option_rows(cls.options):
            cell = f"`{default}`" if default else ""
            lines.append(f"| `{option}` | {must} | {cell} | {help_text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
