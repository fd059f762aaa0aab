"""tf.data input pipelines over a :class:`DataSet`: the same pipeline in every mode, with fixed settings.

Why not tf.data's autotuning: its model thread re-plans the pipeline on a doubling period (10 ms up to a
minute), competing with training for the cores during the measurement, and an iterator destroyed between two
of its passes waits for the next one: a run of mnist-dnn on bare metal whose measurement ended 61 s after its
pipeline started sat idle for 21 s before writing its record (to the pass at 82 s), and the guest's runs for
18-41 s. Fixed parallelism (the cores this process may use) and a prefetch that sizes its own buffer give every
layer the same pipeline, with nothing of its own running in the background.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from dlinfra.payload.data import DataSet
from dlinfra.payload.identity import cpu_set

EVAL_BATCH = 500
#: Batches prepared ahead of the step that needs them: with autotuning off, the prefetch sizes its own buffer
#: (it grows it while the step waits, in the prefetch's own thread; no model thread); it ran mnist-dnn as fast
#: as a fixed depth of 2 or the autotuner did, within the machine's noise.
PREFETCH_BUFFER = tf.data.AUTOTUNE


def untuned(ds: tf.data.Dataset) -> tf.data.Dataset:
    """``ds`` without tf.data's autotuning (see the module's docstring), so without its model thread."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)


def _parallel_calls() -> int:
    """Decoders running side by side: one per core this process may use (it may be pinned)."""
    return len(cpu_set())


def _decoder(image_size: int) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    def decode(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, (image_size, image_size))
        return image, label

    return decode


def train_dataset(
    data: DataSet, batch: int, image_size: int = 0, shard: tuple[int, int] | None = None, fixed: bool = False
) -> tf.data.Dataset:
    """Shuffled, repeated, batched training data; ``fixed`` repeats one batch (synthetic image data)."""
    if fixed:
        x, y = data.x_train[:batch], data.y_train[:batch]
        if len(x) < batch:
            reps = -(-batch // len(x))
            x, y = np.concatenate([x] * reps)[:batch], np.concatenate([y] * reps)[:batch]
        return untuned(tf.data.Dataset.from_tensors((x, y)).repeat())
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    if shard is not None:
        ds = ds.shard(shard[0], shard[1])
    ds = ds.shuffle(min(len(data.x_train), 10_000)).repeat()
    if data.files:
        ds = ds.map(_decoder(image_size), num_parallel_calls=_parallel_calls())
    return untuned(ds.batch(batch, drop_remainder=True).prefetch(PREFETCH_BUFFER))


def eval_dataset(data: DataSet, image_size: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test))
    if data.files:
        ds = ds.map(_decoder(image_size), num_parallel_calls=_parallel_calls())
    return untuned(ds.batch(EVAL_BATCH).prefetch(PREFETCH_BUFFER))
