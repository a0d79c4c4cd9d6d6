"""A user's model file, as collector and agents both see it (agent.proto's ModelFile, since 1.7).

One place for what both sides must do alike: which formats exist and how a path is told to be
one; the file's digest (a folder's too); the inputs every agent makes from the run's seed, so
that each feeds the model the same numbers; the outputs an agent sends back, and how they are
compared. NumPy is imported only where arrays are made: the collector's light commands import
this module for its names."""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fwbench.agent.v1 import agent_pb2
from fwbench.spec.catalogue import WorkloadDef

if TYPE_CHECKING:
    import numpy as np

# Format -> what it is; the names Describe.model_formats uses.
FORMATS: Mapping[str, str] = {
    "onnx": "an ONNX graph (.onnx)",
    "keras": "a Keras 3 model file (.keras)",
    "savedmodel": "a TensorFlow SavedModel (a folder with saved_model.pb)",
    "torch_export": "a PyTorch program saved by torch.export (.pt2)",
    "jax_export": "a JAX function serialized by jax.export (.jax)",
    "torchscript": "a TorchScript module saved by torch.jit.save (.pt, .torchscript)",
}
SUFFIXES = {
    ".onnx": "onnx",
    ".keras": "keras",
    ".pt2": "torch_export",
    ".jax": "jax_export",
    ".pt": "torchscript",
    ".torchscript": "torchscript",
}
# The dtypes a model's inputs and outputs may have (NumPy's names).
DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")
# RunResult.outputs: the data of all outputs together stays under this (gRPC's default
# message limit is 4 MiB); a longer output sends its first elements.
OUTPUT_BYTES = 2 * 1024 * 1024
MAX_BATCH_SIZE = 65536
# RunRequest.workload for a model file: lower-case letters, digits and . _ - : @
_NAME = re.compile(r"[a-z0-9._:@-]{1,200}")
_SAVED_MODEL = ("saved_model.pb", "saved_model.pbtxt")


class ModelFileError(ValueError):
    """A path that is not a model file fwbench can read; the message is one line."""


def detect_format(path: Path) -> str:
    """The format of `path`, from what it is (a folder with saved_model.pb) or its suffix;
    raises ModelFileError naming the path and the formats there are."""
    if not path.exists():
        raise ModelFileError(f"{path}: no such file or folder")
    if path.is_dir():
        if any((path / name).is_file() for name in _SAVED_MODEL):
            return "savedmodel"
        raise ModelFileError(f"{path}: a folder without saved_model.pb is no SavedModel")
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        known = ", ".join(f"{s} ({f})" for s, f in SUFFIXES.items())
        raise ModelFileError(
            f"{path}: cannot tell its format from {path.suffix or 'no suffix'!r}; fwbench reads "
            f"{known} and SavedModel folders"
        )
    if fmt == "keras" and not zipfile.is_zipfile(path):
        raise ModelFileError(f"{path}: not a Keras 3 model file (a .keras file is a zip archive)")
    return fmt


def digest(path: Path) -> str:
    """Hex SHA-256 of a file; of a folder, of every file's relative path and content in sorted
    order (each path, a NUL, the content's own digest, a newline)."""
    if path.is_file():
        return _file_digest(path)
    total = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        total.update(f"{item.relative_to(path).as_posix()}\0{_file_digest(item)}\n".encode())
    return total.hexdigest()


def size(path: Path) -> int:
    """Bytes of a file, or of every file in a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def workload_name(path: Path, sha256: str) -> str:
    """The cell's workload for a model file: "model:STEM@DIGEST8", lower-case, unique per
    content (two versions of one file are two workloads)."""
    stem = re.sub(r"[^a-z0-9._-]+", "-", path.name.lower().removesuffix(path.suffix.lower()))
    return f"model:{stem.strip('-')[:150] or 'model'}@{sha256[:8]}"


def workload_def(name: str, what: str) -> WorkloadDef:
    """The workload of a model file, as collector and agents both define it: kind "model",
    both phases (the agent says which it runs), no shape parameters, no FLOPs known ("0")."""
    return WorkloadDef(
        name=name,
        kind="model",
        description=f"the user's model file {what}",
        item="one item of the model's batch",
        phases=("train", "infer"),
        max_batch_size=MAX_BATCH_SIZE,
        flops_forward="0",
    )


def is_model_workload(name: str) -> bool:
    return name.startswith("model:")


def check_workload_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ModelFileError(
            f"workload {name!r}: a model file's name is 1..200 of a-z 0-9 . _ - : @"
        )


@dataclass(frozen=True)
class TensorInfo:
    """An input or output: its name, shape (None where the model leaves a dimension open) and
    NumPy dtype name."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str

    def describe(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name} {self.dtype}[{dims}]"


