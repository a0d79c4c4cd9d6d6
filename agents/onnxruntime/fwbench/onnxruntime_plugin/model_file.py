"""The user's ONNX files (capability "model_files"): the signature read with onnx, the file
run in a session like the plugin's own graphs (the cell's optimisation level and threads),
its inputs bound once on the device, each output bound to the device for ORT to allocate
(a user's graph may leave output shapes open)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from fwbench.onnxruntime_plugin import session
from fwbench.onnxruntime_plugin.session import Device
from fwbench.runtime.model_files import ModelSignature, reject_unreadable
from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec
from fwbench.spec.model_files import DTYPES, TensorInfo

FORMAT = "onnx"
TRAIN_REASON = "ONNX Runtime's inference sessions run no backward pass: inference only"


def _tensor(value: onnx.ValueInfoProto) -> TensorInfo:
    kind = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise ValueError(f"{value.name!r} is not a tensor (sequences and maps are not read)")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(kind.elem_type)).name
    if dtype not in DTYPES:
        raise ValueError(f"{value.name!r} has dtype {dtype}; fwbench feeds {', '.join(DTYPES)}")
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim)
    return TensorInfo(value.name, dims, dtype)


def load(path: str) -> onnx.ModelProto:
    """The graph, checked; ModelRejected (one line) for a file onnx cannot read."""
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as error:  # noqa: BLE001 (the framework's reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None
    return model


def inspect(path: str) -> ModelSignature:
    model = load(path)
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    try:
        inputs = tuple(_tensor(v) for v in graph.input if v.name not in weights)
        outputs = tuple(_tensor(v) for v in graph.output)
    except ValueError as error:
        raise reject_unreadable(path, FORMAT, error) from None
    parameters = sum(int(np.prod(init.dims, dtype=np.int64)) for init in graph.initializer)
    opsets = ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import)
    return ModelSignature(
        inputs=inputs,
        outputs=outputs,
        parameters=parameters,
        phases=("infer",),
        unsupported_reasons={"train": TRAIN_REASON},
        details={
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "opset": opsets,
            "ir_version": str(model.ir_version),
        },
    )


class ModelRun:
    """One cell of a user's graph: inputs bound once, outputs bound to the device."""

    def __init__(
        self, sess: ort.InferenceSession, device: Device, inputs: Mapping[str, np.ndarray]
    ) -> None:
        self.session = sess
        self.device = device
        self.binding = sess.io_binding()
        self._values = {
            name: ort.OrtValue.ortvalue_from_numpy(array, device.ort_device, device.index)
            for name, array in inputs.items()
        }
        for name, value in self._values.items():
            self.binding.bind_ortvalue_input(name, value)
        self.names = [o.name for o in sess.get_outputs()]
        for name in self.names:
            self.binding.bind_output(name, device.ort_device, device.index)

    def step(self) -> ort.IOBinding:
        self.session.run_with_iobinding(self.binding)
        return self.binding

    def outputs(self) -> dict[str, np.ndarray]:
        self.step()
        values = self.binding.copy_outputs_to_cpu()
        return dict(zip(self.names, (np.asarray(v) for v in values), strict=True))


def build(
    spec: WorkloadSpec, device: Device, intra: int, interop: int
) -> tuple[ModelRun, ort.InferenceSession]:
    """A session over the cell's file, its inputs made from the seed and bound."""
    model = spec.model
    assert model is not None  # the plugin calls it for model cells only
    if spec.phase != "infer":
        raise UnsupportedWorkload(f"phase {spec.phase} for {spec.workload.name}: {TRAIN_REASON}")
    try:
        sess = session.create(model.path, device, spec.mode, intra, interop)
    except Exception as error:
        if session.is_out_of_memory(error):
            raise
        raise reject_unreadable(model.path, FORMAT, error) from None
    return ModelRun(sess, device, model.arrays(spec.seed)), sess
