"""PaddlePlugin: the PaddlePaddle framework plugin, on the CPU (Paddle's PyPI CPU build).

Modes: "dygraph" (the default, eager) and "static" (``paddle.jit.to_static`` programs; what
each compiles is in training.py). Models in models.py, the transformers (BERT, GPT-2) in
transformers.py, their generation with a KV cache in generation.py, their
canonical weights in weights.py, single ops in ops.py and the attention op in attention.py
(which adds a "plain" mode), the optional capabilities in reference.py, threads, libraries and
out-of-memory recognition in environment.py. CPU execution is synchronous in every mode, so
synchronize waits for nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np
import paddle

from fwbench.paddle_plugin import (
    environment,
    generation,
    language_model,
    models,
    profiling,
    reference,
)
from fwbench.paddle_plugin import transformers as pdt
from fwbench.paddle_plugin.attention import ATTENTION_MODES, build_attention, sdpa_kernel
from fwbench.paddle_plugin.ops import build_conv2d, build_gemm
from fwbench.paddle_plugin.training import (
    EXECUTION,
    MODES,
    OPTIMIZER,
    InferStep,
    TrainStep,
    synthetic_batch,
)
from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.plugin import (
    ACCURACY,
    EQUIVALENCE,
    PROFILE,
    BuiltStep,
    Capability,
    DeviceInfo,
    GenerationSteps,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
    translate_out_of_memory,
)
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec, Weights

PLUGIN_VERSION = "0.1.0"
DTYPES = ("float32", "float64")
_OPS = {"gemm": build_gemm, "conv2d": build_conv2d}
_BATCH_NORM_MODELS = frozenset(models.MODEL_NAMES) - {"lenet", "vgg16", "lstm"}
_TRANSFORMERS = ("attention", *pdt.MODEL_WORKLOADS)
UNSUPPORTED_REASONS: Mapping[str, str] = {
    "allreduce": "the Paddle plugin runs alone: it joins no distributed world",
}
# How a cell holds its dtype (Settings.extra["dtype_policy"]).
_DTYPE_POLICY = {
    "float32": "float32",
    "float64": "float64: parameters, inputs, activations, optimizer state and loss",
}
P = ParamSpec("P")
T = TypeVar("T")


def _translated(function: Callable[P, T]) -> Callable[P, T]:
    return translate_out_of_memory(environment.is_out_of_memory, function)


class PaddlePlugin:
    optional_capabilities = frozenset({ACCURACY, EQUIVALENCE, PROFILE})
    # every image and sequence model, and the transformers
    equivalence_models = frozenset((*models.MODEL_NAMES, *TRANSFORMER_NAMES))
    equivalence_trains = True

    def __init__(self, context: PluginContext) -> None:
        self.device = environment.select_device(context.device)
        self._default_threads = environment.default_threads(context.threads)
        self._threads = environment.apply_threads(self._default_threads)

    # ------------------------------------------------------------------ FrameworkPlugin

    def _capabilities(self) -> dict[str, Capability]:
        """Every workload but allreduce in both phases and modes; the attention op adds its
        plain mode, generate is inference only."""
        capability = Capability(phases=("train", "infer"), dtypes=DTYPES, modes=MODES)
        found = dict.fromkeys((*_OPS, *models.MODEL_NAMES, *_TRANSFORMERS), capability)
        found["attention"] = Capability(("train", "infer"), DTYPES, ATTENTION_MODES)
        found["generate"] = Capability(("infer",), DTYPES, generation.GENERATE_MODES)
        return found

    def describe(self) -> PluginDescription:
        import psutil

        return PluginDescription(
            framework="paddle",
            framework_version=paddle.version.full_version,
            plugin_version=PLUGIN_VERSION,
            libraries=environment.libraries(),
            environment=environment.reported_environment(),
            devices=(DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total),),
            intra_op_threads=self._threads,
            inter_op_threads=1,
            capabilities=self._capabilities(),
            threads_fixed_at_startup=False,
            unsupported_reasons=UNSUPPORTED_REASONS,
        )

    def _check(self, spec: WorkloadSpec) -> None:
        """Refuses what describe() does not offer."""
        name = spec.workload.name
        capability = self._capabilities().get(name)
        if capability is None:
            reason = UNSUPPORTED_REASONS.get(name, "not a workload of the Paddle plugin")
            raise UnsupportedWorkload(f"paddle plugin has no workload {name}: {reason}")
        for aspect, value, offered in (
            ("phase", spec.phase, capability.phases),
            ("dtype", spec.dtype, capability.dtypes),
            ("mode", spec.mode, capability.modes),
        ):
            if value not in offered:
                raise UnsupportedWorkload(
                    f"paddle plugin: no {aspect} {value!r} for {name}; valid: {', '.join(offered)}"
                )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        built = _translated(self._build)(spec)
        if built.generation is not None:  # its parts are timed, each, by the runtime
            g = built.generation
            steps = GenerationSteps(_translated(g.prefill), _translated(g.decode), g.decode_steps)
            return BuiltStep.for_generation(steps, built.settings)
        return BuiltStep(_translated(built.step), built.settings)

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        self._check(spec)
        # MKL's count is process-wide; the OpenMP one is this (the measurement) thread's.
        self._threads = environment.apply_threads(spec.threads or self._default_threads)
        name, train = spec.workload.name, spec.phase == "train"
        if name in _TRANSFORMERS:
            return self._transformer(spec, train)
        if name in _OPS:
            step = _OPS[name](spec.batch_size, spec.params, spec.dtype, spec.seed, train, spec.mode)
        else:
            step = self._model_step(spec, train)
        return BuiltStep(step=step, settings=self._settings(spec, name))

    def _model_step(self, spec: WorkloadSpec, train: bool) -> Callable[[], object]:
        name = spec.workload.name
        model = models.build_model(name, spec.seed, spec.dtype)
        batch = synthetic_batch(
            name,
            spec.batch_size,
            spec.params.get("image_size", 0),
            spec.params.get("seq_len", 0),
            spec.dtype,
            spec.seed + 1,  # the data's own stream, apart from the weights'
        )
        if not train:
            infer = InferStep(model, spec.mode)
            return lambda: infer(batch.inputs)
        train_step = TrainStep(model, spec.mode)
        return lambda: train_step(batch.inputs, batch.labels)

    def _transformer(self, spec: WorkloadSpec, train: bool) -> BuiltStep:
        """attention, bert, gpt or generate."""
        name, batch, params, dtype, seed = (
            spec.workload.name,
            spec.batch_size,
            spec.params,
            spec.dtype,
            spec.seed,
        )
        if name == "generate":
            steps, run = generation.build_generation(params, batch, dtype, seed, spec.mode)
            settings = self._settings(spec, name, generation.kv_cache_settings(run, dtype))
            return BuiltStep.for_generation(steps, settings)
        if name == "attention":
            step, extra = build_attention(batch, params, dtype, seed, train, spec.mode)
            return BuiltStep(step, self._settings(spec, name, extra))
        config = pdt.config_for(name, params)
        model = pdt.build_transformer(config, seed, dtype)
        tokens, labels = language_model.example_batch(config, batch, params["seq_len"], seed + 1)
        shape = (batch, params["seq_len"], config.heads, config.head_dim)
        kernel = sdpa_kernel(shape, dtype, config.causal)
        settings = self._settings(spec, name, {"attention_kernel": kernel})
        if not train:
            infer = InferStep(model, spec.mode)
            return BuiltStep(lambda: infer(tokens), settings)
        train_step = TrainStep(model, spec.mode, with_loss=language_model.LanguageModelLoss)
        return BuiltStep(lambda: train_step(tokens, labels), settings)

    def _settings(
        self, spec: WorkloadSpec, name: str, more: Mapping[str, str] | None = None
    ) -> Settings:
        """`name` is the workload, or for a trainer the model being trained; `more` joins
        the extra settings."""
        extra = {
            "execution": EXECUTION[spec.mode],
            "onednn_enabled": str(environment.onednn_enabled()).lower(),
            "blas_threads": str(self._threads),
            **(more or {}),
        }
        if name in pdt.MODEL_WORKLOADS:
            extra["dtype_policy"] = pdt.DTYPE_POLICY[spec.dtype]
            if spec.phase == "train":
                extra["optimizer"] = OPTIMIZER
        if name in models.MODEL_NAMES:
            extra["dtype_policy"] = _DTYPE_POLICY[spec.dtype]
            if spec.phase == "train":
                extra["optimizer"] = OPTIMIZER
            if spec.phase == "train" and name in _BATCH_NORM_MODELS:
                extra["batch_norm_running_var"] = "updated with the biased batch variance"
        if name == "lstm":
            extra["lstm"] = "paddle.nn.LSTM fused rnn kernel, second bias held at zero, frozen"
        image = name == "conv2d" or (name in models.MODEL_NAMES and name != "lstm")
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=self._threads,
            # Dynamic-graph ops run one after another on the calling thread: no inter-op pool.
            inter_op_threads=1,
            mode=spec.mode,
            layout="NCHW" if image else "",
            device=str(paddle.device.get_device()),
            extra=extra,
        )

    def synchronize(self, output: object) -> None:
        """Paddle's CPU kernels return when done, in dygraph and static programs alike."""

    def profiler(self) -> str:
        return profiling.PROFILER

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        return profiling.profile(run_steps, trace_dir)

    # --------------------------------------------------------------- optional capabilities

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        if model not in self.equivalence_models:
            raise UnsupportedWorkload(f"paddle plugin has no model {model}")
        return reference.canonical_weights(model, seed, params)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        if case.model not in self.equivalence_models:
            raise UnsupportedWorkload(f"paddle plugin has no model {case.model}")
        return reference.equivalence(case)

    def trainer(
        self, model: str, weights: Weights, optimizer: OptimizerSpec, spec: WorkloadSpec
    ) -> reference.PaddleTrainer:
        if spec.dtype not in DTYPES or spec.mode not in MODES:
            raise UnsupportedWorkload(f"paddle plugin: no {spec.dtype} {spec.mode} trainer")
        self._threads = environment.apply_threads(spec.threads or self._default_threads)
        return reference.PaddleTrainer(
            model,
            weights,
            optimizer,
            dtype=spec.dtype,
            mode=spec.mode,
            settings=self._settings(spec, model),
        )
