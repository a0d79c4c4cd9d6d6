"""The user's ONNX files as onnx reads them, with no runtime loaded: the checked graph, its
inputs' and outputs' names, shapes and dtypes, its parameter count and what produced it.
model_file.py runs such a file in ONNX Runtime; other plugins that compile ONNX graphs build
on this module too (it imports onnx and numpy only)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from fwbench.runtime.model_files import ModelSignature, reject_unreadable
from fwbench.spec.model_files import DTYPES, TensorInfo

FORMAT = "onnx"


def tensor_info(value: onnx.ValueInfoProto) -> TensorInfo:
    """A graph input's or output's TensorInfo; ValueError for one fwbench cannot feed."""
    kind = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise ValueError(f"{value.name!r} is not a tensor (sequences and maps are not read)")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(kind.elem_type)).name
    if dtype not in DTYPES:
        raise ValueError(f"{value.name!r} has dtype {dtype}; fwbench feeds {', '.join(DTYPES)}")
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim)
    return TensorInfo(value.name, dims, dtype)


def load(path: str, *, check: bool = True, external_data: bool = True) -> onnx.ModelProto:
    """The graph (checked unless `check` is False; without its external weights when
    `external_data` is False); ModelRejected (one line) for a file onnx cannot read."""
    try:
        model = onnx.load(path, load_external_data=external_data)
        if check:
            onnx.checker.check_model(model)
    except Exception as error:  # noqa: BLE001 (the framework's reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None
    return model


def parameters(model: onnx.ModelProto) -> int:
    """Elements of every initializer (the graph's weights), as the file declares them."""
    return sum(int(np.prod(init.dims, dtype=np.int64)) for init in model.graph.initializer)


def details(model: onnx.ModelProto) -> dict[str, str]:
    """What produced the file and which opsets it uses (ModelSignature.details)."""
    opsets = ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import)
    return {
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opset": opsets,
        "ir_version": str(model.ir_version),
    }


def inspect(path: str, train_reason: str) -> ModelSignature:
    """The file's signature as onnx reads it; inference only, `train_reason` saying why."""
    model = load(path)
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    try:
        inputs = tuple(tensor_info(v) for v in graph.input if v.name not in weights)
        outputs = tuple(tensor_info(v) for v in graph.output)
    except ValueError as error:
        raise reject_unreadable(path, FORMAT, error) from None
    return ModelSignature(
        inputs=inputs,
        outputs=outputs,
        parameters=parameters(model),
        phases=("infer",),
        unsupported_reasons={"train": train_reason},
        details=details(model),
    )
