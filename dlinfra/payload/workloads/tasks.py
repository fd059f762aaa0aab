"""What each model task trains: the model, its per-example loss, its synthetic batches and any per-step hook.

One :class:`Built` per run, whatever the task, so the training loops (single, sync, ps-async) have one path:
``loss(batch)`` returns one loss per example (the loops average it, over the global batch in sync mode),
``dataset(batch_size, shard)`` the training batches, ``after_step()`` (deepq's target network) runs in the
step function after the update, outside the replica function.

Classifiers train on a :class:`~dlinfra.payload.data.DataSet` (real or synthetic) with the models of
:mod:`.models`; the Fathom tasks (seq2seq, memnet, ctc, vae, dqn) train on one synthetic batch, shaped by
:func:`dlinfra.payload.workloads.batch_spec`, repeated (as synthetic images are): they measure compute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from dlinfra.payload import inputs
from dlinfra.payload.data import DataSet
from dlinfra.payload.errors import PayloadError
from dlinfra.payload.workloads import (
    DQN_FRAME,
    DQN_HISTORY,
    MEMNET_SENTENCE,
    VAE_IMAGE,
    VAE_LATENT,
    Field,
    Workload,
    batch_spec,
    ctc_labels,
)
from dlinfra.payload.workloads.models import build_model

keras = tf.keras
layers = keras.layers

#: deepq: discount and how often (steps) the target network copies the online one (Nature DQN: 10,000).
DQN_GAMMA = 0.99
DQN_TARGET_UPDATE = 1000
#: memnet hops (MemN2N on bAbI).
MEMNET_HOPS = 3
#: seq2seq LSTM layers (Fathom: 3).
SEQ2SEQ_LAYERS = 3


@dataclass(frozen=True)
class Dims:
    """The resolved sizes of one run's model (the workload's defaults, or the flags)."""

    image_size: int = 0
    num_classes: int = 0
    hidden: int = 0
    vocab: int = 0
    seq_len: int = 0


@dataclass
class Built:
    model: Any
    loss: Callable[[Any], tf.Tensor]
    dataset: Callable[[int, tuple[int, int] | None], tf.data.Dataset]
    after_step: Callable[[], None] | None = None


def build(w: Workload, dims: Dims, data: DataSet | None, seed: int, fixed: bool) -> Built:
    """The model, loss and input of ``w``; call it inside the strategy's scope in distributed modes."""
    if w.classifier:
        assert data is not None
        return _classify(w, dims, data, fixed)
    builder = {"seq2seq": _seq2seq, "memnet": _memnet, "ctc": _speech, "vae": _vae, "dqn": _deepq}[w.task]
    spec = batch_spec(w, dims.hidden, dims.vocab, dims.seq_len, dims.num_classes)
    model, loss, after = builder(dims)

    def dataset(batch: int, shard: tuple[int, int] | None) -> tf.data.Dataset:
        # Every worker trains on the same fixed batch: sharding synthetic data would change nothing.
        return inputs.untuned(tf.data.Dataset.from_tensors(synthetic_batch(spec, batch, seed)).repeat())

    return Built(model, loss, dataset, after)


def synthetic_batch(spec: dict[str, Field], batch: int, seed: int) -> dict[str, np.ndarray]:
    """One batch of random values of the spec's shapes: floats uniform in [0, 1), integers in [low, high)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, f in spec.items():
        shape = (batch, *f.shape)
        if f.high > f.low:
            out[name] = rng.integers(f.low, f.high, size=shape).astype(f.dtype)
        else:
            out[name] = rng.random(shape, dtype=np.float32).astype(f.dtype)
    return out


# -- classify -----------------------------------------------------------------------


def _classify(w: Workload, dims: Dims, data: DataSet, fixed: bool) -> Built:
    shape = (dims.image_size, dims.image_size, 3) if data.files else data.input_shape
    model = build_model(w.name, shape, data.num_classes)

    def loss(batch: Any) -> tf.Tensor:
        x, y = batch
        logits = model(x, training=True)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32), logits=logits)

    def dataset(batch: int, shard: tuple[int, int] | None) -> tf.data.Dataset:
        return inputs.train_dataset(data, batch, dims.image_size, shard=None if fixed else shard, fixed=fixed)

    return Built(model, loss, dataset)


# -- seq2seq ------------------------------------------------------------------------


class Seq2Seq(keras.Model):
    """Embedding, stacked LSTM encoder and decoder, dot-product (Luong) attention, softmax over the vocabulary."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__(name="seq2seq")
        self.src_embed = layers.Embedding(vocab, hidden)
        self.tgt_embed = layers.Embedding(vocab, hidden)
        self.encoder = [layers.LSTM(hidden, return_sequences=True, return_state=True) for _ in range(SEQ2SEQ_LAYERS)]
        self.decoder = [layers.LSTM(hidden, return_sequences=True, return_state=True) for _ in range(SEQ2SEQ_LAYERS)]
        self.attention = layers.Attention()
        self.combine = layers.Dense(hidden, activation="tanh")
        self.project = layers.Dense(vocab)

    def call(self, source: tf.Tensor, decoder_in: tf.Tensor, training: bool = False) -> tf.Tensor:
        h = self.src_embed(source)
        states = []
        for lstm in self.encoder:
            h, state_h, state_c = lstm(h, training=training)
            states.append([state_h, state_c])
        memory = h
        d = self.tgt_embed(decoder_in)
        for lstm, state in zip(self.decoder, states, strict=True):
            d, _, _ = lstm(d, initial_state=state, training=training)
        context = self.attention([d, memory])
        return self.project(self.combine(tf.concat([d, context], axis=-1)))