def resolve_shapes(
    inputs: Sequence[TensorInfo], batch_size: int, given: Mapping[str, tuple[int, ...]]
) -> tuple[TensorInfo, ...]:
    """Every input's full shape for a cell: the shape `given` for it (--input NAME=SHAPE, the
    batch axis included), else the signature's with an open first axis at `batch_size`.
    Raises ModelFileError naming the first input with a dimension still open, or a given
    shape the signature contradicts."""
    unknown = sorted(set(given) - {i.name for i in inputs})
    if unknown:
        names = ", ".join(i.name for i in inputs)
        raise ModelFileError(f"--input {unknown[0]}: the model has no such input (it has {names})")
    resolved = []
    for spec in inputs:
        shape = given.get(spec.name)
        if shape is None:
            dims = list(spec.shape)
            if dims and dims[0] is None:
                dims[0] = batch_size
            if any(d is None for d in dims):
                raise ModelFileError(
                    f"input {spec.describe()} leaves a dimension open besides the batch: give "
                    f"it with --input {spec.name}=" + "x".join(str(d or "N") for d in dims)
                )
            shape = tuple(int(d) for d in dims if d is not None)
        elif len(shape) != len(spec.shape) or any(
            d is not None and d != s for d, s in zip(spec.shape, shape, strict=False)
        ):
            raise ModelFileError(
                f"--input {spec.name}={'x'.join(map(str, shape))} does not fit the model's "
                f"{spec.describe()}"
            )
        resolved.append(TensorInfo(spec.name, tuple(shape), spec.dtype))
    return tuple(resolved)


def batch_fixed_at(inputs: Sequence[TensorInfo]) -> int | None:
    """The batch size a model fixes (its inputs' first axes all the same number), else None."""
    firsts = {i.shape[0] if i.shape else None for i in inputs}
    if len(firsts) == 1 and (only := firsts.pop()) is not None:
        return only
    return None


