"""Reading a YAML file a user (or anyone) wrote, within fixed bounds of time and memory.

Why not ``yaml.safe_load``: it follows aliases (a 1 KB "billion laughs" file expands to gigabytes), recurses
once per nesting level (deep input ends in a RecursionError), keeps the last of two duplicate keys (a second
``steps:`` silently wins) and reads a file of any size. Here the file is read with a size cap and checked for
encoding first, then built from the parser's event stream without recursion, counting nodes (an alias counts
as what it expands to), depth and string lengths as it goes. Every hostile input stops early with one line
naming file, line and field; specs and inventories share this one definition.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import ScalarNode
from yaml.reader import ReaderError

from dlinfra.errors import SpecError
from dlinfra.secrets import is_secret_name, register_text
from dlinfra.secrets import register as register_secret
from dlinfra.text import excerpt, plain

#: Keys whose values are never quoted in a message (and are hidden from Ansible's messages).

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 1 MiB parses in ms
_YAML = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null")}
_PLAIN_TAGS = {f"{_YAML}merge", f"{_YAML}value"}
_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


@dataclass(frozen=True)
class Limits:
    """What one file may hold; the defaults suit an inventory, :mod:`dlinfra.orchestration.spec` tightens them."""

    max_bytes: int = 4 << 20
    max_depth: int = 64
    #: Nodes in the document, every alias counted as the nodes it stands for.
    max_nodes: int = 200_000
    max_string: int = 65_536
    #: Anchors and aliases allowed at all (a spec has no use for them; Ansible inventories sometimes do).
    aliases: bool = True
    #: Local tags read as plain strings (Ansible's ``!vault`` and ``!unsafe``).
    string_tags: frozenset[str] = frozenset()
    #: Entries of one list or mapping (an inventory's hosts: refused at the first one too many, not at the end).
    max_items: int = 200_000
    #: Every mapping key is a string (a spec: ``1: x`` beside ``cpus: 1`` is a typo, not a field).
    string_keys: bool = False


@dataclass
class Document:
    """The data of a YAML file and the line of every node, by path (keys' own lines under ``(*path, "__key__")``)."""

    data: Any
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)


def dotted(path: tuple[Any, ...]) -> str:
    """``("workloads", 1, "name")`` -> ``workloads.1.name``, keys cut short."""
    parts = [str(p) if len(str(p)) <= 40 else str(p)[:39] + "…" for p in path if p != "__key__"]
    if len(parts) > 10:  # deep nesting: its start and its end say where
        parts = [*parts[:4], "…", *parts[-4:]]
    return ".".join(parts) or "(top)"


def is_secret(path: tuple[Any, ...]) -> bool:
    return any(isinstance(p, str) and is_secret_name(p) for p in path)


def read_text(path: Path, what: str, max_bytes: int, hint: str | None = None) -> str:
    """The text of a regular file of at most ``max_bytes``, UTF-8 (a UTF-8 BOM is dropped) without NUL bytes."""
    where = plain(path, 200, tail=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO must not block us
    except FileNotFoundError:
        raise SpecError(f"{what} {where} does not exist", hint) from None
    except ValueError:
        raise SpecError(f"{what} path {excerpt(str(path))} contains a NUL byte", hint) from None
    except OSError as exc:
        reason = "a symbolic link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise SpecError(f"{what} {where} cannot be read: {reason}", hint) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(f"{what} {where} is a folder, not a file", hint)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{what} {where} is not a regular file", hint)
        if info.st_size > max_bytes:
            raise SpecError(f"{where}: {what} is {_size(info.st_size)}, over the {_size(max_bytes)} limit", hint)
        raw = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:  # it grew while we looked
        raise SpecError(f"{where}: {what} is over the {_size(max_bytes)} limit", hint)
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise SpecError(f"{where}: {what} is {name} (it starts with a byte order mark)", "save it as UTF-8")
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise SpecError(
            f"{where}:{line}: {what} holds a NUL byte at byte offset {nul}", "a text file has none: is it binary?"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            f"{where}:{line}: {what} is not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start}",
            "save it as UTF-8",
        ) from None
    return text.removeprefix("\ufeff")


