"""The workload-parameter table (dlinfra.payload.params) is the one list: the payload CLI, a campaign spec, the
launcher and ``dlinfra bench`` each accept every entry, alike, and nothing else beyond their own few flags."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import click
import pytest
from support import REPO

from dlinfra.cli.bench_cmd import bench, payload_args
from dlinfra.errors import DlinfraError, SpecError
from dlinfra.orchestration.cells import Cell, expand, plan
from dlinfra.orchestration.launch import Launcher
from dlinfra.orchestration.spec import CELL_KEYS, MATRIX_KEYS, TOP_FIELDS, load_spec
from dlinfra.payload import cli
from dlinfra.payload.params import PARAM, PARAMS, Param
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.record import config_hash
from dlinfra.target import Target

#: The payload's own flags beyond the table: what to run, placement and cluster (set by the launcher), output.
PAYLOAD_ONLY = {
    "-h", "--help", "--workload", "--mode", "--cpus", "--chief", "--workers", "--ps", "--role", "--task-index",
    "--control-port", "--peer-timeout", "--context-json", "--out", "--echo-record", "--ready-file",
}  # fmt: skip
#: ``dlinfra bench``'s own options beyond the table.
BENCH_ONLY = {"--cpus", "--repeats", "--timeout"}


def _targets() -> list[Target]:
    return [Target(layer="bm", name="h1", physical_host="h1", address="10.0.0.1", cpu_set=[0, 1, 2, 3])]


def _spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.yml"
    path.write_text("name: c\ninventory: hosts.yml\n" + body)
    return path


def _workload_for(param: Param) -> str:
    return next(name for name, w in WORKLOADS.items() if param.applies_to(name, w.kind))


def _run_options() -> dict[str, argparse.Action]:
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {opt: action for action in sub.choices["run"]._actions for opt in action.option_strings}


def _payload_parses(argv: list[str]) -> argparse.Namespace:
    """What the payload makes of a command line (after ``python -m dlinfra.payload``)."""
    return cli.parser().parse_args(argv)


def _cell_argv(tmp_path: Path, body: str) -> tuple[Cell, list[str]]:
    spec = load_spec(_spec(tmp_path, body))
    (cell,) = expand(spec, {"bm": _targets()})
    (process,) = plan(cell, {"h1": _targets()[0]})
    argv = Launcher("c", settings=spec.settings())._argv(cell, 0, process, "run-dir", None)
    assert argv[1:3] == ["-m", "dlinfra.payload"]
    return cell, argv[3:]


def _after(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, argv
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("param", PARAMS, ids=lambda p: p.name)
def test_every_parameter_is_accepted_by_the_payload_the_spec_the_launcher_and_bench(
    tmp_path: Path, param: Param
) -> None:
    workload, text = _workload_for(param), str(param.example)
    # The payload CLI.
    args = _payload_parses(["run", "--workload", workload, param.flag, text])
    assert getattr(args, param.name) == param.example
    # The spec, then the launcher's argv from the cell, which the payload reads back.
    if param.hashed:
        body = f"workloads:\n  - {{name: {workload}, matrix: {{{param.name}: [{json.dumps(param.example)}]}}}}\n"
    else:
        body = f"{param.name}: {json.dumps(param.example)}\nworkloads: [{workload}]\n"
    cell, argv = _cell_argv(tmp_path, body)
    assert (cell.config.get(param.name) == param.example) is param.hashed
    assert _after(argv, param.flag) == text
    assert getattr(_payload_parses(argv), param.name) == param.example
    if param.campaign:  # set for every cell at the top level, too
        cell, argv = _cell_argv(tmp_path, f"{param.name}: {json.dumps(param.example)}\nworkloads: [{workload}]\n")
        assert _after(argv, param.flag) == text
    # dlinfra bench: the option, then what it passes to the payload and keeps in its cell config.
    ctx = bench.make_context("bench", [workload, param.flag, text])
    assert ctx.params[param.name] == param.example
    options = {k: v for k, v in ctx.params.items() if k not in ("repeats", "timeout")}
    flags, config = payload_args(workload, options)
    assert _after(flags, param.flag) == text and (param.name in config) is param.hashed
    assert getattr(_payload_parses(["run", "--workload", workload, *flags]), param.name) == param.example


def test_no_surface_has_a_parameter_the_table_lacks() -> None:
    """A fifth list cannot grow: each surface's options are the table's plus its own, named here."""
    table = {p.flag for p in PARAMS}
    assert set(_run_options()) == table | PAYLOAD_ONLY
    bench_flags = {o for opt in bench.params if isinstance(opt, click.Option) for o in opt.opts}
    assert bench_flags == table | BENCH_ONLY
    assert set(MATRIX_KEYS) == set(CELL_KEYS) | {p.name for p in PARAMS if p.hashed}
    assert {p.name for p in PARAMS if p.campaign} <= set(TOP_FIELDS)
    for p in PARAMS:  # the payload's defaults are the table's
        assert _run_options()[p.flag].default == p.default, p.name
        assert p.problem(p.example) is None and (p.default is None or p.problem(p.default) is None), p.name
        assert set(p.workloads) <= set(WORKLOADS) and set(p.kinds) <= {w.kind for w in WORKLOADS.values()}


def test_stride_set_in_a_spec_reaches_the_payload(tmp_path: Path) -> None:
    cell, argv = _cell_argv(tmp_path, "workloads:\n  - {name: conv, matrix: {stride: [2], size: ['8x8x4x2x6x3x3']}}\n")
    assert cell.config["stride"] == 2
    assert _after(argv, "--stride") == "2" and _after(argv, "--size") == "8x8x4x2x6x3x3"
    args = _payload_parses(argv)
    assert (args.workload, args.stride, args.size) == ("conv", 2, "8x8x4x2x6x3x3")


def test_a_bad_value_is_refused_alike_and_named(tmp_path: Path) -> None:
    message = "must be an integer >= 1 and <= 4,096, got"
    with pytest.raises(SpecError, match=rf"c.yml:\d+: workloads.0.matrix.stride.0: {message} 0"):
        load_spec(_spec(tmp_path, "workloads:\n  - {name: conv, matrix: {stride: [0]}}\n"))
    with pytest.raises(SystemExit):
        _payload_parses(["run", "--workload", "conv", "--stride", "0"])
    with pytest.raises(click.BadParameter, match=f"{message} '0'"):
        bench.make_context("bench", ["conv", "--stride", "0"])
    with pytest.raises(SpecError, match=r"matrix.cell.0: must be one of vanilla, lstm, gru, got 'gruu'"):
        load_spec(_spec(tmp_path, "workloads:\n  - {name: rnn, matrix: {cell: [gruu]}}\n"))
    with pytest.raises(SpecError, match=r"^[^\n]*c.yml:3: steps: must be an integer >= 1"):
        load_spec(_spec(tmp_path, "steps: 0\nworkloads: [mnist-dnn]\n"))


def test_a_parameter_the_workload_does_not_read_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"workloads.0.matrix.stride: stride does not apply to gemm") as err:
        load_spec(_spec(tmp_path, "workloads:\n  - {name: gemm, matrix: {stride: [2]}}\n"))
    assert err.value.hint == "it applies to conv"
    with pytest.raises(DlinfraError, match="--stride does not apply to gemm"):
        payload_args("gemm", {"stride": 2})
    # A campaign-wide matrix sets a key for every workload; those that do not read it ignore it, as before.
    spec = load_spec(_spec(tmp_path, "matrix: {batch_size: [8]}\nworkloads: [mnist-dnn, gemm]\n"))
    assert [c.config["batch_size"] for c in expand(spec, {"bm": _targets()})] == [8, 8]


def test_an_unhashed_parameter_is_a_campaign_setting_outside_the_config(tmp_path: Path) -> None:
    assert not PARAM["log_every"].hashed
    cell, argv = _cell_argv(tmp_path, "log_every: 5\nworkloads: [mnist-dnn]\n")
    assert "log_every" not in cell.config and _after(argv, "--log-every") == "5"
    with pytest.raises(SpecError, match="log_every is a campaign setting, not a matrix key"):
        load_spec(_spec(tmp_path, "workloads:\n  - {name: mnist-dnn, matrix: {log_every: [5]}}\n"))
    flags, config = payload_args("mnist-dnn", {"log_every": 5, "steps": 3})
    assert _after(flags, "--log-every") == "5" and config == {"workload": "mnist-dnn", "mode": "single", "steps": 3}


#: Cells and their hashes as the code before the parameter table expanded this spec: stored campaigns must be
#: found again by ``--resume`` (same inputs, same config, same hash).
GOLDEN_SPEC = """\
warmup_steps: 2
steps: 7
matrix: {batch_size: [32]}
workloads:
  - mnist-dnn
  - {name: mnist-dnn, matrix: {mode: [ps-async], ps: [1], workers: [2], learning_rate: [0.5]}}
  - {name: gemm, matrix: {size: ['64x32x48']}}
  - {name: rnn, matrix: {cell: [gru], size: ['16x4x5']}}
  - {name: sysbench-fileio, matrix: {time: [3], threads: [2], file_total_size: [8M]}}
  - {name: resnet50, matrix: {image_size: [32], num_classes: [10], target_accuracy: [0.5]}}
