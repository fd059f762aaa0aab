"""Matrices with zip and exclude, expectations in the spec, and the run order against drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlinfra.errors import SpecError
from dlinfra.orchestration.cells import expand, run_order
from dlinfra.orchestration.spec import load_spec
from dlinfra.target import Target


def _targets(n: int = 1) -> list[Target]:
    return [
        Target(layer="bm", name=f"h{i}", physical_host=f"h{i}", address=f"10.0.0.{i}", cpu_set=[0, 1])
        for i in range(1, n + 1)
    ]


def _spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.yml"
    path.write_text("name: c\ninventory: hosts.yml\nsteps: 3\nwarmup_steps: 1\n" + body)
    return path


def _points(tmp_path: Path, body: str) -> set[tuple]:
    spec = load_spec(_spec(tmp_path, body))
    cells = expand(spec, {"bm": _targets()})
    return {(c.config["batch_size"], c.config["learning_rate"], c.config["seed"]) for c in cells}


def test_zip_varies_together_and_crosses_the_rest(tmp_path: Path) -> None:
    points = _points(
        tmp_path,
        "matrix:\n  seed: [1, 2]\n  zip: {batch_size: [32, 64, 128], learning_rate: [0.1, 0.2, 0.4]}\n"
        "workloads: [mnist-dnn]\n",
    )
    assert points == {(b, lr, s) for (b, lr) in ((32, 0.1), (64, 0.2), (128, 0.4)) for s in (1, 2)}


def test_exclude_skips_exactly_its_combinations(tmp_path: Path) -> None:
    points = _points(
        tmp_path,
        "matrix:\n  seed: [1, 2]\n  zip: {batch_size: [32, 64, 128], learning_rate: [0.1, 0.2, 0.4]}\n"
        "  exclude:\n    - {batch_size: 128, seed: 2}\n    - {learning_rate: [0.1, 0.2], seed: 1}\n"
        "workloads: [mnist-dnn]\n",
    )
    assert points == {(32, 0.1, 2), (64, 0.2, 2), (128, 0.4, 1)}


def test_workload_matrix_overrides_a_zipped_key_and_adds_exclusions(tmp_path: Path) -> None:
    body = (
        "matrix:\n  zip: {batch_size: [32, 64], learning_rate: [0.1, 0.2], seed: [1, 2]}\n"
        "workloads:\n  - {name: mnist-dnn, matrix: {seed: [7, 8], exclude: [{batch_size: 64, seed: 8}]}}\n"
    )
    assert _points(tmp_path, body) == {(32, 0.1, 7), (32, 0.1, 8), (64, 0.2, 7)}


@pytest.mark.parametrize(
    ("matrix", "error"),
    [
        ("zip: {batch_size: [32, 64], learning_rate: [0.1]}", r"c.yml:6: matrix.zip.learning_rate: lists 1 value"),
        ("zip: {batch_size: [32, 64]}", r"c.yml:6: matrix.zip: must map two or more"),
        ("batch_size: [8]\n  zip: {batch_size: [32], seed: [1]}", r"matrix.zip.batch_size: .*both zipped and crossed"),
        ("zip: {batch_sise: [32], seed: [1]}", r"unknown field 'batch_sise'.*did you mean 'batch_size'"),
        ("exclude: [{batch_size: 8}]", r"c.yml:6: matrix.exclude.0: excludes no point of any workload"),
        ("exclude: [{bogus: 8}]", r"matrix.exclude.0.*unknown field 'bogus'"),
        ("batch_size: [8]\n  exclude: [{batch_size: 8}]", r"matrix: exclude leaves no cell to run"),
    ],
)
def test_bad_zip_or_exclude_names_file_line_and_key(tmp_path: Path, matrix: str, error: str) -> None:
    with pytest.raises(SpecError, match=error):
        load_spec(_spec(tmp_path, f"matrix:\n  {matrix}\nworkloads: [mnist-dnn]\n"))


def _cells(tmp_path: Path, order: str = "") -> tuple:
    spec = load_spec(
        _spec(tmp_path, f"{order}repeats: 3\nmatrix: {{batch_size: [8, 16, 32, 64]}}\nworkloads: [mnist-dnn]\n")
    )
    return spec, expand(spec, {"bm": _targets()})


def test_repeat_major_is_the_default_order(tmp_path: Path) -> None:
    spec, cells = _cells(tmp_path)
    assert spec.order == "repeat-major" and spec.order_seed is None
    assert run_order(cells, 3) == [(c, r) for r in range(3) for c in cells]


def test_shuffled_order_is_reproducible_by_seed(tmp_path: Path) -> None:
    spec, cells = _cells(tmp_path, "order: shuffled\norder_seed: 42\n")
    assert (spec.order, spec.order_seed) == ("shuffled", 42)
    first = run_order(cells, spec.repeats, spec.order, 42)
    assert [(c.hash, r) for c, r in first] == [(c.hash, r) for c, r in run_order(cells, 3, "shuffled", 42)]
    assert [r for _, r in first] == [0] * 4 + [1] * 4 + [2] * 4  # still repeat by repeat
    assert sorted(c.hash for c, r in first if r == 1) == sorted(c.hash for c in cells)
    orders = {tuple(c.hash for c, _ in run_order(cells, 3, "shuffled", seed)) for seed in range(5)}
    assert len(orders) > 1  # another seed, another order


def test_bad_order_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"c.yml:5: order: must be one of repeat-major, shuffled"):
        load_spec(_spec(tmp_path, "order: random\nworkloads: [mnist-dnn]\n"))


def test_expectations_are_validated_with_file_line_and_key(tmp_path: Path) -> None:
    good = (
        "layers: [bm, ctr]\nworkloads: [mnist-dnn, sysbench-cpu]\nexpect:\n"
        "  - {workload: mnist-dnn, layer: ctr, batch_size: 64, overhead_pct: {max: 10}}\n"
        "  - {workload: sysbench-cpu, metric: elapsed, value: 2.5, tolerance: {lower: -0.1, upper: 0.2}}\n"
    )
    assert len(load_spec(_spec(tmp_path, good)).expect) == 2
    bad = [
        ("  - {workload: mnist-dnn, overhead_pct: {maximum: 10}}", r"c.yml:8: expect.0.overhead_pct: must be a map"),
        ("  - {workload: mnist-dnn}", r"c.yml:8: expect.0: needs exactly one of"),
        ("  - {layer: vm, overhead_pct: {max: 1}}", r"expect.0.layer: layer 'vm' is not a layer of this campaign"),
        ("  - {value: 10, tolerance: {lower: 0.1}}", r"expect.0.tolerance: is relative"),
        ("  - {overhead_pct: {max: 1}, treshold: 2}", r"expect.0.treshold.*unknown field"),
        ("  - {batch_size: -1, overhead_pct: {max: 1}}", r"expect.0.batch_size"),
    ]
    for line, error in bad:
        with pytest.raises(SpecError, match=error):
            load_spec(_spec(tmp_path, "layers: [bm, ctr]\nworkloads: [mnist-dnn]\nexpect:\n" + line + "\n"))


def test_a_drawn_order_seed_is_stored_and_kept_on_resume(tmp_path: Path) -> None:
    from dlinfra.orchestration.campaign import record_campaign
    from dlinfra.results.store import open_store

    path = _spec(tmp_path, "order: shuffled\nworkloads: [mnist-dnn]\n")
    with open_store(str(tmp_path / "r.db")) as store:
        first = load_spec(path)
        record_campaign(store, "c-1", first)
        assert first.order_seed is not None
        assert store.campaign_spec("c-1")["order_seed"] == first.order_seed
        again = load_spec(path)  # --resume: a new load draws nothing new, it reads the stored seed
        record_campaign(store, "c-1", again)
        assert again.order_seed == first.order_seed
