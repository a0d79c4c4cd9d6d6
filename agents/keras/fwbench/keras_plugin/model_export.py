"""A user's .keras file written in other formats by Keras' own exporter (capability
"model_export", protocol 1.8), on the TensorFlow backend only:

- "savedmodel": `Model.export(format="tf_saved_model")`, a SavedModel whose `serving_default`
  signature takes the model's inputs under their Keras names, the batch axis left open;
- "onnx": `Model.export(format="onnx")`, which traces the same function and converts it with
  tf2onnx (offered only where tf2onnx and onnx are installed: the keras-tf agent's lock has
  them); the open axes stay open, the inputs keep their names, the outputs are `output_0`, ...

The file is loaded afresh for the export (not the cache the cells train in), uncompiled. The
torch backend's ONNX export traces with TorchScript and fails on recurrent layers, and the
JAX backend's needs TensorFlow beside it: neither is offered, and those agents say so by not
listing export formats."""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import Any

import keras

from fwbench.keras_plugin.model_file import _input_structure

FORMATS_BY_BACKEND: dict[str, tuple[str, ...]] = {"tensorflow": ("savedmodel", "onnx")}
_KERAS_FORMAT = {"savedmodel": "tf_saved_model", "onnx": "onnx"}


def formats(backend: str) -> tuple[str, ...]:
    """The formats this backend's agent writes: none where its exporter is missing."""
    found = FORMATS_BY_BACKEND.get(backend, ())
    if not all(importlib.util.find_spec(m) for m in ("tf2onnx", "onnx")):
        found = tuple(f for f in found if f != "onnx")
    return found


def export(path: str, target: str, dest: str) -> str:
    """Writes the model in `path` to `dest` as `target`; the tool that did it, with versions."""
    import tensorflow as tf

    if target == "onnx":
        _register_erfc()

    model = keras.saving.load_model(path, compile=False)
    _call_once(model)  # Keras exports only a model that has been called
    with warnings.catch_warnings():
        # tf2onnx still touches NumPy 1's aliases (np.object, ...) and TensorFlow's deprecated
        # APIs: their warnings say nothing about the export, which Keras patches to work.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        model.export(dest, format=_KERAS_FORMAT[target], verbose=False)
    made = f"keras {keras.__version__} Model.export, tensorflow {tf.__version__}"
    if target == "onnx":
        return f"tf2onnx {_version('tf2onnx')} ({made}, onnx {_version('onnx')})"
    if not os.path.isfile(os.path.join(dest, "saved_model.pb")):
        raise RuntimeError("Keras wrote no saved_model.pb")
    return made


_erfc_registered = False


def _register_erfc() -> None:
    """tf2onnx 1.17 has no handler for TensorFlow's Erfc, which Keras' exact GELU uses on the
    TensorFlow backend (tf.nn.gelu: 0.5 x erfc(-x / sqrt 2)): it leaves an "Erfc" node that no
    ONNX runtime knows. Registered here, once: erfc(x) = 1 - erf(x), ONNX's Sub and Erf."""
    global _erfc_registered
    if _erfc_registered:
        return
    import numpy as np
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Erfc")
    class Erfc:
        @classmethod
        def version_9(cls, ctx: Any, node: Any, **kwargs: Any) -> None:
            x = node.input[0]
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(x))
            erf = ctx.make_node("Erf", [x], op_name_scope=node.name, name="erf")
            one = ctx.make_const(utils.make_name(f"{node.name}_one"), np.array(1, dtype=dtype))
            node.type = "Sub"
            ctx.replace_inputs(node, [one.output[0], erf.output[0]])

    _erfc_registered = True


def _call_once(model: keras.Model) -> None:
    """One forward pass on zeros, every open axis 1: the call that traces a loaded model."""
    import numpy as np

    structure = _input_structure(model)
    zeros = [
        np.zeros([d or 1 for d in tensor.shape], dtype=tensor.dtype)
        for tensor in keras.tree.flatten(structure)
    ]
    model(keras.tree.pack_sequence_as(structure, zeros), training=False)


def _version(module: str) -> str:
    imported: Any = importlib.import_module(module)
    return str(getattr(imported, "__version__", "?"))
