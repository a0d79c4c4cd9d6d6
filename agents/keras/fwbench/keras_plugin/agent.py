"""The Keras plugin's work once Keras runs on its backend (plugin.py has checked that): what
it offers, building the catalogue's models, ops and transformers, the settings each step runs
with.

One plugin, three backends: the models are one Keras definition (models.py, transformers.py),
trained with compile/train_on_batch and run with predict_on_batch (training.py); the attention
op is keras.ops (attention.py), generation a KV-cache loop compiled the backend's way
(generation.py); what differs per backend outside Keras' API is in backend.py."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import keras
import numpy as np

from fwbench.keras_plugin import attention, generation, model_file, ops, reference, training
from fwbench.keras_plugin import transformers as tfm
from fwbench.keras_plugin.backend import Backend, make_backend
from fwbench.keras_plugin.environment import REPORTED_VARIABLES, Threads
from fwbench.keras_plugin.models import MODEL_NAMES, build_model
from fwbench.runtime.architectures import LSTM_VOCAB_SIZE, NUM_CLASSES
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import (
    THREADS_VARIABLE,
    BuiltStep,
    Capability,
    GenerationSteps,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
    translate_out_of_memory,
)
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult

PLUGIN_VERSION = "0.1.0"
_OPS = {"gemm": ops.build_gemm, "conv2d": ops.build_conv2d}
_IMAGE_WORKLOADS = frozenset({"conv2d", *MODEL_NAMES} - {"lstm"})
DTYPES = ("float32",)
UNSUPPORTED_REASONS: Mapping[str, str] = {}  # every catalogue workload is offered
# How each backend differentiates a single op, and what each mode compiles it with.
_OP_GRADIENT = {"torch": "torch.autograd", "jax": "jax.vjp", "tensorflow": "tf.GradientTape"}
_OP_COMPILED = {
    "eager": "no",
    "compile": "torch.compile",
    "jit": "jax.jit",
    "function": "tf.function",
    "xla": "tf.function(jit_compile=True)",
}
_BATCH_NORM_MODELS = frozenset(
    {"resnet18", "resnet50", "resnet152", "mobilenet_v2", "efficientnet_b0"}
)
P = ParamSpec("P")
T = TypeVar("T")


class KerasAgent:
    def __init__(self, context: PluginContext, backend_name: str, threads: Threads) -> None:
        self.threads = threads
        self.backend: Backend = make_backend(backend_name, context.device, threads.intra_op)
        self.modes = training.modes(backend_name)
        self.model_files = model_file.ModelCache(backend_name)

    def _translated(self, function: Callable[P, T]) -> Callable[P, T]:
        return translate_out_of_memory(self.backend.is_out_of_memory, function)

    # ------------------------------------------------------------------------- describe

    def capabilities(self) -> dict[str, Capability]:
        """Every workload in both phases and every mode, but the attention op adds its plain
        mode and generate infers only."""
        capability = Capability(phases=("train", "infer"), dtypes=DTYPES, modes=self.modes)
        found = dict.fromkeys((*_OPS, *MODEL_NAMES, "bert", "gpt"), capability)
        found["attention"] = Capability(capability.phases, DTYPES, attention.modes(self.modes))
        found["generate"] = Capability(("infer",), DTYPES, self.modes)
        return found

    def model_capability(self) -> Capability:
        """A user's .keras file: inferred and, when compiled, trained, in every mode."""
        return Capability(phases=("train", "infer"), dtypes=DTYPES, modes=self.modes)

    def describe(self) -> PluginDescription:
        name = self.backend.name
        return PluginDescription(
            framework="keras",
            framework_version=keras.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries=self.backend.libraries(),
            environment={k: os.environ[k] for k in REPORTED_VARIABLES[name] if k in os.environ},
            devices=self.backend.devices(),
            intra_op_threads=self.threads.intra_op,
            inter_op_threads=self.threads.inter_op,
            capabilities=self.capabilities(),
            threads_fixed_at_startup=self.threads.fixed_at_startup,
            family=name,
            family_version=self.backend.version(),
            unsupported_reasons=UNSUPPORTED_REASONS,
            no_profiler=no_profiler(name, self.backend.device),
        )

    # ---------------------------------------------------------------------------- build

    def _check(self, spec: WorkloadSpec) -> int:
        """Refuses what describe() does not offer (a model file's cell: what the runtime
        checked against model_capability); returns the run's intra-op threads."""
        if spec.model is None:
            self._check_catalogue(spec)
        if not self.threads.fixed_at_startup:
            return self.backend.set_threads(spec.threads)
        if spec.threads and spec.threads != self.threads.intra_op:
            raise UnsupportedWorkload(
                f"{self.backend.name} sizes its thread pool at start-up; start the agent with "
                f"{THREADS_VARIABLE}={spec.threads} (this one runs {self.threads.intra_op})"
            )
        return self.threads.intra_op

    def _check_catalogue(self, spec: WorkloadSpec) -> None:
        name = spec.workload.name
        capability = self.capabilities().get(name)
        if capability is None:
            reason = UNSUPPORTED_REASONS.get(name, "not in the Keras plugin's catalogue")
            raise UnsupportedWorkload(f"keras plugin has no workload {name}: {reason}")
        for aspect, value, offered in (
            ("phase", spec.phase, capability.phases),
            ("dtype", spec.dtype, capability.dtypes),
            ("mode", spec.mode, capability.modes),
        ):
            if value not in offered:
                raise UnsupportedWorkload(
                    f"keras plugin on {self.backend.name}: no {aspect} {value!r} for {name}; "
                    f"valid: {', '.join(offered)}"
                )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        threads = self._check(spec)
        if spec.model is not None:
            return self._build_file(spec, threads)
        if spec.workload.name == "generate":
            return self._build_generation(spec, threads)
        with self.backend.scope():
            step, extra = self._translated(self._build)(spec)
        scoped = self._scoped(step)
        return BuiltStep(self._translated(scoped), self._settings(spec, threads, extra))

    def _build_file(self, spec: WorkloadSpec, threads: int) -> BuiltStep:
        """A cell of the user's .keras file (model_file.py): its step in the cell's mode, and
        its outputs for the cell's inputs."""
        with self.backend.scope():
            cell = self._translated(model_file.build)(spec, self.model_files)
        return BuiltStep(
            self._translated(self._scoped(cell.step)),
            self._settings(spec, threads, cell.extra),
            outputs=self._translated(self._scoped(cell.outputs)),
            flops=self._translated(
                self._scoped(lambda: self.backend.count_flops(cell.model, cell.inputs))
            ),
        )

    def _build_generation(self, spec: WorkloadSpec, threads: int) -> BuiltStep:
        """The generate workload's prefill and decode steps, each timed by the runtime."""
        with self.backend.scope():
            steps, run = self._translated(generation.build_generation)(
                spec.params, spec.batch_size, spec.seed, self.backend, spec.mode
            )
        prefill, decode = (self._translated(self._scoped(s)) for s in (steps.prefill, steps.decode))
        settings = self._settings(spec, threads, generation.kv_cache_settings(run))
        return BuiltStep.for_generation(
            GenerationSteps(prefill, decode, steps.decode_steps), settings
        )

    def inspect_model(self, path: str) -> ModelSignature:
        with self.backend.scope():
            return self._translated(self.model_files.get)(path).signature

    def _scoped(self, step: Callable[[], T]) -> Callable[[], T]:
        scope = self.backend.scope

        def run() -> T:
            with scope():
                return step()

        return run

    def _build(self, spec: WorkloadSpec) -> tuple[Callable[[], object], dict[str, str]]:
        name, train = spec.workload.name, spec.phase == "train"
        if name in _OPS:
            step = _OPS[name](
                spec.batch_size, spec.params, spec.dtype, spec.seed, train, spec.mode, self.backend
            )
            extra = {
                "op_api": "keras.ops",
                "compiled": _OP_COMPILED[spec.mode],
                "gradient": _OP_GRADIENT[self.backend.name] if train else "none",
            }
            return step, extra
        if name == "attention":
            step, extra = attention.build_attention(spec, self.backend, self.modes[0])
            extra["op_api"] = "keras.ops"
            extra["compiled"] = _OP_COMPILED[extra.pop("compiled_as")]
            extra["gradient"] = _OP_GRADIENT[self.backend.name] if train else "none"
            return step, extra
        if name in ("bert", "gpt"):
            return self._build_transformer(spec, train)
        keras.utils.set_random_seed(spec.seed)
        size, seq_len = spec.params.get("image_size", 224), spec.params.get("seq_len", 200)
        net = build_model(name, image_size=size, seq_len=seq_len, dtype=spec.dtype)
        extra = training.compile_model(net.model, self.backend.name, spec.mode)
        inputs, labels = _synthetic_batch(name, spec, net.model.input_shape[1:])
        if train:
            extra["train_api"] = training.TRAIN_API
            extra["optimizer"] = "keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)"
            return training.train_step(net.model, inputs, labels), extra
        extra["infer_api"] = training.INFER_API
        return training.infer_step(net.model, inputs), extra

    def _build_transformer(
        self, spec: WorkloadSpec, train: bool
    ) -> tuple[Callable[[], object], dict[str, str]]:
        """bert or gpt: inference gives every position's logits (predict_on_batch); a training
        step is train_on_batch with the language-model loss and SGD with momentum."""
        keras.utils.set_random_seed(spec.seed)
        config = tfm.config_for(spec.workload.name, spec.params)
        net = tfm.build_transformer(config)
        loss = tfm.language_model_loss()
        extra = training.compile_model(net.model, self.backend.name, spec.mode, loss=loss)
        extra["attention_kernel"] = attention.fused_kernel(self.backend)
        tokens, labels = tfm.example_batch(
            config, spec.batch_size, spec.params["seq_len"], spec.seed
        )
        if train:
            extra["train_api"] = training.TRAIN_API
            extra["optimizer"] = "keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)"
            extra["loss"] = "SparseCategoricalCrossentropy(from_logits=True, ignore_class=-100)"
            return training.train_step(net.model, tokens, labels), extra
        extra["infer_api"] = training.INFER_API
        return training.infer_step(net.model, tokens), extra

    def _settings(self, spec: WorkloadSpec, threads: int, more: Mapping[str, str]) -> Settings:
        # The dtype policy a model's layers were built with; an op's inputs are in the dtype.
        extra = {"keras_backend": self.backend.name, "dtype_policy": spec.dtype, **more}
        if spec.workload.name in _BATCH_NORM_MODELS:
            extra["batch_norm_moving_variance"] = (
                "Keras': biased batch variance (PyTorch's running_var takes the unbiased one)"
            )
        name = spec.workload.name
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=threads,
            inter_op_threads=self.threads.inter_op,
            mode=spec.mode,
            layout="NHWC" if name in _IMAGE_WORKLOADS else "",
            device=self.backend.device,
            extra=extra,
        )

    def synchronize(self, output: object) -> None:
        self._translated(self.backend.synchronize)(output)

    # ---------------------------------------------------------------------- equivalence

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        with self.backend.scope():
            return reference.canonical_weights(model, seed, params)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        with self.backend.scope():
            return reference.equivalence(case, self.backend)


def no_profiler(backend: str, device: str) -> str:
    """Why `--profile` gets nothing on this backend and device, "" where it profiles: PyTorch's
    profiler on torch, TensorFlow's and JAX's on the CPU (plugin.py)."""
    if backend == "torch" or "cpu" in device.lower():
        return ""
    return f"Keras on {backend}: its profiler is read on the CPU only, not on {device}"


def _synthetic_batch(name: str, spec: WorkloadSpec, item: tuple[int, ...]) -> tuple[Any, Any]:
    """Inputs and labels drawn from spec.seed, as backend tensors on the device (no host
    copy inside a step)."""
    rng = np.random.default_rng(spec.seed)
    shape = (spec.batch_size, *item)
    if name == "lstm":
        inputs = keras.ops.convert_to_tensor(rng.integers(0, LSTM_VOCAB_SIZE, shape, np.int32))
    else:
        images = rng.standard_normal(shape, dtype=np.float32)
        inputs = keras.ops.convert_to_tensor(images, dtype=spec.dtype)
    labels = rng.integers(0, NUM_CLASSES[name], (spec.batch_size,), dtype=np.int32)
    return inputs, keras.ops.convert_to_tensor(labels)
