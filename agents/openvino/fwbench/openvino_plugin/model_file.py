"""The user's ONNX files (capability "model_files") through OpenVINO's own reader: the
signature from the model OpenVINO reads (a dimension it leaves dynamic is open, None), the
parameter count and the producer from the file's ONNX header (onnx_file.py, without its
external weights); a cell reshapes the model to the cell's input shapes, compiles it with the
cell's hint and threads, and sets the inputs once, as the plugin's own graphs."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import openvino as ov

from fwbench.onnxruntime_plugin import onnx_file
from fwbench.onnxruntime_plugin.onnx_file import FORMAT
from fwbench.openvino_plugin import compiled
from fwbench.runtime.model_files import ModelRejected, ModelSignature, reject_unreadable
from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec
from fwbench.spec.model_files import DTYPES, TensorInfo

TRAIN_REASON = "OpenVINO compiles models for inference and runs no backward pass"


def _tensor(port: ov.Output, name: str) -> TensorInfo:
    shape = port.get_partial_shape()
    if shape.rank.is_dynamic:
        raise ValueError(f"{name!r} has no known rank")
    dims = tuple(d.get_length() if d.is_static else None for d in shape)
    dtype = np.dtype(port.get_element_type().to_dtype()).name
    if dtype not in DTYPES:
        raise ValueError(f"{name!r} has dtype {dtype}; fwbench feeds {', '.join(DTYPES)}")
    return TensorInfo(name, dims, dtype)


def read(path: str) -> ov.Model:
    """The file as OpenVINO reads it; ModelRejected (one line) when it cannot."""
    try:
        return compiled.core().read_model(path)
    except Exception as error:  # noqa: BLE001 (the framework's reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None


def inspect(path: str) -> ModelSignature:
    model = read(path)
    try:
        inputs = tuple(_tensor(p, compiled.port_name(p)) for p in model.inputs)
        outputs = tuple(_tensor(p, compiled.port_name(p)) for p in model.outputs)
    except (ValueError, TypeError, RuntimeError) as error:
        raise reject_unreadable(path, FORMAT, error) from None
    header = onnx_file.load(path, check=False, external_data=False)
    return ModelSignature(
        inputs=inputs,
        outputs=outputs,
        parameters=onnx_file.parameters(header),
        phases=("infer",),
        unsupported_reasons={"train": TRAIN_REASON},
        details={**onnx_file.details(header), "read_by": f"openvino {compiled.version()}"},
    )


def build(spec: WorkloadSpec, threads: int) -> compiled.BoundRequest:
    """The cell's file read, reshaped to the cell's inputs, compiled with its hint and
    threads; its inputs made from the seed and set once."""
    model_request = spec.model
    assert model_request is not None  # the plugin calls it for model cells only
    if spec.phase != "infer":
        raise UnsupportedWorkload(f"phase {spec.phase} for {spec.workload.name}: {TRAIN_REASON}")
    model = reshaped(spec)
    try:
        program = compiled.compile_for(model, spec.mode, threads)
    except Exception as error:
        if compiled.is_out_of_memory(error):
            raise
        raise reject_unreadable(model_request.path, FORMAT, error) from None
    return compiled.BoundRequest(program, model_request.arrays(spec.seed))


def reshaped(spec: WorkloadSpec) -> ov.Model:
    """The cell's file as OpenVINO reads it, reshaped to the cell's inputs (ModelRejected,
    one line, when it cannot be)."""
    model_request = spec.model
    assert model_request is not None
    model = read(model_request.path)
    shapes: Mapping[str, tuple[int, ...]] = {
        t.name: tuple(int(d) for d in t.shape if d is not None) for t in model_request.inputs
    }
    try:
        compiled.reshape(model, shapes)
    except Exception as error:  # noqa: BLE001 (OpenVINO's reason, in one line)
        text = " ".join(str(error).split())[:300]
        asked = ", ".join(f"{n}={'x'.join(map(str, s))}" for n, s in shapes.items())
        raise ModelRejected(
            f"model: OpenVINO cannot reshape the inputs to {asked}: {text}"
        ) from None
    return model
