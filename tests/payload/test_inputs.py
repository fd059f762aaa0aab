"""The payload's input pipelines run without tf.data's autotuning, in every shape the payload builds.

Why a user cares: the autotuner's model thread re-plans on a doubling period (up to a minute), and an
iterator destroyed between two of its passes waits for the next one. A bare-metal mnist-dnn run whose
measurement ended 61 s after its pipeline started idled 21 s before writing its record, and the emulated
guest's demo cell 33-41 s; the record's ``phases_s.finish`` showed it. Waiting for that timing in a test takes
minutes, so this checks the cause on each pipeline: autotuning off (and the pipeline still yields batches).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlinfra.payload import data, inputs
from dlinfra.payload.workloads import get, tasks


def _assert_untuned(ds: object) -> None:
    assert ds.options().autotune.enabled is False  # type: ignore[attr-defined]
    assert next(iter(ds)) is not None  # type: ignore[call-overload]  # and it still yields a batch


@pytest.fixture(scope="module")
def mnist() -> data.DataSet:
    return data.synthetic((784,), 10, 256, seed=0)


def test_training_and_held_out_pipelines_are_untuned(mnist: data.DataSet) -> None:
    _assert_untuned(inputs.train_dataset(mnist, 32))
    _assert_untuned(inputs.train_dataset(mnist, 32, shard=(2, 0)))
    _assert_untuned(inputs.train_dataset(mnist, 32, fixed=True))
    _assert_untuned(inputs.eval_dataset(mnist))


def test_image_files_are_decoded_without_autotuning(tmp_path: Path) -> None:
    import tensorflow as tf

    pixels = np.zeros((8, 8, 3), dtype=np.uint8)
    paths = []
    for i in range(4):
        path = tmp_path / f"{i}.png"
        path.write_bytes(tf.io.encode_png(pixels).numpy())
        paths.append(str(path))
    files = data.DataSet("folder", np.array(paths), np.arange(4), np.array(paths), np.arange(4), 4, files=True)
    ds = inputs.train_dataset(files, 2, image_size=8)
    _assert_untuned(ds)
    assert next(iter(ds))[0].shape == (2, 8, 8, 3)


@pytest.mark.parametrize("workload", ["autoenc", "memnet"])
def test_generated_batches_of_the_other_tasks_are_untuned(workload: str) -> None:
    w = get(workload)
    dims = tasks.Dims(hidden=w.hidden or 8, vocab=w.vocab or 16, seq_len=w.seq_len or 4, num_classes=w.num_classes)
    built = tasks.build(w, dims, None, seed=0, fixed=True)
    _assert_untuned(built.dataset(2, None))
