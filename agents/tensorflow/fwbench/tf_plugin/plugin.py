"""TensorFlowPlugin: the TensorFlow framework plugin, on the CPU (oneDNN or Eigen kernels, as
the agent's TF_ENABLE_ONEDNN_OPTS says) or the first GPU; modes tf.function (default), XLA and
eager, for the catalogue's ops and models, the transformers (transformers.py) and generation
with a KV cache (generation.py), and the user's SavedModels (model_file.py). As a rank of a
world (PluginContext.world) it trains under MultiWorkerMirroredStrategy and runs the allreduce
collective instead (distributed.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port

from fwbench.runtime import tf_profile, xplane
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import (
    ACCURACY,
    EQUIVALENCE,
    MODEL_FILES,
    PROFILE,
    THREADS_VARIABLE,
    BuiltStep,
    Capability,
    DeviceInfo,
    GenerationSteps,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
    float32_arithmetic,
    translate_out_of_memory,
)
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec, Weights
from fwbench.tf_plugin import distributed, environment, generation, model_file, models, reference
from fwbench.tf_plugin import transformers as tfm
from fwbench.tf_plugin.ops import build_conv2d, build_gemm
from fwbench.tf_plugin.training import MODES, ModelProgram, compile_fn
from fwbench.tf_plugin.transformer_layers import ATTENTION_KERNEL, build_attention

PLUGIN_VERSION = "0.1.0"
_DTYPES = {
    "float32": tf.float32,
    "float16": tf.float16,
    "bfloat16": tf.bfloat16,
    "float64": tf.float64,
}
# As the PyTorch plugin: float16 is offered on a GPU only, float64 on the CPU only.
_CPU_DTYPES = ("float32", "bfloat16", "float64")
_GPU_DTYPES = ("float32", "float16", "bfloat16")
_OPS = {"gemm": build_gemm, "conv2d": build_conv2d}
_IMAGE_WORKLOADS = frozenset({"conv2d", *models.MODEL_NAMES} - {"lstm"})
_TRANSFORMERS = ("attention", "bert", "gpt", "generate")  # not distributed
# How a model holds and computes each dtype (Settings.extra["dtype_policy"]).
_DTYPE_POLICY = {
    "float32": "float32",
    "float64": "float64",
    # Like torch's model.to(dtype), not Keras' "mixed_*" policies (float32 master weights).
    "bfloat16": "bfloat16 pure: weights, activations and gradients in bfloat16; BatchNorm "
    "scale/offset/statistics float32 (FusedBatchNormV3 requires it); softmax loss in float32",
    "float16": "float16 pure: weights, activations and gradients in float16; BatchNorm "
    "scale/offset/statistics float32 (FusedBatchNormV3 requires it); softmax loss in float32",
}
THREADS_FIXED_MESSAGE = (
    f"TensorFlow sizes its thread pools at start-up; start the agent with {THREADS_VARIABLE}={{n}}"
)
# Messages of TensorFlow's other errors that mean an allocation failed (XLA's, for one).
_OOM_MESSAGES = ("resource_exhausted", "out of memory", "failed to allocate")
P = ParamSpec("P")
T = TypeVar("T")


def is_out_of_memory(error: Exception) -> bool:
    """TensorFlow's ResourceExhaustedError (its allocators' "OOM when allocating tensor"), or
    another op error whose message says an allocation failed."""
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return True
    text = str(error).lower()
    return isinstance(error, tf.errors.OpError) and any(m in text for m in _OOM_MESSAGES)


def _translated(function: Callable[P, T]) -> Callable[P, T]:
    return translate_out_of_memory(is_out_of_memory, function)


def _wait_for_gpu_unwrapped(output: object) -> None:
    sync_devices = getattr(tf.test.experimental, "sync_devices", None)
    if sync_devices is not None:
        sync_devices()
        return
    for tensor in tf.nest.flatten(output):  # older TensorFlow: read one value back
        if isinstance(tensor, tf.Tensor) and tensor.shape.num_elements():
            tf.reshape(tensor, [-1])[0].numpy()
            return


# Asynchronous GPU errors, out of memory too, surface when the device is awaited. Wrapped
# once, here: synchronize runs inside every timed sample.
_wait_for_gpu = _translated(_wait_for_gpu_unwrapped)


class TensorFlowPlugin:
    optional_capabilities = frozenset({ACCURACY, EQUIVALENCE, MODEL_FILES})
    model_formats = (model_file.FORMAT,)
    model_capability = Capability(phases=("infer",), dtypes=("float32",), modes=model_file.MODES)

    def __init__(self, context: PluginContext) -> None:
        # Order matters: thread pools and visible devices must be set before the first op,
        # and the oneDNN check runs ops.
        self.threads = environment.configure_threads(context.threads, context.interop_threads)
        self.device = environment.select_device(context.device)
        self.rank: distributed.Rank | None = None
        if context.world is not None:  # collective ops are configured before the first op
            self.rank = distributed.start(context.world, self.device)
        self.onednn = environment.verify_onednn()
        environment.quiet_retracing_notice()
        self.on_gpu = self.device.startswith("/GPU")
        self.dtypes = _GPU_DTYPES if self.on_gpu else _CPU_DTYPES
        self.saved_models = model_file.ModelCache(self.device)
        self.no_profiler = xplane.no_profiler(
            "TensorFlow's profiler", self.on_gpu, self.rank is not None
        )
        if not self.no_profiler:
            self.optional_capabilities = TensorFlowPlugin.optional_capabilities | {PROFILE}

    # ------------------------------------------------------------------ FrameworkPlugin

    def _capabilities(self) -> dict[str, Capability]:
        """Alone (no world): every workload, both phases (generate: inference only)."""
        capability = Capability(phases=("train", "infer"), dtypes=self.dtypes, modes=MODES)
        found = dict.fromkeys((*_OPS, *models.MODEL_NAMES, *_TRANSFORMERS), capability)
        found["generate"] = Capability(("infer",), self.dtypes, generation.GENERATE_MODES)
        return found

    def describe(self) -> PluginDescription:
        return PluginDescription(
            framework="tensorflow",
            framework_version=tf.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries=self._libraries(),
            environment=environment.reported_environment(),
            devices=self._devices(),
            intra_op_threads=self.threads.intra_op,
            inter_op_threads=self.threads.inter_op,
            capabilities=(
                self._capabilities()
                if self.rank is None
                else distributed.capabilities(self.dtypes, self.rank)
            ),
            threads_fixed_at_startup=True,
            no_profiler=self.no_profiler,
        )

    def profiler(self) -> str:
        return tf_profile.PROFILER

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        return tf_profile.profile(run_steps, trace_dir)

    def _libraries(self) -> dict[str, str]:
        build = tf.sysconfig.get_build_info()
        libraries = {
            "tensorflow_git": tf.version.GIT_VERSION,
            "compiler": tf.version.COMPILER_VERSION,
            "keras": keras.__version__,
            "numpy": np.__version__,
            "onednn_enabled": str(self.onednn).lower(),
            "xla": str(_pywrap_util_port.IsBuiltWithXLA()).lower(),
            "cuda_build": str(build.get("is_cuda_build", False)).lower(),
        }
        for key in ("cuda_version", "cudnn_version"):
            if build.get(key):
                libraries[key.removesuffix("_version")] = str(build[key])
        return libraries

    def _devices(self) -> tuple[DeviceInfo, ...]:
        import psutil

        devices = [DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total)]
        for index, gpu in enumerate(tf.config.get_visible_devices("GPU")):
            details = tf.config.experimental.get_device_details(gpu)
            devices.append(DeviceInfo("gpu", index, str(details.get("device_name", gpu.name))))
        return tuple(devices)

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        built = _translated(self._build)(spec)
        if built.generation is not None:  # its parts are timed, each, by the runtime
            g = built.generation
            steps = GenerationSteps(_translated(g.prefill), _translated(g.decode), g.decode_steps)
            return BuiltStep.for_generation(steps, built.settings)
        outputs = None if built.outputs is None else _translated(built.outputs)
        flops = None if built.flops is None else _translated(built.flops)
        step = _translated(built.step)
        return dataclasses.replace(built, step=step, outputs=outputs, flops=flops)

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        dtype = self.check(spec)
        name = spec.workload.name
        train = spec.phase == "train"
        if self.rank is not None:
            step, report = distributed.build(spec, dtype, self.rank)
            return BuiltStep(step, self._settings(spec, name), rank=report)
        if spec.model is not None:  # the runtime checked it against model_capability
            cell = model_file.build(spec, self.saved_models)
            settings = self._settings(spec, name, cell.extra)
            return BuiltStep(cell.step, settings, outputs=cell.outputs, flops=cell.flops)
        with tf.device(self.device):
            if name in _TRANSFORMERS:
                return self._transformer(spec, dtype, train)
            if name in _OPS:
                raw = _OPS[name](spec.batch_size, spec.params, dtype, spec.seed, train)
                step = compile_fn(raw, spec.mode)
            elif name in models.MODEL_NAMES:
                step = self._model_step(spec, dtype, train)
            else:
                raise UnsupportedWorkload(f"tensorflow plugin has no workload {name}")
        return BuiltStep(step=step, settings=self._settings(spec, name))

    def _transformer(self, spec: WorkloadSpec, dtype: tf.DType, train: bool) -> BuiltStep:
        """attention, bert, gpt or generate, on the device (the caller's tf.device)."""
        name, batch, params, seed = spec.workload.name, spec.batch_size, spec.params, spec.seed
        device, mode = self.device, spec.mode
        if name == "generate":
            steps, run = generation.build_generation(params, batch, dtype, seed, device, mode)
            settings = self._settings(spec, name, generation.kv_cache_settings(run))
            return BuiltStep.for_generation(steps, settings)
        if name == "attention":
            step = build_attention(batch, params, dtype, seed, train, mode)
        else:
            step = tfm.build_step(name, batch, params, dtype, seed, device, train, mode)
        return BuiltStep(step, self._settings(spec, name, {"attention_kernel": ATTENTION_KERNEL}))

    def check(self, spec: WorkloadSpec) -> tf.DType:
        """Rejects what this agent cannot run as asked; returns the TensorFlow dtype."""
        if spec.dtype not in self.dtypes:
            where = "a GPU" if self.on_gpu else "the CPU"
            raise UnsupportedWorkload(f"dtype {spec.dtype} is not supported on {where}")
        alone = self._capabilities().get(spec.workload.name) if self.rank is None else None
        modes, phases = (alone.modes, alone.phases) if alone else (MODES, ("train", "infer"))
        if spec.mode not in modes:
            raise UnsupportedWorkload(f"mode {spec.mode!r}; valid: {', '.join(modes)}")
        if spec.phase not in phases:
            raise UnsupportedWorkload(f"phase {spec.phase!r}; valid: {', '.join(phases)}")
        if spec.threads and spec.threads != self.threads.intra_op:
            raise UnsupportedWorkload(THREADS_FIXED_MESSAGE.format(n=spec.threads))
        return _DTYPES[spec.dtype]

    def _model_step(self, spec: WorkloadSpec, dtype: tf.DType, train: bool) -> Callable[[], object]:
        name = spec.workload.name
        model = models.build_model(name, dtype=dtype, seed=spec.seed, device=self.device)
        batch = models.batch_for(
            name, spec.batch_size, spec.params, dtype=dtype, seed=spec.seed, device=self.device
        )
        if not train:
            program = ModelProgram(model, spec.mode)
            return lambda: program.logits(batch.inputs)
        program = ModelProgram.for_training(model, spec.mode)
        return lambda: program.train_step(batch.inputs, batch.labels)

    def _settings(
        self, spec: WorkloadSpec, name: str, more: Mapping[str, str] | None = None
    ) -> Settings:
        """`name` is the workload, or for a trainer the model being trained; `more` joins
        the extra settings."""
        model = name in models.MODEL_NAMES or name in tfm.MODEL_WORKLOADS
        extra = {
            "jit_compile": str(spec.mode == "xla").lower(),
            "onednn_enabled": str(self.onednn).lower(),
            **(more or {}),
        }
        if name in tfm.MODEL_WORKLOADS:
            extra["dtype_policy"] = tfm.DTYPE_POLICY[spec.dtype]
        elif model:
            extra["dtype_policy"] = _DTYPE_POLICY[spec.dtype]
            # FusedBatchNormV3 has no float64 kernel.
            fused = spec.dtype != "float64"
            extra["batch_norm"] = "FusedBatchNormV3" if fused else "unfused (moments)"
        if model and spec.phase == "train":
            extra["optimizer"] = "ResourceApplyMomentum (fused SGD momentum)"
        if self.rank is not None:
            extra.update(distributed.settings_extra(spec, self.rank))
        if self.on_gpu:
            tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
            extra["tf32"] = str(tf32).lower()
            kind = "tf32" if tf32 else "float32"
            extra.update(float32_arithmetic(kind, kind, spec.dtype))
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=self.threads.intra_op,
            inter_op_threads=self.threads.inter_op,
            mode=spec.mode,
            layout="NHWC" if name in _IMAGE_WORKLOADS else "",
            device=self.device,
            extra=extra,
        )

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return model_file.inspect(path, self.saved_models)

    def synchronize(self, output: object) -> None:
        """On the CPU, eager ops and tf.function calls return only once their kernels are done
        (TensorFlow's default executor is synchronous), so there is nothing to wait for. GPU
        kernels run asynchronously on CUDA streams: wait for every device."""
        if self.on_gpu:
            _wait_for_gpu(output)

    # ------------------------------------------------------------------ ReferencePlugin

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        return reference.canonical_weights(model, seed, self.device, params)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        if self.rank is not None:  # a rank: the step on MultiWorkerMirroredStrategy
            return distributed.equivalence(case, self.rank)
        return reference.equivalence(case, self.device)

    def trainer(
        self, model: str, weights: Weights, optimizer: OptimizerSpec, spec: WorkloadSpec
    ) -> reference.ProgramTrainer:
        dtype = self.check(spec)
        settings = self._settings(spec, model)
        return reference.trainer(model, weights, optimizer, dtype, spec.mode, self.device, settings)
