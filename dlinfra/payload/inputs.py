"""tf.data input pipelines over a :class:`DataSet`: the same pipeline in every mode."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from dlinfra.payload.data import DataSet

EVAL_BATCH = 500


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
        return tf.data.Dataset.from_tensors((x, y)).repeat()
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    if shard is not None:
        ds = ds.shard(shard[0], shard[1])
    ds = ds.shuffle(min(len(data.x_train), 10_000)).repeat()
    if data.files:
        ds = ds.map(_decoder(image_size), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def eval_dataset(data: DataSet, image_size: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test))
    if data.files:
        ds = ds.map(_decoder(image_size), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(EVAL_BATCH).prefetch(tf.data.AUTOTUNE)
