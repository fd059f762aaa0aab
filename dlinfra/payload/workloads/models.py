"""Trainable classifiers, built with Keras layers and trained by our own loops (never ``fit``).

Every model here returns logits; the loss is sparse softmax cross-entropy (:mod:`.tasks` has the other tasks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from dlinfra.payload.errors import PayloadError

keras = tf.keras  # Keras 3, reached through TensorFlow: the payload depends on TF only


def _mnist_dnn(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    return keras.Sequential(
        [keras.Input(input_shape), keras.layers.Dense(100, activation="relu"), keras.layers.Dense(num_classes)],
        name="mnist_dnn",
    )


def _logreg(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(num_classes)], name="logreg")


def _cifar10_cnn(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.Flatten(),
            layers.Dense(384, activation="relu"),
            layers.Dense(192, activation="relu"),
            layers.Dense(num_classes),
        ],
        name="cifar10_cnn",
    )


def _alexnet(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    """AlexNet (one tower, no LRN); 'same' padding so small test images still fit."""
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Conv2D(96, 11, strides=4, padding="same", activation="relu"),
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.Conv2D(256, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.Conv2D(384, 3, padding="same", activation="relu"),
            layers.Conv2D(384, 3, padding="same", activation="relu"),
            layers.Conv2D(256, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.Flatten(),
            layers.Dense(4096, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(4096, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(num_classes),
        ],
        name="alexnet",
    )


def _vgg19(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    if min(input_shape[:2]) < 32:
        raise PayloadError(f"--image-size {input_shape[0]} is too small for vgg19 (at least 32)")
    return keras.applications.VGG19(
        weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
    )


def _resnet50(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    return keras.applications.ResNet50(
        weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
    )


def _inception3(input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    if min(input_shape[:2]) < 75:
        raise PayloadError(f"--image-size {input_shape[0]} is too small for inception3 (at least 75)")
    return keras.applications.InceptionV3(
        weights=None, input_shape=input_shape, classes=num_classes, classifier_activation=None
    )


BUILDERS: dict[str, Callable[[tuple[int, ...], int], keras.Model]] = {
    "mnist-dnn": _mnist_dnn,
    "logreg": _logreg,
    "cifar10-cnn": _cifar10_cnn,
    "alexnet": _alexnet,
    "resnet50": _resnet50,
    "inception3": _inception3,
    "vgg19": _vgg19,
}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> keras.Model:
    if name in ("resnet50",) and min(input_shape[:2]) < 32:
        raise PayloadError(f"--image-size {input_shape[0]} is too small for resnet50 (at least 32)")
    return BUILDERS[name](input_shape, num_classes)


def build_optimizer(kind: str, learning_rate: float) -> Any:
    if kind == "adam":
        return keras.optimizers.Adam(learning_rate)
    if kind == "sgd-momentum":
        return keras.optimizers.SGD(learning_rate, momentum=0.9)
    if kind == "rmsprop":  # the Nature DQN's settings
        return keras.optimizers.RMSprop(learning_rate, rho=0.95, epsilon=0.01)
    return keras.optimizers.SGD(learning_rate)