"""
GOLDEN_HASHES = [
    "f14ee3cea28bbc46",
    "5c107a4795aae9c1",
    "10f07c6f0778cb46",
    "c394fa167e6ef53e",
    "93ffdb7c421f14b8",
    "7629ee194062941c",
]


def test_cell_config_hashes_are_those_of_before_the_table(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, GOLDEN_SPEC))
    targets = [
        Target(layer="bm", name=f"h{i}", physical_host=f"h{i}", address=f"10.0.0.{i}", cpu_set=[0, 1, 2, 3])
        for i in (1, 2, 3)
    ]
    cells = expand(spec, {"bm": targets})
    # The provider joined the config (the same workload through two providers is two cells); everything
    # else hashes as before the table.
    assert {c.config["provider"] for c in cells} == {"ssh"}
    before = [{k: v for k, v in c.config.items() if k != "provider"} for c in cells]
    assert [config_hash(c) for c in before if c.get("host", "h1") == "h1"] == GOLDEN_HASHES
    assert [c.hash for c in cells] == [config_hash(c.config) for c in cells]
    assert before[0] == {
        "layer": "bm", "workload": "mnist-dnn", "mode": "single", "host": "h1", "batch_size": 32,
        "data": "synthetic", "warmup_steps": 2, "steps": 7,
    }  # fmt: skip


def test_bench_cell_configs_keep_their_keys() -> None:
    flags, config = payload_args("mnist-dnn", {"batch_size": 8, "steps": 5, "cpus": "0-1", "seed": None})
    assert config == {"workload": "mnist-dnn", "mode": "single", "batch_size": 8, "steps": 5, "cpus": "0-1"}
    assert flags == ["--steps", "5", "--batch-size", "8", "--cpus", "0-1"]


def doc_table() -> str:
    """The parameter table of docs/payload.md, as the table says it should read."""
    rows = [
        "| parameter | flag | type | default | applies to | values | in a spec | in the cell config (hash) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in PARAMS:
        if p.choices:
            values = ", ".join(p.choices)
        elif p.type is int:
            values = f"{p.low:g} to {p.high:,.0f}"
        elif p.type is float:
            values = f"> {p.low:g} and <= {p.high:,g}"
        else:
            values = p.shape.replace("|", "\\|").replace("`", "&#96;")
        default = p.default_text or ("-" if p.default is None else f"`{p.default}`")
        where = "top level" if not p.hashed else "matrix, top level" if p.campaign else "matrix"
        config = "no" if not p.hashed else "always (top level, else default)" if p.campaign else "when set"
        row = [f"`{p.name}`", f"`{p.flag}`", p.type.__name__, default, p.scope(), values, where, config]
        rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows)


def test_the_docs_show_the_table() -> None:
    text = (REPO / "docs" / "payload.md").read_text()
    m = re.search(r"<!-- params:begin -->\n(.*?)\n<!-- params:end -->", text, re.S)
    assert m is not None, "docs/payload.md lost its parameter table markers"
    assert m.group(1) == doc_table(), "docs/payload.md's parameter table is stale; it should read:\n" + doc_table()
