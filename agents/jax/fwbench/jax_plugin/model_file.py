"""The user's functions serialized by `jax.export` (capability "model_files", format
"jax_export", a `.jax` file holding `Exported.serialize()`'s bytes): the signature read from
the exported avals, the function run as `jax.jit(exported.call)` on the agent's device.

Names. An exported function keeps no argument names: its inputs are `input_0`, `input_1`, ...
in the order of its arguments flattened (jax's pytree: positional arguments, then keyword
arguments by name, nested ones depth first), its outputs `output_0`, `output_1`, ... in the
order of its results flattened, as every runtime names a model's outputs (an ONNX export
made with `output_names=["output_0", ...]` is compared output by output). A symbolic
dimension (`jax.export.symbolic_shape("b, 8")`) is open: the cell's shape fills it.

Only inference: an exported function carries no loss or optimizer. Its weights are constants
inside the program, so the signature counts no parameters. The deserialized function is kept
per file and digest. Reading needs the `flatbuffers` package (jax's serialization imports it):
without it the plugin reads no model files."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
from jax import export

from fwbench.runtime import xla_flops
from fwbench.runtime.model_files import ModelSignature, reject_unreadable
from fwbench.runtime.plugin import FlopCount, UnsupportedWorkload, WorkloadSpec
from fwbench.spec import model_files
from fwbench.spec.model_files import DTYPES, TensorInfo

FORMAT = "jax_export"
TRAIN_REASON = "an exported function carries no loss or optimizer: inference only"
_KEPT = 2  # functions kept deserialized: the file of a run, and one more
# jax.export's platform names that a device of each jax platform runs.
_RUNS_ON = {"cpu": ("cpu",), "gpu": ("cuda", "rocm")}


def available() -> bool:
    """Whether this environment can deserialize (jax.export's serialization needs
    flatbuffers, which jax does not install)."""
    return importlib.util.find_spec("flatbuffers") is not None


_functions: dict[tuple[str, str], export.Exported] = {}
_lock = threading.Lock()


def load(path: str, sha256: str = "") -> export.Exported:
    """The function in `path` (kept per path and digest); ModelRejected, one line, for a file
    jax cannot deserialize."""
    key = (path, sha256 or model_files.digest(Path(path)))
    with _lock:
        function = _functions.get(key)
    if function is not None:
        return function
    try:
        function = export.deserialize(bytearray(Path(path).read_bytes()))
    except Exception as error:  # noqa: BLE001 (the framework's reason, in one line)
        reason = f"not a jax.export serialization ({type(error).__name__}: {error})"
        raise reject_unreadable(path, FORMAT, ValueError(reason)) from None
    with _lock:
        while len(_functions) >= _KEPT:
            _functions.pop(next(iter(_functions)))
        _functions[key] = function
    return function


def _tensor(name: str, aval: jax.core.ShapedArray, kind: str) -> TensorInfo:
    dtype = np.dtype(aval.dtype).name
    if kind == "input" and dtype not in DTYPES:
        raise ValueError(f"input {name} has dtype {dtype}; fwbench feeds {', '.join(DTYPES)}")
    shape = tuple(d if isinstance(d, int) else None for d in aval.shape)
    return TensorInfo(name, shape, dtype)


def signature(function: export.Exported) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """(inputs, outputs) of an exported function; ValueError for an input fwbench cannot make."""
    inputs = tuple(_tensor(f"input_{i}", a, "input") for i, a in enumerate(function.in_avals))
    outputs = tuple(_tensor(f"output_{i}", a, "output") for i, a in enumerate(function.out_avals))
    return inputs, outputs


def inspect(path: str) -> ModelSignature:
    function = load(path)
    try:
        inputs, outputs = signature(function)
    except ValueError as error:
        raise reject_unreadable(path, FORMAT, error) from None
    return ModelSignature(
        inputs=inputs,
        outputs=outputs,
        parameters=0,  # the weights are constants in the program: not told apart
        phases=("infer",),
        unsupported_reasons={"train": TRAIN_REASON},
        details={
            "function": function.fun_name,
            "platforms": ",".join(function.platforms),
            "devices": str(function.nr_devices),
            "calling_convention": str(function.calling_convention_version),
        },
    )


def _check_runs_here(function: export.Exported, device: jax.Device) -> None:
    runs = _RUNS_ON.get(device.platform, (device.platform,))
    if not set(function.platforms) & set(runs):
        raise UnsupportedWorkload(
            f"the function was exported for {', '.join(function.platforms)}; this agent runs "
            f"on {device.platform}: export it with platforms=[{runs[0]!r}, ...]"
        )
    if function.nr_devices != 1:
        raise UnsupportedWorkload(
            f"the function was exported for {function.nr_devices} devices; an agent runs it on one"
        )


class ModelRun:
    """One cell of an exported function: its inputs on the device, the call jit-compiled
    (at the cell's shapes, where the export left a dimension symbolic)."""

    def __init__(
        self, function: export.Exported, inputs: Mapping[str, np.ndarray], device: jax.Device
    ) -> None:
        names = [t.name for t in signature(function)[0]]
        missing = [name for name in names if name not in inputs]
        if missing:
            raise UnsupportedWorkload(f"the cell gives no input {missing[0]!r} of the function")
        flat = [jax.device_put(inputs[name], device) for name in names]
        self.args, self.kwargs = jax.tree_util.tree_unflatten(function.in_tree, flat)
        self.call = jax.jit(function.call)
        jax.block_until_ready(flat)

    def step(self) -> object:
        return self.call(*self.args, **self.kwargs)

    def flops(self) -> FlopCount:
        """One call counted by XLA's cost analysis, lowered at the cell's shapes."""
        return xla_flops.count(self.call.lower(*self.args, **self.kwargs), jax.__version__)

    def outputs(self) -> dict[str, np.ndarray]:
        leaves = jax.tree_util.tree_leaves(self.step())
        return {f"output_{i}": _numpy(v) for i, v in enumerate(leaves)}


def _numpy(value: jax.Array) -> np.ndarray:
    array = np.asarray(jax.device_get(value))
    if array.dtype.name not in DTYPES and jax.numpy.issubdtype(array.dtype, jax.numpy.floating):
        return array.astype(np.float32)  # bfloat16 (ml_dtypes'): float32 holds it
    return array


def build(spec: WorkloadSpec, device: jax.Device) -> ModelRun:
    """The cell's run: the function (deserialized once per file), its inputs from the seed."""
    model = spec.model
    assert model is not None  # the plugin calls it for model cells only
    if spec.phase != "infer":
        raise UnsupportedWorkload(f"phase {spec.phase} for {spec.workload.name}: {TRAIN_REASON}")
    function = load(model.path, model.sha256)
    _check_runs_here(function, device)
    return ModelRun(function, model.arrays(spec.seed), device)
