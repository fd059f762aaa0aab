"""The seed campaigns (campaigns/seed-00N.yml): each loads, every ``dlinfra run`` line of its header comment
(the local run, the study-scale run and any second run it names) passes ``--dry-run`` through the real CLI
and touches nothing, and every published figure (or, for 001, stated verdict) of each seed that dlinfra can
produce has planned cells that the report's matching (dlinfra/report/seeds.py) will find, in the local run or
in one of the header's runs. The figures no run of the file can produce are listed below, with the reason.

Fast: no testbed, no host; inventories are written to a tmp folder (a cluster of 17 hosts with 48 CPUs
and every layer, for the study-scale lines).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from support import REPO

from dlinfra.orchestration.campaign import planned_cells
from dlinfra.orchestration.cells import Cell
from dlinfra.orchestration.plan import preflight
from dlinfra.orchestration.spec import load_spec
from dlinfra.report import seeds
from dlinfra.report.frame import PS_KEYS, WORKER_KEYS, config_label, report_config
from dlinfra.report.views import SCENARIO_KEYS

SEEDS = ("000", "001", "002", "003", "004")
EXAMPLE_INVENTORY = REPO / "inventory" / "local-testbed.example.yml"

#: Figures that no run of the seed's file can produce, and why; and those its local run (3 testbed hosts of 2 CPUs)
#: cannot, which a run its header names does. seed_figures.json says so (the report shows it beside the dash);
#: everything else must be matched by the local run.
_FIGURES = {seed: d["figures"] for seed, d in seeds.load_figures().items() if seed in SEEDS}
CANNOT = {seed: {f["id"]: f["cannot"] for f in figs if "cannot" in f} for seed, figs in _FIGURES.items()}
NOT_LOCAL = {seed: {f["id"]: f["not_local"] for f in figs if "not_local" in f} for seed, figs in _FIGURES.items()}


def _write_inventory(path: Path, hosts: int, cpus: str, all_layers: bool) -> Path:
    base = yaml.safe_load(EXAMPLE_INVENTORY.read_text())
    first = base["all"]["children"]["testbed_dlinfra"]["hosts"]["dlinfra-h1"]
    out: dict[str, Any] = {}
    for i in range(1, hosts + 1):
        host = {k: v for k, v in first.items() if i == 1 or k not in ("dlinfra_layers", "dlinfra_libvirt_uri")}
        host.update(
            ansible_host=f"10.213.47.{i + 1}",
            dlinfra_netns=f"dli-dlinfra-h{i}",
            dlinfra_home=first["dlinfra_home"].replace("dlinfra-h1", f"dlinfra-h{i}"),
            dlinfra_cpus=cpus,
        )
        if all_layers:
            host.update(dlinfra_layers=["bm", "ctr", "vm", "ctr-vm"], dlinfra_libvirt_uri="qemu:///system")
        out[f"dlinfra-h{i}"] = host
    base["all"]["children"]["testbed_dlinfra"]["hosts"] = out
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("inventories")
    return {
        "local": EXAMPLE_INVENTORY,  # every seed runs on 'dlinfra testbed up --local --hosts 3' (001: 1 is enough)
        "cluster": _write_inventory(folder / "cluster.yml", 17, "0-47", all_layers=True),
    }


def _header_runs(seed: str) -> list[list[str]]:
    """Every 'dlinfra run ...' command of the file's header comment, as argv after 'dlinfra run'."""
    lines = []
    for line in (REPO / "campaigns" / f"seed-{seed}.yml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    commands, current = [], ""
    for text in lines:
        if current:
            current += " " + text
        elif text.startswith("dlinfra run "):
            current = text
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1]
            continue
        commands.append(shlex.split(current, comments=True)[2:])
        current = ""
    return commands


def _with_inventory(argv: list[str], inventories: dict[str, Path]) -> list[str]:
    if "--inventory" not in argv:
        return [*argv, "--inventory", str(inventories["local"])]
    i = argv.index("--inventory")
    assert argv[i + 1] == "inventory/cluster.yml", argv
    return [*argv[: i + 1], str(inventories["cluster"]), *argv[i + 2 :]]


def _overrides(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]


def _plan(argv: list[str]) -> list[Cell]:
    layers = [argv[i + 1] for i, a in enumerate(argv) if a == "--layer"] or None
    inventory = argv[argv.index("--inventory") + 1]
    checked = preflight(REPO / argv[0], layers=layers, inventory=inventory, overrides=_overrides(argv))
    return planned_cells(checked)


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_campaign_loads_and_names_its_runs(seed: str) -> None:
    spec = load_spec(REPO / "campaigns" / f"seed-{seed}.yml")
    assert spec.name == f"seed-{seed}"
    text = (REPO / "campaigns" / f"seed-{seed}.yml").read_text()
    assert f"dlinfra report --campaign latest --compare-seed {seed}" in text
    assert "inventory: testbed:dlinfra" in text
    runs = _header_runs(seed)
    assert runs[0] == [f"campaigns/seed-{seed}.yml"], "the first command is the local run, as is"
    assert any("--inventory" in argv for argv in runs), "a study-scale command line"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_header_run_dry_runs_through_the_cli(seed: str, inventories: dict[str, Path], tmp_path: Path) -> None:
    for argv in _header_runs(seed):
        argv = _with_inventory(argv, inventories)
        result = subprocess.run(
            [sys.executable, "-m", "dlinfra", "run", str(REPO / argv[0]), *argv[1:], "--dry-run"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "250"},
        )
        assert result.returncode == 0, f"{argv}: {result.stderr}"
        assert re.search(r"\d+ cell\(s\) x \d+ repeat\(s\)", result.stdout), result.stdout[-500:]
        assert "nothing was built, provisioned or stored" in result.stdout
        assert list(tmp_path.iterdir()) == [], "a dry run leaves no store and no artifacts folder"


