"""The campaign spec: a YAML file, validated with errors that name file, line and field.

Why strict: a typo in a spec (``step: 100``) silently falling back to a
default would waste a night of benchmarks. Every unknown field is an error
with a suggestion, every value is checked before anything is provisioned.

Shape (docs/campaigns.md has the full reference)::

    name: demo
    inventory: testbed:dlinfra          # a path (relative to this file) or testbed:NAME
    layers: [bm]
    repeats: 1
    warmup_steps: 5
    steps: 20
    cell_timeout: 300
    matrix: {batch_size: [64], mode: [single]}      # defaults for every workload
    workloads:
      - mnist-dnn                                   # a name, or a mapping:
      - {name: mnist-dnn, hosts: [h1, h2], matrix: {mode: [ps-async], ps: [1], workers: [2]}}
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dlinfra.errors import SpecError
from dlinfra.record import LAYERS

TOP_FIELDS = {
    "name": "campaign name (letters, digits, '-', '_', '.')",
    "description": "free text",
    "inventory": "Ansible inventory path (relative to the spec) or testbed:NAME",
    "layers": f"list of layers to measure: {', '.join(LAYERS)}",
    "workloads": "list of workload names or {name, hosts, matrix} mappings",
    "matrix": "parameter lists crossed into cells, for every workload",
    "repeats": "runs per cell (>= 1)",
    "warmup_steps": "steps before timing starts (>= 0)",
    "steps": "measured steps (>= 1)",
    "cell_timeout": "seconds one cell may take, all processes (> 0)",
    "peer_timeout": "seconds a distributed process waits for a silent peer",
    "layer_options": "per-layer provider options, e.g. {vm: {vcpus: 2}}",
}
WORKLOAD_FIELDS = {"name", "workload", "hosts", "layers", "matrix"}
MATRIX_KEYS = {
    "batch_size": int,
    "mode": str,
    "ps": int,
    "workers": int,
    "placement": str,
    "data": str,
    "learning_rate": float,
    "target_accuracy": float,
    "image_size": int,
    "num_classes": int,
    "size": str,
    "cell": str,
    "threads": int,
    "time": int,
    "file_total_size": str,
}
MODES = ("single", "ps-async", "sync")
PLACEMENTS = ("spread", "pack")
DEFAULT_MATRIX: dict[str, list[Any]] = {"mode": ["single"], "placement": ["spread"], "data": ["synthetic"]}


@dataclass
class WorkloadSpec:
    name: str
    on: list[str]
    matrix: dict[str, list[Any]]
    line: int
    #: The campaign layers this workload runs on (default: all of them).
    layers: list[str] | None = None


@dataclass
class CampaignSpec:
    path: Path
    name: str
    inventory: str
    layers: list[str]
    workloads: list[WorkloadSpec]
    repeats: int = 1
    warmup_steps: int = 10
    steps: int = 100
    cell_timeout: float = 600.0
    peer_timeout: float | None = None
    layer_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def inventory_path(self, override: str | None = None) -> Path:
        """The inventory file: --inventory, else the spec's (relative to the spec file, or testbed:NAME)."""
        value = override or self.inventory
        if not value:
            raise SpecError(f"{self.path}: field 'inventory' is missing", "add it, or pass --inventory")
        if value.startswith("testbed:"):
            from dlinfra.testbed.local import testbed_inventory

            return testbed_inventory(value.split(":", 1)[1])
        path = Path(value).expanduser()
        if not path.is_absolute() and not override:
            path = self.path.parent / path
        return path


class _Lines:
    """YAML node marks by path, so errors can name the line of the field at fault."""

    def __init__(self, node: yaml.Node | None) -> None:
        self.lines: dict[tuple[Any, ...], int] = {}
        if node is not None:
            self._walk(node, ())

    def _walk(self, node: yaml.Node, path: tuple[Any, ...]) -> None:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                k = key.value
                self.lines[(*path, k, "__key__")] = key.start_mark.line + 1
                self._walk(value, (*path, k))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, (*path, i))

    def at(self, *path: Any) -> int:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