def _short(tag: str) -> str:
    """``tag:yaml.org,2002:python/object`` -> ``!!python/object``, cut short."""
    text = "!!" + tag.removeprefix(_YAML) if tag.startswith(_YAML) else tag
    return text if len(text) <= 60 else text[:59] + "…"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


@dataclass
class _Frame:
    container: dict[Any, Any] | list[Any]
    path: tuple[Any, ...]
    anchor: str | None
    #: Nodes counted before this collection's own: an alias to it counts everything since.
    nodes_before: int
    key: Any = None
    has_key: bool = False


def load(path: Path, what: str, limits: Limits, hint: str | None = None) -> Document:
    """Read and parse one YAML file within ``limits``; every problem is a SpecError naming file, line and field."""
    text = read_text(path, what, limits.max_bytes, hint)
    return _Builder(plain(path, 200, tail=True), what, limits).build(text)


def loads(text: str, what: str, limits: Limits) -> Document:
    """Parse YAML given as text (a command-line value) within ``limits``; errors name ``what``."""
    if len(text.encode()) > limits.max_bytes:
        raise SpecError(f"{what}: the value is over {_size(limits.max_bytes)}")
    return _Builder(what, what, limits).build(text)


class _Builder:
    """Builds plain Python data from parser events: no recursion, aliases counted, duplicate keys refused."""

    def __init__(self, where: str, what: str, limits: Limits) -> None:
        self.where = where
        self.what = what
        self.limits = limits
        self.lines: dict[tuple[Any, ...], int] = {}
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.stack: list[_Frame] = []
        self.nodes = 0

    def fail(self, line: int, path: tuple[Any, ...], message: str, hint: str | None = None) -> SpecError:
        return SpecError(f"{self.where}:{line}: {dotted(path)}: {message}", hint)

    def build(self, text: str) -> Document:
        loader = None
        try:
            loader = _Loader(text)  # the pure-Python reader checks characters here already
            return self._events(loader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = f":{mark.line + 1}" if mark else ""
            problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
            raise SpecError(f"{self.where}{line}: not valid YAML: {problem[:100]}") from None
        except ReaderError as exc:
            line = text.count("\n", 0, max(exc.position, 0)) + 1
            raise SpecError(
                f"{self.where}:{line}: not valid YAML: character #x{exc.character:04x}: {exc.reason}"
                if isinstance(exc.character, int)
                else f"{self.where}:{line}: not valid YAML: {exc.reason}"
            ) from None
        except yaml.YAMLError as exc:
            raise SpecError(f"{self.where}: not valid YAML: {' '.join(str(exc).split())[:100]}") from None
        finally:
            if loader is not None:
                loader.dispose()

    def _events(self, loader: Any) -> Document:
        root: Any = None
        documents = 0
        while loader.check_event():
            event = loader.get_event()
            line = event.start_mark.line + 1 if event.start_mark else 0
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise SpecError(f"{self.where}:{line}: {self.what} holds more than one YAML document (---)")
                continue
            if not isinstance(event, yaml.NodeEvent) and not isinstance(event, yaml.CollectionEndEvent):
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                frame = self.stack.pop()
                value, size = frame.container, self.nodes - frame.nodes_before
                if frame.anchor:
                    self.anchors[frame.anchor] = (value, size)
            else:
                value = self._node(loader, event, line)
                if value is _OPEN:
                    continue
            if not self.stack:
                root = value
            else:
                self._attach(value, line)
        return Document(root, self.lines)

    def _path(self) -> tuple[Any, ...]:
        """Path of the node about to be read: a key reads as its mapping, a value as mapping + key."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.container, list):
            return (*top.path, len(top.container))
        return (*top.path, top.key) if top.has_key else top.path

    def _count(self, n: int, line: int, path: tuple[Any, ...]) -> None:
        self.nodes += n
        if self.nodes > self.limits.max_nodes:
            raise self.fail(
                line, path, f"{self.what} has more than {self.limits.max_nodes:,} values (aliases count expanded)"
            )

    def _node(self, loader: Any, event: Any, line: int) -> Any:
        path = self._path()
        key = bool(self.stack) and isinstance(self.stack[-1].container, dict) and not self.stack[-1].has_key
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in self.anchors:
                raise self.fail(line, path, f"alias *{event.anchor[:40]} names no anchor")
            value, size = self.anchors[event.anchor]
            self._count(size, line, path)
            return value
        if event.anchor is not None and not self.limits.aliases:
            raise self.fail(
                line, path, f"anchors and aliases (&name, *name) are not allowed in a {self.what}", "write values out"
            )
        self._count(1, line, path)
        if not key:
            self.lines[path] = line
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
            if event.tag not in (None, "!", f"{_YAML}{kind}"):
                raise self.fail(line, path, f"tag {_short(event.tag)} is not allowed", "remove it")
            if len(self.stack) >= self.limits.max_depth:
                raise self.fail(line, path, f"nested deeper than {self.limits.max_depth} levels")
            if key:
                raise self.fail(line, path, "a mapping key must be a plain value, not a list or mapping")
            container: dict[Any, Any] | list[Any] = [] if kind == "seq" else {}
            self.stack.append(_Frame(container, path, event.anchor, self.nodes - 1))
            return _OPEN
        value = self._scalar(loader, event, line, path)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        return value

    def _scalar(self, loader: Any, event: Any, line: int, path: tuple[Any, ...]) -> Any:
        text = event.value
        secret = is_secret(path)
        shown = "(hidden)" if secret else excerpt(text)
        if len(text) > self.limits.max_string:
            raise self.fail(
                line, path, f"a string of {len(text):,} characters, over the {self.limits.max_string:,} limit: {shown}"
            )
        if secret:  # a file's secrets are known before any message could quote them
            register_secret(text)
        elif "://" in text or "=" in text:
            register_text(text)  # a URL's password, a DSN's password=
        tag = event.tag
        if tag in self.limits.string_tags:
            return text
        if tag is None or tag == "!":
            tag = loader.resolve(ScalarNode, text, event.implicit)
        if tag in _PLAIN_TAGS:  # '<<' and '=' mean nothing special here: a key named so is checked as any other
            return text
        if tag not in _SCALAR_TAGS and not (tag == f"{_YAML}timestamp" and event.tag is None):
            raise self.fail(line, path, f"tag {_short(tag)} is not allowed", "only plain values, lists, mappings")
        try:
            return loader.yaml_constructors[tag](loader, ScalarNode(tag, text, event.start_mark, event.end_mark))
        except (ValueError, OverflowError, yaml.YAMLError):
            raise self.fail(line, path, f"cannot read {shown} as {_short(tag)}") from None

    def _attach(self, value: Any, line: int) -> None:
        top = self.stack[-1]
        if len(top.container) >= self.limits.max_items and (isinstance(top.container, list) or not top.has_key):
            raise self.fail(line, top.path, f"holds more than {self.limits.max_items:,} entries")
        if isinstance(top.container, list):
            top.container.append(value)
            return
        if not top.has_key:
            if isinstance(value, (list, dict)):
                raise self.fail(line, top.path, "a mapping key must be a plain value, not a list or mapping")
            if self.limits.string_keys and not isinstance(value, str):
                raise self.fail(line, top.path, f"key {excerpt(value, 60)} is not a name", "write names as text")
            if value in top.container:
                first = self.lines.get((*top.path, value, "__key__"), "?")
                raise self.fail(line, (*top.path, value), f"duplicate key {excerpt(value, 60)} (first at line {first})")
            top.key, top.has_key = value, True
            self.lines[(*top.path, value, "__key__")] = line
            return
        top.container[top.key] = value
        top.has_key = False


_OPEN = object()  # a collection just started: its value comes with its end event
