"""Canonical weights (PyTorch ``state_dict`` names and layouts, float32 numpy; the runtime's
reference.py) to and from a Keras model's variables, through the weight map models.py records.

Layouts: a convolution's kernel is (kh, kw, in, out) in Keras and (out, in, kh, kw) in PyTorch;
a depthwise kernel (kh, kw, in, 1) against (in, 1, kh, kw); a dense kernel (in, out) against
(out, in), its rows permuted from Keras' (H, W, C) flattening to PyTorch's (C, H, W) where a
feature map was flattened into it; BatchNorm's gamma, beta, moving mean and variance are
weight, bias, running_mean and running_var, LayerNorm's gamma and beta weight and bias; Keras'
LSTM kernels are the transposes of PyTorch's, its one bias and gate order (i, f, c, o) already
the canonical ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import keras
import numpy as np

from fwbench.keras_plugin.models import Mapped, Net

Convert = Callable[[np.ndarray], np.ndarray]
# (canonical name, Keras variable, Keras -> canonical, canonical -> Keras)
Slot = tuple[str, keras.Variable, Convert, Convert]


def _same(array: np.ndarray) -> np.ndarray:
    return array


def _transpose(array: np.ndarray) -> np.ndarray:
    return array.T


def _permute(axes: tuple[int, ...]) -> Convert:
    return lambda array: array.transpose(axes)


def _flattened(features: tuple[int, int, int]) -> tuple[Convert, Convert]:
    c, h, w = features

    def to_canonical(kernel: np.ndarray) -> np.ndarray:  # (H*W*C, out) -> (out, C*H*W)
        out = kernel.shape[1]
        return kernel.reshape(h, w, c, out).transpose(3, 2, 0, 1).reshape(out, c * h * w)

    def from_canonical(weight: np.ndarray) -> np.ndarray:  # (out, C*H*W) -> (H*W*C, out)
        out = weight.shape[0]
        return weight.reshape(out, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, out)

    return to_canonical, from_canonical


def _slots(entry: Mapped) -> Iterator[Slot]:
    layer, p = entry.layer, entry.prefix
    if entry.kind == "conv":
        yield f"{p}.weight", layer.kernel, _permute((3, 2, 0, 1)), _permute((2, 3, 1, 0))
    elif entry.kind == "depthwise":
        swap = _permute((2, 3, 0, 1))  # its own inverse
        yield f"{p}.weight", layer.kernel, swap, swap
    elif entry.kind == "dense":
        to, back = _flattened(entry.features) if entry.features else (_transpose, _transpose)
        yield f"{p}.weight", layer.kernel, to, back
    elif entry.kind == "batchnorm":
        yield f"{p}.weight", layer.gamma, _same, _same
        yield f"{p}.bias", layer.beta, _same, _same
        yield f"{p}.running_mean", layer.moving_mean, _same, _same
        yield f"{p}.running_var", layer.moving_variance, _same, _same
        return
    elif entry.kind == "embedding":
        yield f"{p}.weight", layer.embeddings, _same, _same
        return
    elif entry.kind == "layernorm":
        yield f"{p}.weight", layer.gamma, _same, _same
        yield f"{p}.bias", layer.beta, _same, _same
        return
    elif entry.kind == "bias":
        yield f"{p}.bias", layer.bias, _same, _same
        return
    elif entry.kind == "lstm":
        cell = layer.cell
        yield f"{p}.weight_ih_l0", cell.kernel, _transpose, _transpose
        yield f"{p}.weight_hh_l0", cell.recurrent_kernel, _transpose, _transpose
        yield f"{p}.bias_l0", cell.bias, _same, _same
        return
    else:
        raise ValueError(f"unknown weight kind {entry.kind!r} for {p}")
    if getattr(layer, "use_bias", False):
        yield f"{p}.bias", layer.bias, _same, _same


def slots(net: Net) -> list[Slot]:
    return [slot for entry in net.mapped for slot in _slots(entry)]


def export(net: Net) -> dict[str, np.ndarray]:
    """The model's weights as canonical weights."""
    found: dict[str, np.ndarray] = {}
    for name, variable, to_canonical, _ in slots(net):
        array = np.asarray(keras.ops.convert_to_numpy(variable.value), dtype=np.float32)
        found[name] = np.ascontiguousarray(to_canonical(array))
    return found


def load(net: Net, weights: Mapping[str, np.ndarray]) -> None:
    """Assigns canonical `weights`; raises unless every key is used, every shape fits and
    every weight of the model is assigned."""
    table = slots(net)
    names = {slot[0] for slot in table}
    missing, unused = sorted(names - set(weights)), sorted(set(weights) - names)
    if missing or unused:
        raise KeyError(f"{net.name}: canonical weights missing {missing[:5]}, unused {unused[:5]}")
    assigned: set[int] = set()
    for name, variable, _, from_canonical in table:
        value = from_canonical(np.asarray(weights[name], dtype=np.float32))
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"{net.name}: {name} has shape {np.shape(weights[name])}, which maps to "
                f"{value.shape}, not the model's {tuple(variable.shape)}"
            )
        variable.assign(np.ascontiguousarray(value).astype(variable.dtype))
        assigned.add(id(variable))
    left = [v.path for v in net.model.weights if id(v) not in assigned]
    if left:
        raise ValueError(f"{net.name}: canonical weights left {left[:5]} unassigned")
