"""OnnxRuntimePlugin: inference of the catalogue's models and operators with ONNX Runtime, on
the CPU or one NVIDIA GPU (the CUDA execution provider).

The graphs are built by this plugin (models.py, graphs.py; the transformers and the attention
op in transformer_graphs.py, generation's prefill and decode graphs in generation_graphs.py),
not exported from another framework: none is installed beside ONNX Runtime. They reproduce
PyTorch's definitions and layouts (the transformers Hugging Face's), so the results stand
beside torch's (family "torch"). Each build makes a new session (optimisation level = the
cell's mode, the cell's threads) over a graph cached per model, shape parameters and seed;
session.py binds the inputs once. generate runs two sessions around an explicit KV cache
(generation.py; CPU provider only). Only inference: ORT's inference sessions run no backward
pass, and onnxruntime-training's artifacts are not shipped.

At construction the plugin builds, checks and runs the smallest graph (lenet) on its device
and refuses to start, with one line, when that fails or when FWBENCH_DEVICE=cuda finds no CUDA
execution provider that works."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np
import onnx
import onnxruntime as ort
import psutil

from fwbench.onnxruntime_plugin import (
    generation,
    greedy_loop,
    model_file,
    models,
    onnx_file,
    profiling,
    session,
    transformer_equivalence,
)
from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.onnxruntime_plugin.graphs import OPSET, PLUGIN_VERSION
from fwbench.onnxruntime_plugin.session import MODES, Device
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
    float32_arithmetic,
    translate_out_of_memory,
)
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, param_count

DTYPES = ("float32",)
TRAIN_REASON = (
    "ONNX Runtime's inference sessions run no backward pass (onnxruntime-training's "
    "artifacts are not shipped): inference only"
)
UNSUPPORTED_REASONS: Mapping[str, str] = {"*/train": TRAIN_REASON}
# Workloads whose graphs transformer_graphs and generation_graphs build.
TRANSFORMER_WORKLOADS = ("attention", *arch.TRANSFORMER_NAMES, "generate")
# Variables that change what ONNX Runtime does; reported in describe() when set.
_ORT_VARIABLES = ("ORT_DISABLE_ALL_OPTIONAL_OPS", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
P = ParamSpec("P")
T = TypeVar("T")


class StartupRefused(InvalidContext, RuntimeError):
    """The agent cannot start (one line, exit 2): no working CUDA provider where one is
    required, or the smallest graph failed to build or run."""


def _translated(function: Callable[P, T]) -> Callable[P, T]:
    return translate_out_of_memory(session.is_out_of_memory, function)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _select_device(requested: str, tf32: bool | None) -> Device:
    """PluginContext.device: "cpu"; "cuda" (refuse without the CUDA provider); "auto". On
    CUDA, FWBENCH_TF32 (when set) becomes the provider's use_tf32."""
    available = ort.get_available_providers()
    has_cuda = session.CUDA_PROVIDER in available
    if requested == "cuda" and not has_cuda:
        raise StartupRefused(
            "FWBENCH_DEVICE=cuda but ONNX Runtime has no CUDAExecutionProvider "
            f"(available: {', '.join(available)})"
        )
    if requested == "cpu" or not has_cuda:
        return session.CPU
    if hasattr(ort, "preload_dlls"):
        # The CUDA and cuDNN libraries pip installed (nvidia-* wheels); where they are missing
        # the self-check's session says so.
        ort.preload_dlls()
    options = () if tf32 is None else (("use_tf32", "1" if tf32 else "0"),)
    return dataclasses.replace(session.CUDA, cuda_options=options)


def _self_check(device: Device) -> Device:
    """Builds, checks and runs lenet once on `device`; returns the device it really ran on
    ("auto" falls back to the CPU when the CUDA provider cannot run it)."""
    try:
        graph = models.build_model("lenet", {}, None, 0)
        run = session.create(graph.serialized, device, "all")
        logits = run.run(None, {models.INPUT: np.zeros((1, 1, 28, 28), np.float32)})[0]
        if logits.shape != (1, arch.NUM_CLASSES["lenet"]) or not np.isfinite(logits).all():
            raise RuntimeError(f"lenet's logits came out {logits.shape}, not finite 1x10")
    except Exception as error:
        message = f"onnxruntime plugin: lenet self-check failed: {_first_line(error)}"
        raise StartupRefused(message) from error
    if device.cuda and session.CUDA_PROVIDER not in run.get_providers():
        return session.CPU
    return device