def _seq2seq(dims: Dims) -> tuple[Any, Callable[[Any], tf.Tensor], None]:
    model = Seq2Seq(dims.vocab, dims.hidden)

    def loss(batch: Any) -> tf.Tensor:
        target = batch["target"]
        go = tf.ones_like(target[:, :1])  # teacher forcing: the decoder reads GO + the target, shifted right
        logits = model(batch["source"], tf.concat([go, target[:, :-1]], axis=1), training=True)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target, logits=logits)
        return tf.reduce_mean(xent, axis=1)

    return model, loss, None


# -- memnet -------------------------------------------------------------------------


def _position_encoding(sentence: int, dim: int) -> np.ndarray:
    """MemN2N's position encoding l_kj = (1 - j/J) - (k/d)(1 - 2j/J), words j = 1..J, dimensions k = 1..d."""
    j = np.arange(1, sentence + 1)[:, None] / sentence
    k = np.arange(1, dim + 1)[None, :] / dim
    return ((1 - j) - k * (1 - 2 * j)).astype(np.float32)


class MemN2N(keras.Model):
    """End-to-end memory network with adjacent weight tying (A_{k+1} = C_k, B = A_1, W = C_K^T)."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__(name="memnet")
        init = keras.initializers.RandomNormal(stddev=0.1)
        self.embeds = [layers.Embedding(vocab, dim, embeddings_initializer=init) for _ in range(MEMNET_HOPS + 1)]
        self.encoding = tf.constant(_position_encoding(MEMNET_SENTENCE, dim))
        self.vocab = vocab

    def _sentences(self, embed: Any, words: tf.Tensor) -> tf.Tensor:
        # words [..., J] -> [..., J, d]; padding (0) words are masked out; sum over the sentence.
        mask = tf.cast(tf.not_equal(words, 0), tf.float32)[..., None]
        return tf.reduce_sum(embed(words) * mask * self.encoding, axis=-2)

    def call(self, story: tf.Tensor, query: tf.Tensor, training: bool = False) -> tf.Tensor:
        u = self._sentences(self.embeds[0], query)  # [B, d]
        for hop in range(MEMNET_HOPS):
            m = self._sentences(self.embeds[hop], story)  # [B, M, d]
            c = self._sentences(self.embeds[hop + 1], story)
            p = tf.nn.softmax(tf.einsum("bmd,bd->bm", m, u), axis=-1)
            u = u + tf.einsum("bm,bmd->bd", p, c)
        return tf.matmul(u, self.embeds[-1].embeddings, transpose_b=True)  # [B, vocab]


def _memnet(dims: Dims) -> tuple[Any, Callable[[Any], tf.Tensor], None]:
    model = MemN2N(dims.vocab, dims.hidden)

    def loss(batch: Any) -> tf.Tensor:
        logits = model(batch["story"], batch["query"], training=True)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["answer"], logits=logits)

    return model, loss, None


# -- speech (CTC) -------------------------------------------------------------------


def _clipped_relu(x: tf.Tensor) -> tf.Tensor:
    """Deep Speech's activation: min(max(x, 0), 20)."""
    return tf.minimum(tf.nn.relu(x), 20.0)