class _Checker:
    def __init__(self, path: Path, lines: _Lines) -> None:
        self.path = path
        self.lines = lines

    def fail(self, where: tuple[Any, ...], message: str, hint: str | None = None) -> SpecError:
        dotted = ".".join(str(p) for p in where if p != "__key__") or "(top)"
        return SpecError(f"{self.path}:{self.lines.at(*where)}: {dotted}: {message}", hint)

    def unknown(self, where: tuple[Any, ...], key: str, known: list[str] | set[str]) -> SpecError:
        close = difflib.get_close_matches(str(key), sorted(known), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(sorted(known))}"
        return self.fail((*where, key, "__key__"), f"unknown field '{key}'", hint)

    def integer(self, value: Any, where: tuple[Any, ...], minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(where, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, value: Any, where: tuple[Any, ...]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.fail(where, f"must be a number > 0, got {value!r}")
        return float(value)


def _workload_ids() -> dict[str, str]:
    from dlinfra.payload.workloads import WORKLOADS

    return {name: w.kind for name, w in WORKLOADS.items()}


def _matrix(check: _Checker, value: Any, where: tuple[Any, ...]) -> dict[str, list[Any]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise check.fail(where, "must be a mapping of parameter -> list of values")
    out: dict[str, list[Any]] = {}
    for key, raw in value.items():
        if key not in MATRIX_KEYS:
            raise check.unknown(where, key, set(MATRIX_KEYS))
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise check.fail((*where, key), "must list at least one value")
        kind = MATRIX_KEYS[key]
        for i, v in enumerate(values):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float else isinstance(v, kind)
            if kind is int and isinstance(v, bool):
                ok = False
            if not ok:
                raise check.fail((*where, key, i), f"must be {kind.__name__}, got {v!r}")
            if key == "mode" and v not in MODES:
                raise check.fail((*where, key, i), f"mode {v!r} is not one of {', '.join(MODES)}")
            if key == "placement" and v not in PLACEMENTS:
                raise check.fail((*where, key, i), f"placement {v!r} is not one of {', '.join(PLACEMENTS)}")
            if key in ("batch_size", "workers", "threads", "time", "image_size", "num_classes") and v < 1:
                raise check.fail((*where, key, i), f"must be >= 1, got {v}")
            if key == "ps" and v < 0:
                raise check.fail((*where, key, i), f"must be >= 0, got {v}")
        out[key] = list(values)
    return out


def load_spec(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign spec; any problem is a SpecError naming file, line and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(f"campaign spec {path} does not exist") from None
    except OSError as exc:
        raise SpecError(f"campaign spec {path} cannot be read: {exc.strerror}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{path}{line}: not valid YAML: {problem}") from None
    check = _Checker(path, _Lines(node))
    if not isinstance(data, dict):
        raise check.fail((), "a campaign spec must be a YAML mapping")
    for key in data:
        if key not in TOP_FIELDS:
            raise check.unknown((), key, set(TOP_FIELDS))
    for required in ("name", "workloads"):
        if required not in data:
            raise check.fail((), f"field '{required}' is missing ({TOP_FIELDS[required]})")
    name = data["name"]
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise check.fail(("name",), f"must be letters, digits, '-', '_' or '.', got {name!r}")
    inventory = data.get("inventory", "")
    if not isinstance(inventory, str):
        raise check.fail(("inventory",), "must be a path or testbed:NAME")
    layers = data.get("layers", ["bm"])
    layers = layers if isinstance(layers, list) else [layers]
    for i, layer in enumerate(layers):
        if layer not in LAYERS:
            close = difflib.get_close_matches(str(layer), LAYERS, n=1)
            raise check.fail(
                ("layers", i), f"unknown layer {layer!r}", f"did you mean '{close[0]}'?" if close else None
            )
    base = _matrix(check, data.get("matrix"), ("matrix",))
    known = _workload_ids()
    raw_workloads = data["workloads"]
    if not isinstance(raw_workloads, list) or not raw_workloads:
        raise check.fail(("workloads",), "must be a non-empty list")
    workloads: list[WorkloadSpec] = []
    for i, item in enumerate(raw_workloads):
        where: tuple[Any, ...] = ("workloads", i)
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise check.fail(where, "must be a workload name or a mapping with 'name'")
        for key in item:
            if key not in WORKLOAD_FIELDS:
                raise check.unknown(where, key, WORKLOAD_FIELDS)
        wname = item.get("name", item.get("workload"))
        if wname not in known:
            close = difflib.get_close_matches(str(wname), list(known), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
            raise check.fail((*where, "name") if "name" in item else where, f"unknown workload {wname!r}", hint)
        on = item.get("hosts", [])
        on = on if isinstance(on, list) else [on]
        if not all(isinstance(h, str) for h in on):
            raise check.fail((*where, "hosts"), "must list host or group names")
        matrix = {**DEFAULT_MATRIX, **base, **_matrix(check, item.get("matrix"), (*where, "matrix"))}
        if known[wname] != "model":
            bad = [m for m in matrix["mode"] if m != "single"]
            if bad:
                raise check.fail(
                    (*where, "matrix", "mode"), f"{wname} is a {known[wname]}: it runs in mode single only"
                )
        only = item.get("layers")
        if only is not None:
            only = only if isinstance(only, list) else [only]
            stray = [x for x in only if x not in layers]
            if stray or not only:
                raise check.fail(
                    (*where, "layers"), f"must list layers of the campaign, got {only!r}", f"campaign layers: {layers}"
                )
        workloads.append(WorkloadSpec(name=wname, on=on, matrix=matrix, line=check.lines.at(*where), layers=only))
    spec = CampaignSpec(
        path=path,
        name=name,
        inventory=inventory,
        layers=list(layers),
        workloads=workloads,
        raw=data,
    )
    if "repeats" in data:
        spec.repeats = check.integer(data["repeats"], ("repeats",), 1)
    if "warmup_steps" in data:
        spec.warmup_steps = check.integer(data["warmup_steps"], ("warmup_steps",), 0)
    if "steps" in data:
        spec.steps = check.integer(data["steps"], ("steps",), 1)
    if "cell_timeout" in data:
        spec.cell_timeout = check.number(data["cell_timeout"], ("cell_timeout",))
    if "peer_timeout" in data:
        spec.peer_timeout = check.number(data["peer_timeout"], ("peer_timeout",))
    options = data.get("layer_options", {}) or {}
    if not isinstance(options, dict) or any(k not in LAYERS or not isinstance(v, dict) for k, v in options.items()):
        raise check.fail(("layer_options",), "must map a layer id to a mapping of options")
    spec.layer_options = options
    return spec
