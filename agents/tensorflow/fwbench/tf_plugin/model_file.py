"""The user's TensorFlow SavedModels (capability "model_files", format "savedmodel": a folder
holding saved_model.pb and its variables): loaded with `tf.saved_model.load` on the agent's
device and run through its `serving_default` signature, the one TensorFlow Serving calls and
that `tf.saved_model.save` and Keras' `model.export(..., format="tf_saved_model")` write.

Names. A signature takes its inputs by keyword and returns a dict: inputs and outputs are named
by those keys, and listed (the outputs also returned) sorted by key. A dimension the signature
leaves open (None) is open here too; the first one is the batch.

Only inference: a SavedModel carries no loss or optimizer. Modes: "function" calls the
signature from a tf.function (a graph, as TensorFlow Serving runs it), "xla" compiles that
call with jit_compile=True; no eager mode, as a signature is a graph whoever calls it.
Parameters: the elements of the loaded object's `trainable_variables` (Keras' export keeps
them), else of the trainable variables the signature captures.

A loaded SavedModel is kept per (path, digest), the last two, so that InspectModel and the
cells of one run load a folder once; the loaded object is kept with its signature, which
needs the variables the object owns."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from fwbench.runtime import tf_flops
from fwbench.runtime.model_files import LoadedModels, ModelSignature, reject_unreadable
from fwbench.runtime.plugin import FlopCount, UnsupportedWorkload, WorkloadSpec
from fwbench.spec.catalogue import CatalogueError
from fwbench.spec.model_files import DTYPES, TensorInfo
from fwbench.tf_plugin.training import compile_fn

FORMAT = "savedmodel"
SIGNATURE = "serving_default"
TRAIN_REASON = "a SavedModel carries no loss or optimizer fwbench can train with: inference only"
MODES = ("function", "xla")  # the plugin's graph modes (training.MODES), the default first
CACHE_SIZE = 2  # SavedModels kept loaded: a run's, and one more


@dataclass(frozen=True)
class Loaded:
    """A loaded SavedModel: the object (it owns the variables), its serving signature and
    what InspectModel answers about it."""

    root: Any
    function: Callable[..., Mapping[str, tf.Tensor]]
    signature: ModelSignature


class ModelCache(LoadedModels[Loaded]):
    """Loaded SavedModels by (path, digest), the CACHE_SIZE most recently used, each loaded
    on `device`."""

    def __init__(self, device: str, size: int = CACHE_SIZE) -> None:
        super().__init__(lambda path: load(path, device), size)
        self.device = device


def load(path: str, device: str) -> Loaded:
    """The SavedModel in `path`, its variables on `device`; ModelRejected (one line) for a
    folder TensorFlow cannot load, one without a serving_default signature, or a signature
    fwbench cannot feed (an input dtype outside DTYPES, an unknown rank)."""
    try:
        with tf.device(device):
            root = tf.saved_model.load(path)
        function = _serving(root)
        inputs, outputs = signature_of(function)
    except Exception as error:  # noqa: BLE001 (TensorFlow's reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None
    signature = ModelSignature(
        inputs=inputs,
        outputs=outputs,
        parameters=_parameters(root, function),
        phases=("infer",),
        unsupported_reasons={"train": TRAIN_REASON},
        details={
            "tensorflow_version": tf.__version__,
            "signature": SIGNATURE,
            "signatures": ",".join(sorted(root.signatures)),
        },
    )
    return Loaded(root, function, signature)


def _serving(root: Any) -> Callable[..., Mapping[str, tf.Tensor]]:
    signatures = getattr(root, "signatures", None) or {}
    function = signatures.get(SIGNATURE)
    if function is None:
        found = ", ".join(sorted(signatures)) or "none"
        raise ValueError(f"it has no {SIGNATURE} signature (its signatures: {found})")
    return function  # type: ignore[no-any-return]


def signature_of(function: Any) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """(inputs, outputs) of a signature function, each sorted by key; ValueError for an input
    fwbench cannot make or an output it cannot send."""
    positional, named = function.structured_input_signature
    if positional:
        raise ValueError("the signature takes positional inputs; a signature's are by name")
    outputs = function.structured_outputs
    if not isinstance(outputs, Mapping):
        raise ValueError(f"the signature returns a {type(outputs).__name__}, not a dict")
    inputs = tuple(_tensor(name, named[name], "input") for name in sorted(named))
    if not inputs:
        raise ValueError("the signature takes no inputs")
    return inputs, tuple(_tensor(name, outputs[name], "output") for name in sorted(outputs))


def _tensor(name: str, tensor: Any, kind: str) -> TensorInfo:
    """An input's or output's TensorInfo; a floating output outside DTYPES (bfloat16) is
    sent as float32, so the signature says float32."""
    dtype: tf.DType = tensor.dtype
    if dtype.name in DTYPES:
        name_of_dtype = dtype.name
    elif kind == "output" and dtype.is_floating:
        name_of_dtype = "float32"
    else:
        raise ValueError(f"{kind} {name} has dtype {dtype.name}; fwbench uses {', '.join(DTYPES)}")
    shape = tensor.shape
    if shape.rank is None:
        if kind == "input":
            raise ValueError(f"input {name} has no known rank; fwbench needs its dimensions")
        return TensorInfo(name, (), name_of_dtype)
    return TensorInfo(name, tuple(shape.as_list()), name_of_dtype)


def _parameters(root: Any, function: Any) -> int:
    """Elements of the trainable variables (module docstring); 0 when none are known."""
    variables = getattr(root, "trainable_variables", None)
    if not isinstance(variables, list | tuple) or not variables:
        variables = getattr(function, "trainable_variables", None) or ()
    unique = {id(v): v for v in variables if isinstance(v, tf.Variable)}
    return sum(int(v.shape.num_elements() or 0) for v in unique.values())


def inspect(path: str, cache: ModelCache) -> ModelSignature:
    return cache.get(path).signature


@dataclass(frozen=True)
class FileCell:
    """A cell's step and outputs, and the settings it adds."""

    step: Callable[[], object]
    outputs: Callable[[], dict[str, np.ndarray]]
    extra: dict[str, str]
    flops: Callable[[], FlopCount]


