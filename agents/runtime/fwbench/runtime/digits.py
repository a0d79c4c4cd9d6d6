"""scikit-learn's handwritten digits as LeNet-shaped arrays, identical in every agent.

The dataset ships inside the scikit-learn wheel (1797 8x8 images, 10 classes), so no download
is needed. Pixels (0..16) are scaled to [0, 1], each image is upscaled 3x by pixel repetition to
24x24 and zero-padded by 2 to LeNet's 28x28. The train/validation split is fixed (seed 0,
80/20) whatever the run's seed, so every run validates on the same 360 images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLIT_SEED = 0
TRAIN_FRACTION = 0.8
UPSCALE = 3
PAD = 2


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # (n, 1, 28, 28) float32, NCHW
    labels: np.ndarray  # (n,) int64


@dataclass(frozen=True)
class Digits:
    train: Split
    validation: Split


def to_lenet_images(pixels: np.ndarray) -> np.ndarray:
    """(n, 8, 8) raw digit pixels -> (n, 1, 28, 28) float32 in [0, 1]."""
    scaled = pixels.astype(np.float32) / 16.0
    upscaled = scaled.repeat(UPSCALE, axis=1).repeat(UPSCALE, axis=2)
    padded = np.pad(upscaled, ((0, 0), (PAD, PAD), (PAD, PAD)))
    return np.ascontiguousarray(padded[:, None, :, :])


def load_digits() -> Digits:
    """Raises ImportError with an install hint when scikit-learn is missing."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as error:
        raise ImportError(
            "train_to_accuracy needs scikit-learn in the agent's environment "
            "(it ships the digits dataset); add it to the manifest's requirements"
        ) from error
    bunch = sklearn_digits()
    images = to_lenet_images(bunch.images)
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(labels))
    cut = round(TRAIN_FRACTION * len(labels))
    train, validation = order[:cut], order[cut:]
    return Digits(
        Split(images[train], labels[train]), Split(images[validation], labels[validation])
    )


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Index arrays for one epoch: a fresh permutation per (seed, epoch), last partial batch
    dropped so that every step has the same shape (no recompilation under jit or XLA)."""
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch size {batch_size} must be between 1 and {n} training examples")
    order = np.random.default_rng([seed, epoch]).permutation(n)
    steps = n // batch_size
    return [order[i * batch_size : (i + 1) * batch_size] for i in range(steps)]


def initial_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """The same initial weights for every framework: PyTorch's default for conv and dense
    layers, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and their biases, drawn in numpy
    from `seed` in sorted-name order."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name in sorted(shapes):
        shape = shapes[name]
        weight_shape = shapes.get(name.rsplit(".", 1)[0] + ".weight", shape)
        fan_in = int(np.prod(weight_shape[1:])) if len(weight_shape) > 1 else weight_shape[0]
        bound = 1.0 / np.sqrt(fan_in)
        weights[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return weights