# -- the report's matching, on planned cells -------------------------------------------------------------


def _select(cells: list[Cell], match: dict[str, Any]) -> list[Cell]:
    if not cells:
        return []
    frame = pd.DataFrame({"config": [c.config for c in cells]})
    return [cells[i] for i in seeds.select(frame, match).index]


def _roles(cell: Cell) -> set[str]:
    mode = cell.config["mode"]
    if mode == "single":
        return {"single"}
    roles = {"worker"} | ({"ps"} if int(cell.config.get("ps", 0)) > 0 else set())
    return roles | ({"chief"} if mode == "ps-async" else set())


def _key(cell: Cell, drop: tuple[str, ...] = ()) -> tuple[str, str, str]:
    return (cell.workload, cell.layer, config_label(report_config(cell.config), drop=drop))


def satisfied(fig: dict[str, Any], cells: list[Cell]) -> bool:
    """Whether the planned ``cells`` give the report what it needs to compute ``fig`` (seeds.campaign_value)."""
    kind, match = fig["kind"], dict(fig["match"])
    if "layer" in fig and kind not in ("overhead_pct", "verdict"):
        match["layer"] = fig["layer"]
    chosen = _select(cells, match)
    if kind in ("overhead_pct", "verdict"):  # the figure's layer and the bm baseline, same config but provider
        # (the report's config_label keeps 'provider', so today it never pairs ssh rows with docker or libvirt
        # rows; the cells are what they must be, and the check is on them, not on that grouping)
        mine = {_key(c, ("provider",))[::2] for c in chosen if c.layer == fig["layer"]}
        return any(_key(c, ("provider",))[::2] in mine for c in chosen if c.layer == "bm")
    if kind in ("metric", "best_runtime", "worst_runtime"):
        return bool(chosen)
    if kind in ("best_over_single", "speedup"):
        base_match = dict(fig["base_match"], **({"layer": fig["layer"]} if "layer" in fig else {}))
        return bool(chosen) and bool(_select(cells, base_match))
    if kind == "series":  # a node that ran the role
        return any(fig["role"] in _roles(c) for c in chosen)
    if kind == "efficiency_pct":  # scaling view: a 1-worker (else single) base of the same config
        bases = {_key(c, WORKER_KEYS) for c in cells if c.config["mode"] != "single" and c.config["workers"] == 1}
        singles = {_key(c, (*WORKER_KEYS, *PS_KEYS, "mode")) for c in cells if c.config["mode"] == "single"}
        return any(
            _key(c, WORKER_KEYS) in bases or _key(c, (*WORKER_KEYS, *PS_KEYS, "mode")) in singles
            for c in chosen
            if c.config["mode"] != "single"
        )
    if kind == "ps_effect_pct":  # ps view: a smaller ps count, otherwise the same config
        return any(
            _key(o, PS_KEYS) == _key(c, PS_KEYS) and int(o.config.get("ps", 0)) < int(c.config["ps"])
            for c in chosen
            for o in cells
        )
    if kind == "tta_ratio":  # sync vs ps-async, otherwise equal, both with a target accuracy
        timed = [c for c in chosen if "target_accuracy" in c.config]
        sync = {_key(c, ("mode", *PS_KEYS)) for c in timed if c.config["mode"] == "sync"}
        return any(_key(c, ("mode", *PS_KEYS)) in sync for c in timed if c.config["mode"] == "ps-async")
    if kind == "degradation_pct":  # shared view: a shared cell and the same cell alone
        alone = {_key(c, SCENARIO_KEYS) for c in chosen if c.config.get("scenario") == "alone"}
        return any(_key(c, SCENARIO_KEYS) in alone for c in chosen if c.config.get("scenario") == "shared")
    raise AssertionError(f"figure {fig['id']}: unknown kind {kind}")


@pytest.mark.parametrize("seed", SEEDS)
def test_every_producible_figure_has_matching_planned_cells(seed: str, inventories: dict[str, Path]) -> None:
    figures = {f["id"]: f for f in seeds.load_figures()[seed]["figures"]}
    runs = [_with_inventory(argv, inventories) for argv in _header_runs(seed)]
    local, others = _plan(runs[0]), [_plan(argv) for argv in runs[1:]]
    for fid, fig in figures.items():
        in_local = satisfied(fig, local)
        anywhere = in_local or any(satisfied(fig, cells) for cells in others)
        if fid in CANNOT.get(seed, {}):
            assert not anywhere, (
                f"{fid} has a reason it cannot be produced, but some run produces it: update seed_figures.json"
            )
        elif fid in NOT_LOCAL.get(seed, {}):
            assert not in_local, f"{fid} is marked not_local, but the local run produces it: update seed_figures.json"
            assert anywhere, f"{fid}: no run named in the header of seed-{seed}.yml produces it"
        else:
            assert in_local, f"{fid}: the local run of seed-{seed}.yml plans no cell its match finds"
