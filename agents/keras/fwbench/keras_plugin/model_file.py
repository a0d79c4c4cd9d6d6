"""The user's Keras 3 model files (capability "model_files", format "keras"): a `.keras` file
loaded with `keras.saving.load_model(path, compile=True)` (safe_mode on: a file that carries
Python code, a Lambda layer's, is refused; a file saved on the torch backend loads on the
others: _BACKEND_OPTIMIZERS), its signature answered, and its cells run the way the
catalogue's models run (training.py): `predict_on_batch` to infer and `train_on_batch` with
the file's own compiled loss, optimizer and metrics to train, in the cell's mode.

Names. An input is named as Keras feeds it: by its key where the model takes a dict, else by
its Input's name. An output is named by its key where the model returns a dict (nested
structures: the keys on its path joined by "/"); else by the name of the layer that makes it
(Keras' `output_names`), a layer that makes several getting ":0", ":1"... after its name.
Inputs and outputs are listed in the order Keras flattens them (a dict's keys sorted).

A loaded model is kept per (path, digest), the last two, so that InspectModel and the cells of
one run load a file once; each cell starts from the file's state (weights, and the optimizer's
variables where it was compiled), restored from a host copy taken at load. The outputs a cell
sends are those of the file's weights: one untimed forward pass (training=False) on the
cell's inputs, after the timed loop: an inference cell's own `predict_on_batch` (compiled in
its mode), a training cell's model called once its weights are the file's again.

Training targets are made from the cell's seed (another stream than the inputs'), shaped like
each output: integer labels below the output's last axis for a sparse loss (its name says
"sparse"), one-hot rows for the other categorical ones, uniform numbers in [0, 1) for the
rest (mean squared error, binary crossentropy...)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from fwbench.keras_plugin import training
from fwbench.runtime.model_files import LoadedModels, ModelSignature, reject_unreadable
from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec
from fwbench.spec.catalogue import CatalogueError
from fwbench.spec.model_files import DTYPES, TensorInfo

FORMAT = "keras"
TRAIN_REASON = (
    "the file has no compiled loss and optimizer: save it after model.compile(...) to train it"
)
CACHE_SIZE = 2  # loaded files kept: a run's file, and one more
# Keras' built-in optimizers that its torch backend replaces by a torch-specific subclass, whose
# module (keras.src.backend.torch.optimizers.torch_adam...) a file saved there names: the jax
# and tensorflow backends cannot import it (Keras 3.15), so these names are read as Keras' own
# class, which makes its backend's kind on each backend (torch's subclass on torch).
_BACKEND_OPTIMIZERS: tuple[str, ...] = ("Adadelta", "Adagrad", "Adam", "Adamax", "AdamW")
_BACKEND_OPTIMIZERS += ("Lion", "Nadam", "RMSprop", "SGD")
_TARGET_STREAM = 1  # the targets' PCG64 stream is [seed, 1]; the inputs' is seed's own


@dataclass
class Loaded:
    """A loaded file: the model, what it answers to InspectModel, and its state at load."""

    model: keras.Model
    signature: ModelSignature
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    compiled: bool
    _state: list[tuple[Any, np.ndarray]]

    def restore(self) -> None:
        """The file's weights and optimizer variables, as loaded."""
        for variable, value in self._state:
            variable.assign(value)

    def pack_inputs(self, flat: Sequence[Any]) -> Any:
        """The model's input structure (a dict, a list, one tensor) holding `flat`."""
        return keras.tree.pack_sequence_as(_input_structure(self.model), list(flat))

    def pack_outputs(self, flat: Sequence[Any]) -> Any:
        return keras.tree.pack_sequence_as(_output_structure(self.model), list(flat))


class ModelCache(LoadedModels[Loaded]):
    """Loaded files by (path, digest), the CACHE_SIZE most recently used, loaded on `backend`."""

    def __init__(self, backend: str, size: int = CACHE_SIZE) -> None:
        super().__init__(lambda path: load(path, backend), size)
        self.backend = backend


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