def make_inputs(inputs: Sequence[TensorInfo], seed: int) -> dict[str, np.ndarray]:
    """The numbers every agent feeds a model: for each input in order, from one PCG64 stream of
    `seed`, uniform doubles in [0, 1) (NumPy's `Generator.random`, the same bits on every
    NumPy since 1.17) mapped to [-1, 1) for floating inputs, and to 0 or 1 for integer and
    boolean ones (ids below any vocabulary, masks)."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    arrays = {}
    for spec in inputs:
        shape = tuple(int(d) for d in spec.shape if d is not None)
        if len(shape) != len(spec.shape):
            raise ModelFileError(f"input {spec.describe()}: a dimension is still open")
        uniform = rng.random(int(np.prod(shape, dtype=np.int64)))
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            values = (uniform * 2.0 - 1.0).astype(dtype)
        elif dtype.kind == "b":
            values = uniform < 0.5
        else:
            values = (uniform < 0.5).astype(dtype)
        arrays[spec.name] = values.reshape(shape)
    return arrays


def truncated(array: np.ndarray, limit_bytes: int) -> np.ndarray:
    """The first elements of `array` flattened, as many as fit in `limit_bytes`."""
    flat = array.reshape(-1)
    return flat[: max(1, limit_bytes // max(1, flat.dtype.itemsize))]


@dataclass(frozen=True)
class OutputDifference:
    """How far an agent's outputs are from the reference's, over the elements both sent."""

    max_abs: float  # the largest |a - r|
    max_rel: float  # the largest |a - r| / (|r| + 1e-30)
    within: bool  # every element within the dtype's tolerance
    compared: int  # elements compared
    why: str  # empty when within; else one line saying where they differ


# Tolerances by the reference output's dtype: |a - r| <= atol + rtol * |r| for every element.
# float32: what two frameworks' kernels (other summation orders, fused multiply-adds, Winograd
# convolutions) leave on a deep network's outputs; half precision keeps 11 or 8 bits.
TOLERANCES: Mapping[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-7),
    "float32": (1e-4, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}


def compare_outputs(
    outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]
) -> OutputDifference:
    """Compares the outputs both sides sent (the shorter prefix of each), by name, or in order
    where the names differ but not their number (an exporter renamed them: "output_0");
    integer and boolean outputs must be equal."""
    import numpy as np

    worst_abs = worst_rel = 0.0
    compared = 0
    why = ""
    missing = sorted(set(reference) - set(outputs))
    if missing and len(outputs) == len(reference):
        outputs = dict(zip(reference, outputs.values(), strict=True))
    elif missing:
        return OutputDifference(np.inf, np.inf, False, 0, f"no output {missing[0]!r}")
    for name, ref in reference.items():
        got = np.asarray(outputs[name]).reshape(-1)
        ref = np.asarray(ref).reshape(-1)
        count = min(got.size, ref.size)
        a, r = got[:count].astype(np.float64), ref[:count].astype(np.float64)
        compared += count
        if not np.array_equal(np.isfinite(a), np.isfinite(r)):
            return OutputDifference(np.inf, np.inf, False, compared, f"{name}: not finite alike")
        finite = np.isfinite(r)
        diff = np.abs(a[finite] - r[finite])
        if diff.size:
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / (np.abs(r[finite]) + 1e-30)).max()))
        atol, rtol = TOLERANCES.get(ref.dtype.name, (0.0, 0.0))
        bad = diff > atol + rtol * np.abs(r[finite])
        if bad.any() and not why:
            index = int(np.flatnonzero(bad)[0])
            why = (
                f"{name}: {int(bad.sum())} of {count} elements beyond {ref.dtype.name}'s tolerance "
                f"(first at {index}: {a[finite][index]:.6g} against {r[finite][index]:.6g})"
            )
    return OutputDifference(worst_abs, worst_rel, not why, compared, why)


def output_messages(outputs: Mapping[str, np.ndarray]) -> list[agent_pb2.Tensor]:
    """RunResult.outputs: each output's first elements, OUTPUT_BYTES over all of them."""
    import numpy as np

    share = OUTPUT_BYTES // max(1, len(outputs))
    messages = []
    for name, value in outputs.items():
        array = np.asarray(value)
        if array.dtype.name not in DTYPES and array.dtype.kind == "f":
            array = array.astype(np.float32)  # bfloat16 and friends: float32 holds them
        data = truncated(np.ascontiguousarray(array), share)
        messages.append(
            agent_pb2.Tensor(
                name=name,
                shape=list(array.shape),
                dtype=array.dtype.name,
                data=data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes(),
                elements=data.size,
            )
        )
    return messages


def output_arrays(messages: Sequence[agent_pb2.Tensor]) -> dict[str, np.ndarray]:
    """The flattened arrays an agent sent; raises ModelFileError for a message that does not
    hold what it says (a dtype outside DTYPES, a size that is not elements x the dtype's)."""
    import numpy as np

    arrays = {}
    for message in messages:
        if message.dtype not in DTYPES:
            raise ModelFileError(
                f"output {message.name!r}: dtype {message.dtype!r} is not one of {DTYPES}"
            )
        dtype = np.dtype(message.dtype).newbyteorder("<")
        if len(message.data) != message.elements * dtype.itemsize:
            raise ModelFileError(
                f"output {message.name!r}: {len(message.data)} bytes for {message.elements} "
                f"{message.dtype} elements"
            )
        arrays[message.name] = np.frombuffer(message.data, dtype).astype(dtype.newbyteorder("="))
    return arrays
