"""OpenVinoPlugin: inference of the catalogue's models and operators with OpenVINO on its CPU
device.

The graphs are the onnxruntime plugin's (fwbench.onnxruntime_plugin's models, graphs,
transformer_graphs and generation_graphs, which import onnx and numpy only: no ONNX Runtime
is installed here), read by OpenVINO's ONNX reader. They reproduce PyTorch's definitions and
layouts (the transformers Hugging Face's), so the results stand beside torch's (family
"torch"). Each build reshapes the graph to the cell's shapes and compiles it with the cell's
performance hint (the modes: latency, throughput) and threads, float32 asked for explicitly
(OpenVINO's default on a CPU with bfloat16 is bf16); compiled.py sets the inputs once on one
infer request. generate compiles a prefill and a decode graph around an explicit KV cache
(generation.py). Only inference: OpenVINO compiles models for inference and has no backward
pass.

At construction the plugin compiles and runs the smallest graph (lenet) and refuses to start,
with one line, when that fails or when FWBENCH_DEVICE=cuda asks for a GPU."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np
import onnx
import openvino as ov
import psutil

from fwbench.onnxruntime_plugin import greedy_loop, models, onnx_file, transformer_equivalence
from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.onnxruntime_plugin.graphs import OPSET
from fwbench.openvino_plugin import compiled, generation, model_file, profiling
from fwbench.openvino_plugin.compiled import MODES
from fwbench.runtime import architectures as arch
from fwbench.runtime import onnx_flops
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import (
    EQUIVALENCE,
    MODEL_FILES,
    PROFILE,
    BuiltStep,
    Capability,
    DeviceInfo,
    GenerationSteps,
    InvalidContext,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
    translate_out_of_memory,
)
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, param_count

PLUGIN_VERSION = "0.1.0"
DTYPES = ("float32",)
TRAIN_REASON = "OpenVINO compiles models for inference and runs no backward pass: inference only"
UNSUPPORTED_REASONS: Mapping[str, str] = {"*/train": TRAIN_REASON}
# The onnxruntime plugin's transformer graphs (transformer_graphs, generation_graphs).
TRANSFORMER_WORKLOADS = ("attention", *arch.TRANSFORMER_NAMES, "generate")
OFFERED = (*models.OPS, *models.MODELS, *TRANSFORMER_WORKLOADS)
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


def _reshaped(graph: models.Graph, inputs: Mapping[str, np.ndarray]) -> ov.Model:
    model = compiled.read(graph.serialized)
    compiled.reshape(model, {name: array.shape for name, array in inputs.items()})
    return model


def _compile_graph(
    graph: models.Graph, inputs: Mapping[str, np.ndarray], mode: str, threads: int
) -> compiled.BoundRequest:
    model = _reshaped(graph, inputs)
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
    optional_capabilities = frozenset({EQUIVALENCE, MODEL_FILES, PROFILE})
    model_formats = (onnx_file.FORMAT,)
    model_capability = Capability(phases=("infer",), dtypes=DTYPES, modes=MODES)
    equivalence_models = frozenset((*models.MODELS, *arch.TRANSFORMER_NAMES))
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
        self._profilable: profiling.Profilable | None = None

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
            capabilities=dict.fromkeys(OFFERED, capability),
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
        if name not in OFFERED:
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
        self._profilable = None  # set by a graph cell or a model file: what profile() runs
        threads = spec.threads or self.threads
        if spec.model is not None:
            bound = model_file.build(spec, threads)
            self._profilable = profiling.Profilable(
                bound, lambda: model_file.reshaped(spec), spec.mode, threads
            )
            settings = self._settings(spec, bound.compiled, threads, "")
            model = spec.model
            return BuiltStep(
                _translated(bound.step),
                settings,
                outputs=_translated(bound.outputs),
                flops=lambda: onnx_flops.count(model.path, model.inputs),
            )
        name = spec.workload.name
        if name == "generate":
            return self._generate(spec, threads)
        transformer = name in TRANSFORMER_WORKLOADS
        cell_graph = tg.cell_graph if transformer else models.cell_graph
        graph = cell_graph(name, spec.params, spec.batch_size, spec.seed)
        inputs = models.synthetic_inputs(graph, spec.batch_size, spec.seed)
        bound = _compile_graph(graph, inputs, spec.mode, threads)
        self._profilable = profiling.Profilable(
            bound, lambda: _reshaped(graph, inputs), spec.mode, threads
        )
        layout = "" if transformer or name in ("gemm", "lstm") else "NCHW"
        settings = self._settings(spec, bound.compiled, threads, layout)
        extra = {**settings.extra, **models.describe_graph()}
        if transformer:
            extra["attention_kernel"] = _attention_kernel(bound.compiled)
        if name == "attention":
            extra["attention_layout"] = tg.ATTENTION_LAYOUT
        return BuiltStep(_translated(bound.step), dataclasses.replace(settings, extra=extra))

    def _generate(self, spec: WorkloadSpec, threads: int) -> BuiltStep:
        """The prefill and decode graphs, each compiled once, over greedy_loop's buffers."""
        run = generation.build(spec.params, spec.batch_size, spec.seed, spec.mode, threads)
        steps = run.steps(spec.params["new_tokens"])
        steps = GenerationSteps(
            _translated(steps.prefill), _translated(steps.decode), steps.decode_steps
        )
        settings = self._settings(spec, run.decode_compiled, threads, "")
        extra = {
            **settings.extra,
            **models.describe_graph(),
            **greedy_loop.kv_cache_settings(run.buffers, generation.SHARING),
            "attention_kernel": _attention_kernel(run.decode_compiled),
            "timed_step": "prefill: the prefill request's infer(); decode: the decode "
            "request's, then the new position's key and value written into the cache",
        }
        return BuiltStep.for_generation(steps, dataclasses.replace(settings, extra=extra))

    def _settings(
        self, spec: WorkloadSpec, model: ov.CompiledModel, threads: int, layout: str
    ) -> Settings:
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=compiled.threads_of(model),
            inter_op_threads=1,
            mode=spec.mode,
            layout=layout,
            device="cpu",
            extra=compiled.settings_extra(model, threads),
        )

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return model_file.inspect(path)

    def synchronize(self, output: object) -> None:
        """request.infer() returns when the inference is done: nothing to wait for."""

    def profiler(self) -> str:
        return profiling.PROFILER

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        return profiling.profile(self._profilable, run_steps, trace_dir)

    # ---------------------------------------------------------------------- equivalence

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        if model in arch.TRANSFORMER_NAMES:
            return tg.canonical_weights(model, seed, params or {})
        if model not in models.MODELS:
            raise ValueError(f"openvino plugin builds no {model}")
        return models.canonical_weights(model, seed)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        """Inference logits only (equivalence_trains is False): the losses are None. A gpt
        case with new_tokens also generates them on the generate workload's path."""
        if case.model in arch.TRANSFORMER_NAMES:
            return transformer_equivalence.equivalence(case, self._logits, self._generated)
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

    def _logits(self, graph: models.Graph, tokens: np.ndarray) -> np.ndarray:
        bound = _compile_graph(graph, {models.INPUT: tokens}, MODES[0], self.threads)
        return np.asarray(bound.outputs()[graph.output], np.float32)

    def _generated(
        self, params: Mapping[str, int], weights: Mapping[str, np.ndarray], prompt: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        run = generation.build(params, 0, 0, MODES[0], self.threads, weights, prompt, True)
        run.steps(params["new_tokens"]).generate()
        return greedy_loop.generated(run.buffers)


def _attention_kernel(model: ov.CompiledModel) -> str:
    """The graph's plain attention and what OpenVINO's CPU plugin made of the whole graph."""
    return f"{tg.ATTENTION_KERNEL}; OpenVINO's CPU layers: {compiled.runtime_layers(model)}"