def load(path: str, backend: str) -> Loaded:
    """The model in the file; ModelRejected (one line) for a file Keras cannot load or a model
    fwbench cannot feed (no declared inputs, an input or output dtype outside DTYPES)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = keras.saving.load_model(path, compile=True, custom_objects=_optimizers())
        if not isinstance(model, keras.Model):
            raise TypeError(f"it holds a {type(model).__name__}, not a keras.Model")
        inputs = _tensors(_input_structure(model), _input_names(model), "inputs")
        outputs = _tensors(_output_structure(model), _output_names(model), "outputs")
    except Exception as error:  # noqa: BLE001 (Keras' reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None
    optimizer = getattr(model, "optimizer", None)
    compiled = optimizer is not None and getattr(model, "loss", None) is not None
    details = {
        "keras_version": keras.__version__,
        "backend": backend,
        "model_class": type(model).__name__,
        "dtype_policy": str(model.dtype_policy.name),
    }
    if compiled:
        details["optimizer"] = _optimizer_text(optimizer)
        details["loss"] = _loss_text(model.loss)
    if caught:
        details["load_warnings"] = str(len(caught))
        details["load_warning"] = _one_line(str(caught[0].message))
    signature = ModelSignature(
        inputs=inputs,
        outputs=outputs,
        parameters=int(model.count_params()),
        phases=("infer", "train") if compiled else ("infer",),
        unsupported_reasons={} if compiled else {"train": TRAIN_REASON},
        details=details,
    )
    variables = list(model.variables)
    if compiled and optimizer is not None:
        variables += list(optimizer.variables)
    state = [(v, np.array(keras.ops.convert_to_numpy(v.value))) for v in variables]
    return Loaded(
        model,
        signature,
        tuple(t.name for t in inputs),
        tuple(t.name for t in outputs),
        compiled,
        state,
    )


def _optimizers() -> dict[str, type]:
    return {n: getattr(keras.optimizers, n) for n in _BACKEND_OPTIMIZERS}


def _input_structure(model: keras.Model) -> Any:
    """A functional model's inputs as it takes them; a Sequential's one input (or its list)."""
    try:
        return model.input
    except AttributeError:  # a Sequential model: its inputs, never called symbolically
        inputs = list(model.inputs)
        return inputs[0] if len(inputs) == 1 else inputs


def _output_structure(model: keras.Model) -> Any:
    try:
        return model.output
    except AttributeError:
        outputs = list(model.outputs)
        return outputs[0] if len(outputs) == 1 else outputs


def _path_name(path: tuple[Any, ...]) -> str:
    """The dict keys on a flattened tensor's path, joined by "/"; "" when none."""
    return "/".join(str(p) for p in path if isinstance(p, str))


def _input_names(model: keras.Model) -> list[str]:
    flat = keras.tree.flatten_with_path(_input_structure(model))
    return [_path_name(path) or tensor.name for path, tensor in flat]


def _output_names(model: keras.Model) -> list[str]:
    flat = keras.tree.flatten_with_path(_output_structure(model))
    layers = list(getattr(model, "output_names", None) or ())
    if len(layers) != len(flat):  # a Sequential model: the layers that made them
        layers = [_producer(tensor, index) for index, (_, tensor) in enumerate(flat)]
    names = [_path_name(path) or layer for (path, _), layer in zip(flat, layers, strict=True)]
    repeated = {n for n in names if names.count(n) > 1}
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        if name in repeated:
            seen[name] = seen.get(name, -1) + 1
            name = f"{name}:{seen[name]}"
        unique.append(name)
    return unique


def _producer(tensor: Any, index: int) -> str:
    history = getattr(tensor, "_keras_history", None)
    return str(history[0].name) if history else f"output_{index}"


def _tensors(structure: Any, names: Sequence[str], kind: str) -> tuple[TensorInfo, ...]:
    flat = keras.tree.flatten(structure)
    if not flat:
        raise ValueError(f"the model declares no {kind} (build it on keras.Input before saving)")
    found = []
    for tensor, name in zip(flat, names, strict=True):
        if not isinstance(tensor, keras.KerasTensor):
            raise ValueError(f"{name!r} is a {type(tensor).__name__}, not a KerasTensor")
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if dtype not in DTYPES:
            raise ValueError(f"{name!r} has dtype {dtype}; fwbench feeds {', '.join(DTYPES)}")
        shape = tuple(None if d is None else int(d) for d in tensor.shape)
        found.append(TensorInfo(name, shape, dtype))
    return tuple(found)


def _optimizer_text(optimizer: Any) -> str:
    config = optimizer.get_config()
    rate = config.get("learning_rate")
    rate_text = f"learning_rate={rate:g}" if isinstance(rate, int | float) else "a schedule"
    return f"{type(optimizer).__name__}({rate_text})"


def _loss_name(loss: Any) -> str:
    """What a loss is called, lower-case: its string, class, function and name together."""
    if isinstance(loss, str):
        return loss.lower()
    parts = [type(loss).__name__, getattr(loss, "__name__", ""), str(getattr(loss, "name", ""))]
    fn = getattr(loss, "fn", None)
    if fn is not None:
        parts.append(getattr(fn, "__name__", ""))
    return " ".join(p for p in parts if p).lower()


def _loss_text(loss: Any) -> str:
    if isinstance(loss, dict):
        return ", ".join(f"{k}: {_loss_text(v)}" for k, v in loss.items())
    if isinstance(loss, list | tuple):
        return ", ".join(_loss_text(v) for v in loss)
    if isinstance(loss, str):
        return loss
    return str(getattr(loss, "name", "") or getattr(loss, "__name__", "") or type(loss).__name__)


