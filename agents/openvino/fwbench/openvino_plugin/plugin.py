"""OpenVinoPlugin: inference of the catalogue's models and operators with OpenVINO on its CPU
device.

The graphs are the onnxruntime plugin's (fwbench.onnxruntime_plugin.models and graphs, which
import onnx and numpy only: no ONNX Runtime is installed here), read by OpenVINO's ONNX
reader. They reproduce PyTorch's definitions and layouts, so the results stand beside
torch's (family "torch"). Each build reshapes the graph to the cell's shapes and compiles it
with the cell's performance hint (the modes: latency, throughput) and threads, float32 asked
for explicitly; compiled.py sets the inputs once on one infer request. Only inference:
OpenVINO compiles models for inference and has no backward pass.

At construction the plugin compiles and runs the smallest graph (lenet) and refuses to start,
with one line, when that fails or when FWBENCH_DEVICE=cuda asks for a GPU."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

import numpy as np
import onnx
import openvino as ov
import psutil

from fwbench.onnxruntime_plugin import models, onnx_file
from fwbench.onnxruntime_plugin.graphs import OPSET
from fwbench.openvino_plugin import compiled, model_file
from fwbench.openvino_plugin.compiled import MODES
from fwbench.runtime import architectures as arch
from fwbench.runtime import onnx_flops
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import (
    EQUIVALENCE,
    MODEL_FILES,
    BuiltStep,
    Capability,
    DeviceInfo,
    InvalidContext,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
    translate_out_of_memory,
)
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, param_count

PLUGIN_VERSION = "0.1.0"
DTYPES = ("float32",)
TRAIN_REASON = "OpenVINO compiles models for inference and runs no backward pass: inference only"
_TRANSFORMER_REASON = (
    "not offered by the openvino plugin: it runs the onnxruntime plugin's graphs, built by "
    "hand from the architecture tables, which cover the image and sequence models and the "
    "gemm/conv2d ops"
)
UNSUPPORTED_REASONS: Mapping[str, str] = {
    "*/train": TRAIN_REASON,
    **dict.fromkeys(("attention", *arch.TRANSFORMER_NAMES, "generate"), _TRANSFORMER_REASON),
}
P = ParamSpec("P")
T = TypeVar("T")


class StartupRefused(InvalidContext, RuntimeError):
    """The agent cannot start (one line, exit 2): a GPU asked for, a world, or the smallest
    graph failed to compile or run."""


def _translated(function: Callable[P, T]) -> Callable[P, T]:
    return translate_out_of_memory(compiled.is_out_of_memory, function)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _compile_graph(
    graph: models.Graph, inputs: Mapping[str, np.ndarray], mode: str, threads: int
) -> compiled.BoundRequest:
    model = compiled.read(graph.serialized)
    compiled.reshape(model, {name: array.shape for name, array in inputs.items()})
    return compiled.BoundRequest(compiled.compile_for(model, mode, threads), inputs)


def _self_check(threads: int) -> int:
    """Compiles and runs lenet once in the default mode with `threads`; returns the threads
    OpenVINO took (its default for 0, never more than the cores it may use)."""
    try:
        graph = models.build_model("lenet", {}, None, 0)
        feed = {models.INPUT: np.zeros((1, 1, 28, 28), np.float32)}
        bound = _compile_graph(graph, feed, MODES[0], threads)
        logits = bound.outputs()[models.OUTPUT]
        if logits.shape != (1, arch.NUM_CLASSES["lenet"]) or not np.isfinite(logits).all():
            raise RuntimeError(f"lenet's logits came out {logits.shape}, not finite 1x10")
        return compiled.threads_of(bound.compiled)
    except Exception as error:
        message = f"openvino plugin: lenet self-check failed: {_first_line(error)}"
        raise StartupRefused(message) from error


class OpenVinoPlugin:
    optional_capabilities = frozenset({EQUIVALENCE, MODEL_FILES})
    model_formats = (onnx_file.FORMAT,)
    model_capability = Capability(phases=("infer",), dtypes=DTYPES, modes=MODES)
    equivalence_models = frozenset(models.MODELS)
    equivalence_trains = False

    def __init__(self, context: PluginContext) -> None:
        if context.world is not None:
            raise StartupRefused("the openvino plugin runs alone: it has no distributed mode")
        if context.device == "cuda":
            raise StartupRefused(
                "FWBENCH_DEVICE=cuda but the openvino plugin runs OpenVINO's CPU device only "
                f"(devices here: {', '.join(compiled.core().available_devices)})"
            )
        self.threads = context.threads
        self.default_threads = _self_check(context.threads)

    # ----------------------------------------------------------------------- FrameworkPlugin

    def describe(self) -> PluginDescription:
        capability = Capability(phases=("infer",), dtypes=DTYPES, modes=MODES)
        return PluginDescription(
            framework="openvino",
            framework_version=compiled.version(),
            plugin_version=PLUGIN_VERSION,
            libraries=self._libraries(),
            environment={k: v for k, v in os.environ.items() if k.startswith("OV_")},
            devices=(DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total),),
            intra_op_threads=self.default_threads,
            inter_op_threads=1,  # one infer request: nothing runs beside it
            capabilities=dict.fromkeys((*models.OPS, *models.MODELS), capability),
            family="torch",  # the graphs reproduce PyTorch's definitions; torch never loads
            family_version="",
            unsupported_reasons=UNSUPPORTED_REASONS,
        )

    def _libraries(self) -> dict[str, str]:
        core = compiled.core()
        return {
            "openvino_build": str(ov.__version__),
            "onnx": onnx.__version__,
            "opset": str(OPSET),
            "numpy": np.__version__,
            "cpu_device": str(core.get_property(compiled.DEVICE, "FULL_DEVICE_NAME")),
            "cpu_capabilities": ",".join(
                core.get_property(compiled.DEVICE, "OPTIMIZATION_CAPABILITIES")
            ),
        }

    def _check(self, spec: WorkloadSpec) -> None:
        if spec.model is not None:  # the runtime checked it against model_capability
            return
        name = spec.workload.name
        if name not in (*models.OPS, *models.MODELS):
            reason = UNSUPPORTED_REASONS.get(name, "not offered by the openvino plugin")
            raise UnsupportedWorkload(f"{name}: {reason}")
        if spec.phase != "infer":
            raise UnsupportedWorkload(f"phase {spec.phase} for {name}: {TRAIN_REASON}")
        if spec.dtype not in DTYPES:
            raise UnsupportedWorkload(f"openvino plugin: no {spec.dtype}; offered: float32")
        if spec.mode not in MODES:
            raise UnsupportedWorkload(
                f"openvino plugin has no mode {spec.mode!r}; modes (performance hints): "
                + ", ".join(MODES)
            )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        self._check(spec)
        return _translated(self._build)(spec)

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        threads = spec.threads or self.threads
        if spec.model is not None:
            bound = model_file.build(spec, threads)
            settings = self._settings(spec, bound, threads, "")
            model = spec.model
            return BuiltStep(
                _translated(bound.step),
                settings,
                outputs=_translated(bound.outputs),
                flops=lambda: onnx_flops.count(model.path, model.inputs),
            )
        name = spec.workload.name
        graph = models.cell_graph(name, spec.params, spec.batch_size, spec.seed)
        inputs = models.synthetic_inputs(graph, spec.batch_size, spec.seed)
        bound = _compile_graph(graph, inputs, spec.mode, threads)
        layout = "" if name in ("gemm", "lstm") else "NCHW"
        settings = self._settings(spec, bound, threads, layout)
        settings = dataclasses.replace(
            settings, extra={**settings.extra, **models.describe_graph()}
        )
        return BuiltStep(_translated(bound.step), settings)

    def _settings(
        self, spec: WorkloadSpec, bound: compiled.BoundRequest, threads: int, layout: str
    ) -> Settings:
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=compiled.threads_of(bound.compiled),
            inter_op_threads=1,
            mode=spec.mode,
            layout=layout,
            device="cpu",
            extra=compiled.settings_extra(bound.compiled, threads),
        )

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return model_file.inspect(path)

    def synchronize(self, output: object) -> None:
        """request.infer() returns when the inference is done: nothing to wait for."""

    # ---------------------------------------------------------------------- equivalence

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        if model not in models.MODELS:
            raise ValueError(f"openvino plugin builds no {model}")
        return models.canonical_weights(model, seed)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        """Inference logits only (equivalence_trains is False): the losses are None."""
        params, feed = models.equivalence_feed(case.model, case.inputs)
        graph = models.build_model(case.model, params, case.weights)
        bound = _compile_graph(graph, {models.INPUT: feed}, MODES[0], self.threads)
        logits = bound.outputs()[graph.output]
        return EquivalenceResult(
            param_count=param_count(case.weights),
            eval_logits=np.asarray(logits, np.float32),
            loss_before=None,
            loss_after=None,
        )
