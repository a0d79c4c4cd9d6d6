"""The user's ONNX files (capability "model_files"): the signature read with onnx
(onnx_file.py), the file run in a session like the plugin's own graphs (the cell's
optimisation level and threads), its inputs bound once on the device, each output bound to
the device for ORT to allocate (a user's graph may leave output shapes open)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnxruntime as ort

from fwbench.onnxruntime_plugin import session
from fwbench.onnxruntime_plugin.onnx_file import FORMAT
from fwbench.onnxruntime_plugin.session import Device
from fwbench.runtime.model_files import reject_unreadable
from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec

TRAIN_REASON = "ONNX Runtime's inference sessions run no backward pass: inference only"


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