def _output_losses(loss: Any, names: Sequence[str]) -> list[Any]:
    """Each output's loss (None where the compiled loss leaves it out)."""
    if isinstance(loss, dict):
        return [loss.get(name) for name in names]
    if isinstance(loss, list | tuple):
        return [*loss, *[None] * len(names)][: len(names)]
    return [loss] * len(names)


def make_target(rng: np.random.Generator, shape: tuple[int, ...], loss: Any) -> np.ndarray:
    """A target for an output of `shape` under `loss` (module docstring)."""
    name = _loss_name(loss) if loss is not None else ""
    classes = max(1, shape[-1]) if shape else 1
    if "sparse" in name:
        return rng.integers(0, classes, shape[:-1], dtype=np.int32)
    if "categorical" in name or "kl_divergence" in name:
        labels = rng.integers(0, classes, shape[:-1])
        return np.eye(classes, dtype=np.float32)[labels]
    return rng.random(shape, dtype=np.float32)


@dataclass
class FileCell:
    """A cell's step and outputs, and the settings it ran with."""

    step: Callable[[], object]
    outputs: Callable[[], dict[str, np.ndarray]]
    extra: dict[str, str]
    model: Any = None  # the file's model and the cell's inputs, packed as it takes them: what
    inputs: Any = None  # the backend's FLOP counter counts (backend.py, count_flops)


def build(spec: WorkloadSpec, cache: ModelCache) -> FileCell:
    """A cell of the file in spec.model: its model restored to the file's state, in the
    cell's mode, fed the cell's inputs (device tensors made once)."""
    request = spec.model
    assert request is not None  # the agent calls it for model cells only
    loaded = cache.get(request.path, request.sha256)
    train = spec.phase == "train"
    if train and not loaded.compiled:
        raise UnsupportedWorkload(
            f"phase train for {os.path.basename(request.path)}: {TRAIN_REASON}"
        )
    model = loaded.model
    loaded.restore()
    keras.utils.set_random_seed(spec.seed)
    extra = training.set_mode(model, cache.backend, spec.mode)
    arrays = request.arrays(spec.seed)
    if set(arrays) != set(loaded.input_names):
        raise CatalogueError(
            f"model.inputs: {', '.join(sorted(arrays))}; the model's inputs are "
            + ", ".join(loaded.input_names),
            "model",
        )
    tensors = [keras.ops.convert_to_tensor(arrays[name]) for name in loaded.input_names]
    inputs = loaded.pack_inputs(tensors)
    extra |= {
        "model_format": FORMAT,
        "model_class": type(model).__name__,
        "dtype_policy": str(model.dtype_policy.name),
    }
    if train:
        targets = _targets(loaded, tensors, spec.seed)
        extra |= {
            "train_api": training.TRAIN_API,
            "optimizer": loaded.signature.details["optimizer"],
            "loss": loaded.signature.details["loss"],
            "targets": "synthetic, from the seed (sparse labels, one-hot or uniform [0, 1))",
        }
        step = training.train_step(model, inputs, targets)
    else:
        extra["infer_api"] = training.INFER_API
        step = training.infer_step(model, inputs)

    def outputs() -> dict[str, np.ndarray]:
        if train:  # the file's weights, called as they are: no predict function to compile
            loaded.restore()
            result = model(inputs, training=False)
        else:  # the cell's own compiled forward pass, the one it measured
            result = model.predict_on_batch(inputs)
        flat = keras.tree.flatten(result)
        return {
            name: np.asarray(keras.ops.convert_to_numpy(value))
            for name, value in zip(loaded.output_names, flat, strict=True)
        }

    return FileCell(step, outputs, extra, model, inputs)


def _targets(loaded: Loaded, tensors: Sequence[Any], seed: int) -> Any:
    """The targets of a training step: one per output, shaped like it (module docstring)."""
    model = loaded.model
    symbolic = [
        keras.KerasTensor(tuple(t.shape), keras.backend.standardize_dtype(t.dtype)) for t in tensors
    ]
    shapes = [
        tuple(int(d) for d in s.shape)
        for s in keras.tree.flatten(model.compute_output_spec(loaded.pack_inputs(symbolic)))
    ]
    rng = np.random.Generator(np.random.PCG64([seed, _TARGET_STREAM]))
    losses = _output_losses(model.loss, loaded.output_names)
    flat = [
        keras.ops.convert_to_tensor(make_target(rng, shape, loss))
        for shape, loss in zip(shapes, losses, strict=True)
    ]
    return loaded.pack_outputs(flat)
