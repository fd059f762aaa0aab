"""How input and stored data are quoted in messages and shown on a terminal: bounded, and inert.

Why one module: every error that echoes a value (a spec field, a path, a provider option, a stored name) must
stay one short line whatever the value holds (a megabyte string, a newline), and data shown on a terminal must
not act on it (escape sequences that retitle or clear the screen, bidi overrides that reverse text, Rich
markup). :func:`excerpt` quotes a value, :func:`plain` shows a name or path, :func:`printable` makes any text
inert for a terminal, :func:`bounded` cuts a whole message as the last guard.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_repr.maxlist = _repr.maxdict = _repr.maxtuple = _repr.maxset = 5
_repr.maxlevel = 2

#: Characters that act on a terminal or reorder text: C0 and C1 controls (but newline and tab), DEL, and the
#: Unicode bidi controls.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: The longest error line (a path, a field, an excerpt and a hint fit in it).
MAX_MESSAGE = 500


def excerpt(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, so a megabyte value cannot flood a one-line error."""
    text = repr(value[:limit]) if isinstance(value, str) else _repr.repr(value)
    if isinstance(value, str) and len(value) > limit:
        return text[:limit] + "…"
    return text if len(text) <= limit + 2 else text[:limit] + "…"


def plain(value: Any, limit: int = 120, *, tail: bool = False) -> str:
    """A name or path as it reads in a one-line message: as is when short and printable, else cut short (keeping
    the end with ``tail``: a path's file name says most) or, when not printable, an excerpt."""
    text = str(value)
    if not text.isprintable():
        return excerpt(text, limit)
    if len(text) <= limit:
        return text
    return "…" + text[1 - limit :] if tail else text[: limit - 1] + "…"


def printable(text: str) -> str:
    """``text`` with every terminal control character written as its escape (``\\u001b``), so that stored data
    shown on a terminal is read, not obeyed. The escapes are JSON's: JSON output stays valid."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    """One line of at most about ``limit`` characters: its start and its end (where the hint is) kept."""
    line = " ".join(printable(message).split())
    if len(line) <= limit:
        return line
    half = limit // 2 - 1
    return f"{line[:half]} … {line[-half:]}"
