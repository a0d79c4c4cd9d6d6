"""Canonical weights (PyTorch ``state_dict`` names and layouts, float32 numpy) <-> a Paddle
model's tensors, both ways, exactly.

The models (models.py) name their sublayers as PyTorch's modules, so a canonical name is the
sublayer's path plus PyTorch's name for the tensor. What differs is translated here, per layer
type, and nowhere else:

| Paddle | canonical |
| --- | --- |
| ``Linear.weight`` (in, out) | ``weight`` (out, in): transposed |
| ``BatchNorm2D._mean``, ``._variance`` | ``running_mean``, ``running_var`` |
| ``LSTM.bias_ih_l0`` (the trainable bias) | ``bias_l0`` |
| ``LSTM.bias_hh_l0`` (held at zero, frozen) | not a weight: loading checks it is still zero |
| ``MaskedLMPredictions.bias`` (BERT's decoder bias) | ``cls.predictions.bias`` |

Convolutions (out, in/groups, kh, kw), embeddings, LayerNorm and biases have PyTorch's layouts
already. The transformers (transformers.py) hold each tied weight once, so each is exported
once, under its Hugging Face name.
Lenet's and VGG's first dense layers see features flattened in (C, H, W) order, as PyTorch's,
because the models compute in NCHW: no row permutation is needed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import paddle
from paddle import nn

from fwbench.paddle_plugin.transformers import MaskedLMPredictions


@dataclass(frozen=True)
class Slot:
    """One canonical weight and the Paddle tensor that holds it."""

    name: str
    tensor: paddle.Tensor
    transposed: bool = False  # Paddle's layout is the transpose of the canonical one


def _own(layer: nn.Layer, prefix: str, pairs: tuple[tuple[str, str], ...]) -> Iterator[Slot]:
    for paddle_name, canonical in pairs:
        tensor = getattr(layer, paddle_name, None)
        if tensor is not None:
            yield Slot(
                f"{prefix}{canonical}",
                tensor,
                isinstance(layer, nn.Linear) and canonical == "weight",
            )


_PAIRS: dict[type[nn.Layer], tuple[tuple[str, str], ...]] = {
    nn.Conv2D: (("weight", "weight"), ("bias", "bias")),
    nn.Linear: (("weight", "weight"), ("bias", "bias")),
    nn.Embedding: (("weight", "weight"),),
    nn.LayerNorm: (("weight", "weight"), ("bias", "bias")),
    MaskedLMPredictions: (("bias", "bias"),),
    nn.BatchNorm2D: (
        ("weight", "weight"),
        ("bias", "bias"),
        ("_mean", "running_mean"),
        ("_variance", "running_var"),
    ),
    nn.LSTM: (
        ("weight_ih_l0", "weight_ih_l0"),
        ("weight_hh_l0", "weight_hh_l0"),
        ("bias_ih_l0", "bias_l0"),
    ),
}


def slots(model: nn.Layer) -> list[Slot]:
    """Every canonical weight of `model`, in PyTorch's ``state_dict`` order (sublayers are
    registered in the PyTorch modules' order). Raises TypeError on a sublayer with parameters
    of a type this table does not know: a weight would otherwise go unmapped."""
    found: list[Slot] = []
    inside_lstm: list[str] = []
    for path, layer in model.named_sublayers():
        if any(path.startswith(f"{outer}.") for outer in inside_lstm):
            continue  # the LSTM's cell holds the same tensors under other names
        pairs = next((p for kind, p in _PAIRS.items() if isinstance(layer, kind)), None)
        if pairs is None:
            if layer.parameters(include_sublayers=False):
                raise TypeError(f"{path}: no canonical mapping for {type(layer).__name__}")
            continue
        if isinstance(layer, nn.LSTM):
            inside_lstm.append(path)
        found.extend(_own(layer, f"{path}.", pairs))
    return found


def _zero_bias(model: nn.Layer) -> list[paddle.Tensor]:
    return [layer.bias_hh_l0 for _, layer in model.named_sublayers() if isinstance(layer, nn.LSTM)]


def export(model: nn.Layer) -> dict[str, np.ndarray]:
    """The model's canonical weights (float32 copies, PyTorch layouts)."""
    weights = {}
    for slot in slots(model):
        array = np.asarray(slot.tensor.numpy(), dtype=np.float32)
        weights[slot.name] = np.ascontiguousarray(array.T if slot.transposed else array)
    return weights


def load(model: nn.Layer, weights: Mapping[str, np.ndarray]) -> None:
    """Assigns canonical `weights` to `model`; every key must be used and every weight set,
    with its canonical shape (ValueError otherwise)."""
    table = slots(model)
    expected = [slot.name for slot in table]
    missing = sorted(set(expected) - set(weights))
    unknown = sorted(set(weights) - set(expected))
    if missing:
        raise ValueError(f"missing weights {missing[:5]}")
    if unknown:
        raise ValueError(f"unknown weights {unknown[:5]}")
    with paddle.no_grad():
        for slot in table:
            array = np.asarray(weights[slot.name])
            shape = tuple(slot.tensor.shape)
            canonical_shape = shape[::-1] if slot.transposed else shape
            if array.shape != canonical_shape:
                raise ValueError(f"{slot.name} has shape {array.shape}, expected {canonical_shape}")
            value = array.T if slot.transposed else array
            dtype = paddle.base.data_feeder.convert_dtype(slot.tensor.dtype)
            slot.tensor.set_value(np.ascontiguousarray(value, dtype=dtype))
        for bias in _zero_bias(model):
            if bool(paddle.any(bias != 0)):
                raise ValueError("an LSTM's second bias must stay zero (it is not a weight)")
