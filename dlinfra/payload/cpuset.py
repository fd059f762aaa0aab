"""CPU sets in the Linux list format (``0-3,6``): the one parser and formatter of dlinfra.

Inventories (``dlinfra_cpus``), specs (``layer_options`` ``cpuset``), the container and VM layers, the
testbed, ``dlinfra bench --cpus`` and the payload's ``--cpus`` all read and write CPU sets; one module means
one syntax and one set of bounds everywhere. It lives in the payload because the payload pins with it and
may import only :mod:`dlinfra.payload` and :mod:`dlinfra.record`; the controller imports it from here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: Linux's largest NR_CPUS is 8192: a larger id is a typo, and refusing it bounds the set's size.
MAX_CPU = 8191
#: Longest CPU list text read (all of 0-8191 one by one is about 40,000 characters; nobody writes that).
MAX_TEXT = 4096
_RANGE = re.compile(r"(\d+)(?:-(\d+))?", re.ASCII)


class CpuSetError(ValueError):
    """Not a CPU set; the message says what is wrong, the caller adds which field or flag it was."""


def _show(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def parse_cpuset(value: object) -> tuple[int, ...]:
    """``"0-3,6"`` (or one CPU number, or a list of them) -> ``(0, 1, 2, 3, 6)``: sorted, unique, not empty.

    Bounded before anything is built: at most :data:`MAX_TEXT` characters and ids up to :data:`MAX_CPU`, so
    ``0-99999999999`` fails at once instead of filling memory. Spaces around items are allowed.
    """
    if isinstance(value, bool):
        raise CpuSetError(f"{value!r} is not a CPU set")
    if isinstance(value, int):
        items: Iterable[int | str] = [value]
    elif isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise CpuSetError(f"{len(value):,} characters is too long for a CPU set")
        items = value.split(",")
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)
    else:
        raise CpuSetError(f"{_show(value)} is not a CPU set")
    cpus: set[int] = set()
    for item in items:
        if isinstance(item, str):
            part = item.strip()
            m = _RANGE.fullmatch(part)
            if not m:
                why = (
                    ""
                    if part == value
                    else f" ({_show(part)} is not a CPU number or range)"
                    if part
                    else " (an empty item)"
                )
                raise CpuSetError(f"{_show(value)} is not a CPU set{why}")
            low, high = int(m.group(1)), int(m.group(2) or m.group(1))
            if low > high:
                raise CpuSetError(f"range {_show(part)} runs backwards")
        elif isinstance(item, int) and not isinstance(item, bool):
            if item < 0:
                raise CpuSetError(f"CPU {item} is negative")
            low = high = item
        else:
            raise CpuSetError(f"{_show(value)} is not a CPU set (CPU numbers are integers >= 0)")
        if high > MAX_CPU:
            raise CpuSetError(f"CPU {_show(high, 20)} is past the largest id Linux allows ({MAX_CPU})")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise CpuSetError(f"{_show(value)} names no CPUs")
    return tuple(sorted(cpus))


def format_cpuset(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"``: the form Linux, libvirt, Docker and ``--cpus`` take ('' when empty)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def split_cpuset(cpus: Sequence[int], parts: int) -> list[list[int]]:
    """``parts`` disjoint contiguous chunks whose sizes differ by at most one, in order; with more parts than
    CPUs the last chunks are empty (the caller decides whether that is allowed)."""
    size, extra = divmod(len(cpus), parts)
    out: list[list[int]] = []
    start = 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        out.append(list(cpus[start : start + n]))
        start += n
    return out