def build(spec: WorkloadSpec, cache: ModelCache) -> FileCell:
    """A cell of the SavedModel in spec.model: the signature called in the cell's mode on the
    cell's inputs, made once as tensors on the agent's device."""
    request = spec.model
    assert request is not None  # the plugin calls it for model cells only
    name = os.path.basename(request.path.rstrip("/"))
    if spec.phase != "infer":
        raise UnsupportedWorkload(f"phase {spec.phase} for {name}: {TRAIN_REASON}")
    if spec.mode not in MODES:
        raise UnsupportedWorkload(f"mode {spec.mode!r} for a SavedModel; modes: {MODES}")
    loaded = cache.get(request.path, request.sha256)
    _check_inputs(request.inputs, loaded.signature.inputs)
    arrays = request.arrays(spec.seed)
    with tf.device(cache.device):
        feed = {info.name: tf.constant(arrays[info.name]) for info in loaded.signature.inputs}
    function = loaded.function
    call = compile_fn(lambda inputs: function(**inputs), spec.mode)
    names = [info.name for info in loaded.signature.outputs]

    def step() -> object:
        return call(feed)

    def outputs() -> dict[str, np.ndarray]:
        result = call(feed)
        return {key: _numpy(result[key]) for key in names}

    def flops() -> FlopCount:  # TensorFlow's profiler, over the signature at these shapes
        specs = {key: tf.TensorSpec.from_tensor(value) for key, value in feed.items()}
        return tf_flops.count(
            tf.function(lambda inputs: function(**inputs)).get_concrete_function(specs)
        )

    extra = {"model_format": FORMAT, "signature": SIGNATURE}
    return FileCell(step, outputs, extra, flops)


def _check_inputs(given: tuple[TensorInfo, ...], declared: tuple[TensorInfo, ...]) -> None:
    """The cell's inputs are the signature's: the same names, dtypes and ranks, and the same
    size on every dimension it fixes; CatalogueError naming the first that is not."""
    by_name = {info.name: info for info in given}
    if set(by_name) != {info.name for info in declared}:
        raise CatalogueError(
            f"model.inputs: {', '.join(sorted(by_name))}; the signature's inputs are "
            + ", ".join(info.name for info in declared),
            "model",
        )
    for info in declared:
        cell = by_name[info.name]
        fits = len(cell.shape) == len(info.shape) and all(
            d is None or d == c for d, c in zip(info.shape, cell.shape, strict=True)
        )
        if cell.dtype != info.dtype or not fits:
            raise CatalogueError(
                f"model.inputs {cell.describe()} does not fit the signature's {info.describe()}",
                "model",
            )


def _numpy(value: tf.Tensor) -> np.ndarray:
    if value.dtype.is_floating and value.dtype.name not in DTYPES:  # bfloat16: as _tensor says
        value = tf.cast(value, tf.float32)
    return np.asarray(value.numpy())