class OnnxRuntimePlugin:
    optional_capabilities = frozenset({EQUIVALENCE, MODEL_FILES, PROFILE})
    model_formats = (onnx_file.FORMAT,)
    model_capability = Capability(phases=("infer",), dtypes=DTYPES, modes=MODES)
    equivalence_models = frozenset((*models.MODELS, *arch.TRANSFORMER_NAMES))
    equivalence_trains = False

    def __init__(self, context: PluginContext) -> None:
        self._profilable: profiling.Profilable | None = None
        if context.world is not None:
            raise StartupRefused("the onnxruntime plugin runs alone: it has no distributed mode")
        device = _select_device(context.device, context.tf32)
        try:
            device = _self_check(device)
        except StartupRefused:
            if context.device != "auto" or not device.cuda:
                raise
            device = _self_check(session.CPU)  # "auto": a CUDA provider with no usable GPU
        if context.device == "cuda" and not device.cuda:
            raise StartupRefused("FWBENCH_DEVICE=cuda but ONNX Runtime's CUDA provider fell back")
        self.device = device
        self.threads = context.threads
        self.interop_threads = context.interop_threads

    # ----------------------------------------------------------------------- FrameworkPlugin

    def describe(self) -> PluginDescription:
        capability = Capability(phases=("infer",), dtypes=DTYPES, modes=MODES)
        return PluginDescription(
            framework="onnxruntime",
            framework_version=ort.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries=self._libraries(),
            environment={k: os.environ[k] for k in _ORT_VARIABLES if k in os.environ},
            devices=self._devices(),
            intra_op_threads=self.threads or session.default_intra_op_threads(),
            inter_op_threads=1,  # sequential execution: the inter-op pool is never used
            capabilities=dict.fromkeys(self._offered(), capability),
            family="torch",  # its graphs reproduce PyTorch's definitions; torch never loads
            family_version="",
            unsupported_reasons=self._reasons(),
        )

    def _offered(self) -> tuple[str, ...]:
        offered = (*models.OPS, *models.MODELS, *TRANSFORMER_WORKLOADS)
        return tuple(name for name in offered if name not in self._reasons())

    def _reasons(self) -> Mapping[str, str]:
        """Why a workload is not offered; on CUDA also generate (generation.CUDA_REASON)."""
        if self.device.cuda:
            return {**UNSUPPORTED_REASONS, "generate": generation.CUDA_REASON}
        return UNSUPPORTED_REASONS

    def _libraries(self) -> dict[str, str]:
        libraries = {
            "onnx": onnx.__version__,
            "opset": str(OPSET),
            "numpy": np.__version__,
            "providers": ",".join(ort.get_available_providers()),
            "build_info": " ".join(ort.get_build_info().split()),
        }
        if self.device.cuda:
            libraries["cuda"] = str(getattr(ort, "cuda_version", "") or "")
        return libraries

    def _devices(self) -> tuple[DeviceInfo, ...]:
        devices = [DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total)]
        if self.device.cuda:
            devices.append(session.gpu_info(self.device.index))
        return tuple(devices)

    def _check(self, spec: WorkloadSpec) -> None:
        if spec.model is not None:  # the runtime checked it against model_capability
            return
        name = spec.workload.name
        if name not in self._offered():
            reason = self._reasons().get(name, "not offered by the onnxruntime plugin")
            raise UnsupportedWorkload(f"{name}: {reason}")
        if spec.phase != "infer":
            raise UnsupportedWorkload(f"phase {spec.phase} for {name}: {TRAIN_REASON}")
        if spec.dtype not in DTYPES:
            raise UnsupportedWorkload(f"onnxruntime plugin: no {spec.dtype}; offered: float32")
        if spec.mode not in MODES:
            raise UnsupportedWorkload(
                f"onnxruntime plugin has no mode {spec.mode!r}; modes (graph optimisation "
                f"levels): {', '.join(MODES)}"
            )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        self._check(spec)
        return _translated(self._build)(spec)

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        self._profilable = None  # set by a graph cell only: what profile() profiles
        if spec.model is not None:
            return self._build_file(spec)
        name = spec.workload.name
        if name == "generate":
            return self._generate(spec)
        transformer = name in TRANSFORMER_WORKLOADS
        cell_graph = tg.cell_graph if transformer else models.cell_graph
        graph = cell_graph(name, spec.params, spec.batch_size, spec.seed)
        shape = models.output_shape(graph, spec.batch_size)
        inputs = models.synthetic_inputs(graph, spec.batch_size, spec.seed)
        intra = spec.threads or self.threads
        sess = session.create(graph.serialized, self.device, spec.mode, intra, self.interop_threads)
        bound = session.BoundRun(sess, self.device, inputs, graph.output, shape)
        self._profilable = profiling.Profilable(
            bound,
            lambda prefix: session.create(
                graph.serialized,
                self.device,
                spec.mode,
                intra,
                self.interop_threads,
                profile_prefix=prefix,
            ),
        )
        layout = "" if transformer or name in ("gemm", "lstm") else "NCHW"
        settings = self._settings(spec, sess, intra, layout)
        extra = {**settings.extra, **models.describe_graph()}
        if transformer:
            extra["attention_kernel"] = tg.ATTENTION_KERNEL
        if name == "attention":
            extra["attention_layout"] = tg.ATTENTION_LAYOUT
        return BuiltStep(_translated(bound.step), dataclasses.replace(settings, extra=extra))

    def _generate(self, spec: WorkloadSpec) -> BuiltStep:
        """Two sessions, prefill and decode, over greedy_loop's buffers (generation.py)."""
        intra = spec.threads or self.threads
        run = generation.build(
            spec.params,
            spec.batch_size,
            spec.seed,
            self.device,
            spec.mode,
            intra,
            self.interop_threads,
        )
        steps = run.steps(spec.params["new_tokens"])
        steps = GenerationSteps(
            _translated(steps.prefill), _translated(steps.decode), steps.decode_steps
        )
        settings = self._settings(spec, run.decode_session, intra, "")
        extra = {**settings.extra, **models.describe_graph(), **generation.settings_extra(run)}
        return BuiltStep.for_generation(steps, dataclasses.replace(settings, extra=extra))

    def _settings(self, spec: WorkloadSpec, sess: object, intra: int, layout: str) -> Settings:
        extra = session.session_settings(sess, intra, self.interop_threads)  # type: ignore[arg-type]
        if self.device.cuda:
            tf32 = extra.get("cuda_use_tf32", "1") != "0"
            kind = "tf32" if tf32 else "float32"
            extra |= float32_arithmetic(kind, kind, spec.dtype)
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=intra or session.default_intra_op_threads(),
            inter_op_threads=1,
            mode=spec.mode,
            layout=layout,
            device=f"cuda:{self.device.index}" if self.device.cuda else "cpu",
            extra=extra,
        )

    def _build_file(self, spec: WorkloadSpec) -> BuiltStep:
        intra = spec.threads or self.threads
        run, sess = model_file.build(spec, self.device, intra, self.interop_threads)
        settings = self._settings(spec, sess, intra, "")
        model = spec.model
        assert model is not None
        return BuiltStep(
            _translated(run.step),
            settings,
            outputs=_translated(run.outputs),
            flops=lambda: onnx_flops.count(model.path, model.inputs),
        )

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return onnx_file.inspect(path, model_file.TRAIN_REASON)

    def synchronize(self, output: object) -> None:
        _translated(session.synchronize)(output, self.device)

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
            raise ValueError(f"onnxruntime plugin builds no {model}")
        return models.canonical_weights(model, seed)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        """Inference logits only (equivalence_trains is False): the losses are None. A gpt
        case with new_tokens also generates them on the generate workload's path."""
        if case.model in arch.TRANSFORMER_NAMES:
            return transformer_equivalence.equivalence(case, self._logits, self._generated)
        params, feed = models.equivalence_feed(case.model, case.inputs)
        graph = models.build_model(case.model, params, case.weights)
        sess = session.create(graph.serialized, self.device, "all", self.threads)
        logits = sess.run([graph.output], {models.INPUT: feed})[0]
        return EquivalenceResult(
            param_count=param_count(case.weights),
            eval_logits=np.asarray(logits, np.float32),
            loss_before=None,
            loss_after=None,
        )

    def _logits(self, graph: models.Graph, tokens: np.ndarray) -> np.ndarray:
        sess = session.create(graph.serialized, self.device, "all", self.threads)
        return np.asarray(sess.run([graph.output], {models.INPUT: tokens})[0], np.float32)

    def _generated(
        self, params: Mapping[str, int], weights: Mapping[str, np.ndarray], prompt: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Generation runs on the CPU provider, whatever the device (generation.CUDA_REASON)."""
        run = generation.build(
            params, 0, 0, session.CPU, "all", self.threads, 0, weights, prompt, keep_gaps=True
        )
        run.steps(params["new_tokens"]).generate()
        return greedy_loop.generated(run.buffers)