def _speech(dims: Dims) -> tuple[Any, Callable[[Any], tf.Tensor], None]:
    frames_out = -(-dims.seq_len // 2)  # the strided convolution halves the time axis
    if frames_out < 2 * ctc_labels(dims.seq_len) + 1:  # room for every label and a blank between repeats
        raise PayloadError(f"--seq-len {dims.seq_len} is too short for speech (at least 5 frames)")
    hidden = dims.hidden
    model = keras.Sequential(
        [
            keras.Input((dims.seq_len, 26)),
            layers.Conv1D(hidden, 11, strides=2, padding="same", activation=_clipped_relu),
            layers.Conv1D(hidden, 11, padding="same", activation=_clipped_relu),
            layers.Bidirectional(layers.GRU(hidden, return_sequences=True), merge_mode="sum"),
            layers.Dense(hidden, activation=_clipped_relu),
            layers.Dense(dims.vocab),
        ],
        name="speech",
    )

    def loss(batch: Any) -> tf.Tensor:
        logits = model(batch["frames"], training=True)
        labels = batch["labels"]
        n = tf.shape(labels)[0]
        return tf.nn.ctc_loss(
            labels=labels,
            logits=logits,
            label_length=tf.fill([n], tf.shape(labels)[1]),
            logit_length=tf.fill([n], frames_out),
            logits_time_major=False,
            blank_index=0,
        )

    return model, loss, None


# -- autoenc (VAE) ------------------------------------------------------------------


class VAE(keras.Model):
    """Two softplus layers each way and a Gaussian latent code (Kingma and Welling; Fathom's autoenc)."""

    def __init__(self, hidden: int) -> None:
        super().__init__(name="autoenc")
        pixels = VAE_IMAGE * VAE_IMAGE
        self.encoder = keras.Sequential(
            [
                layers.Flatten(),
                layers.Dense(hidden, activation="softplus"),
                layers.Dense(hidden, activation="softplus"),
                layers.Dense(2 * VAE_LATENT),
            ]
        )
        self.decoder = keras.Sequential(
            [
                layers.Dense(hidden, activation="softplus"),
                layers.Dense(hidden, activation="softplus"),
                layers.Dense(pixels),
            ]
        )

    def call(self, images: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        mean, log_var = tf.split(self.encoder(images), 2, axis=-1)
        z = mean + tf.exp(0.5 * log_var) * tf.random.normal(tf.shape(mean))
        return self.decoder(z), mean, log_var


def _vae(dims: Dims) -> tuple[Any, Callable[[Any], tf.Tensor], None]:
    model = VAE(dims.hidden)

    def loss(batch: Any) -> tf.Tensor:
        images = batch["images"]
        logits, mean, log_var = model(images, training=True)
        flat = tf.reshape(images, tf.shape(logits))
        reconstruction = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=flat, logits=logits), axis=1)
        kl = -0.5 * tf.reduce_sum(1 + log_var - tf.square(mean) - tf.exp(log_var), axis=1)
        return reconstruction + kl

    return model, loss, None


# -- deepq (DQN) --------------------------------------------------------------------


def _dqn_net(actions: int, name: str) -> Any:
    """The Nature DQN network (Mnih et al. 2015): 3 convolutions, 512 dense units, one Q value per action."""
    return keras.Sequential(
        [
            keras.Input((DQN_FRAME, DQN_FRAME, DQN_HISTORY)),
            layers.Rescaling(1 / 255),
            layers.Conv2D(32, 8, strides=4, activation="relu"),
            layers.Conv2D(64, 4, strides=2, activation="relu"),
            layers.Conv2D(64, 3, strides=1, activation="relu"),
            layers.Flatten(),
            layers.Dense(512, activation="relu"),
            layers.Dense(actions),
        ],
        name=name,
    )


def _deepq(dims: Dims) -> tuple[Any, Callable[[Any], tf.Tensor], Callable[[], None]]:
    model = _dqn_net(dims.num_classes, "deepq")
    target = _dqn_net(dims.num_classes, "deepq_target")
    for t, s in zip(target.weights, model.weights, strict=True):
        t.assign(s)
    steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="dqn_steps")

    def loss(batch: Any) -> tf.Tensor:
        state = tf.cast(batch["state"], tf.float32)
        next_state = tf.cast(batch["next_state"], tf.float32)
        best_next = tf.reduce_max(target(next_state, training=False), axis=1)
        goal = tf.stop_gradient(batch["reward"] + DQN_GAMMA * (1.0 - batch["done"]) * best_next)
        q = tf.gather(model(state, training=True), batch["action"], axis=1, batch_dims=1)
        error = tf.abs(q - goal)  # Huber loss (delta 1), the Nature DQN's clipped error
        return tf.where(error < 1.0, 0.5 * tf.square(error), error - 0.5)

    def after_step() -> None:
        steps.assign_add(1)

        def copy() -> tf.Tensor:
            for t, s in zip(target.weights, model.weights, strict=True):
                t.assign(s)
            return tf.constant(True)

        tf.cond(steps % DQN_TARGET_UPDATE == 0, copy, lambda: tf.constant(False))

    return model, loss, after_step
