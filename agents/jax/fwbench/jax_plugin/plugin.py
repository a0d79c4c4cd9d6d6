"""JaxPlugin: the JAX framework plugin (whole steps jit-compiled by XLA), on CPU or one GPU.

Construction order matters: the context's thread count is applied (as a CPU-affinity mask,
see threads.py) before anything creates a jax backend, because XLA sizes its CPU thread pool
only then. Models live in models.py, single ops in ops.py, the reference-net methods in
reference.py; the transformers (the attention op, bert, gpt, generate) in attention.py,
transformers.py, generation.py and transformer_steps.py.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

import jax
import jax.extend.backend
import jax.numpy as jnp
import numpy as np

from fwbench.jax_plugin import distributed, model_file, models, ops, reference, transformer_steps
from fwbench.jax_plugin.attention import ATTENTION_MODES, LAYOUT, build_attention
from fwbench.jax_plugin.threads import limit_cpu_threads
from fwbench.jax_plugin.training import MODES, TrainLoop, compile_fn, make_infer_fn, sgd
from fwbench.runtime import jax_profile, xplane
from fwbench.runtime.architectures import TRANSFORMER_NAMES
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

PLUGIN_VERSION = "0.1.0"
_OPS = {"gemm": ops.build_gemm, "conv2d": ops.build_conv2d}
# The transformer workloads (attention.py, transformers.py, generation.py); single process only.
_TRANSFORMERS = ("attention", *TRANSFORMER_NAMES, "generate")
_JNP_DTYPES: dict[str, jnp.dtype] = {
    name: jnp.dtype(name) for name in ("float32", "bfloat16", "float16")
}
# float64 is absent: it needs jax_enable_x64, a process-wide switch that changes every
# default integer and float type.
_CPU_DTYPES = ("float32", "bfloat16")
_GPU_DTYPES = ("float32", "float16", "bfloat16")
# Variables that change what jax/XLA does; reported when set.
_JAX_VARIABLES = (
    "XLA_FLAGS",
    "JAX_PLATFORMS",
    "JAX_DEFAULT_MATMUL_PRECISION",
    "JAX_ENABLE_X64",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_CPP_MIN_LOG_LEVEL",
)
# FWBENCH_TF32 as jax's default matmul precision (float32 = full float32 passes).
_TF32_PRECISION = {True: "tensorfloat32", False: "float32"}


def float32_kind(precision: str | None) -> str:
    """What float32 dots and convolutions run in on a GPU at jax_default_matmul_precision
    `precision`: XLA's DEFAULT (unset, "bfloat16", "fastest") and HIGH ("tensorfloat32",
    "high") use TF32 tensor cores where the GPU has them, HIGHEST is float32."""
    return "float32" if precision in ("float32", "highest") else "tf32"


# One seed, separate streams: weights from PRNGKey(seed) itself (as canonical_weights), the
# dropout key from a fold of it, synthetic data from data_key(seed).
_DROPOUT_STREAM = 1
# How XLA's allocators word a failed allocation (BFC on GPUs, the CPU client's buffers).
_OOM_MESSAGES = ("resource_exhausted", "out of memory", "failed to allocate")
P = ParamSpec("P")
T = TypeVar("T")


def is_out_of_memory(error: Exception) -> bool:
    """XLA's runtime error with status RESOURCE_EXHAUSTED ("Out of memory while trying to
    allocate ..."), raised by compilation, execution or block_until_ready."""
    text = str(error).lower()
    return isinstance(error, jax.errors.JaxRuntimeError) and any(m in text for m in _OOM_MESSAGES)


def _translated(function: Callable[P, T]) -> Callable[P, T]:
    return translate_out_of_memory(is_out_of_memory, function)


# Dispatch is asynchronous: a step's errors, out of memory too, surface when it is awaited.
# Wrapped once, here: synchronize runs inside every timed sample.
_block_until_ready = _translated(jax.block_until_ready)


def _backends_initialized() -> bool:
    # Private, but the only way to know whether XLA has already sized its thread pool.
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def _gpu_devices() -> list[jax.Device]:
    """This process's GPUs (in a world, jax.devices lists every process's)."""
    try:
        return list(jax.local_devices(backend="gpu"))
    except RuntimeError:  # no GPU backend in this jaxlib or JAX_PLATFORMS excludes it
        return []


def select_device(requested: str) -> jax.Device:
    """PluginContext.device: "cpu", "cuda" or "auto" (the first GPU when there is one). A CUDA
    agent on a host without a GPU must fail loudly, not measure the CPU under a CUDA label."""
    gpus = [] if requested == "cpu" else _gpu_devices()
    if requested == "cuda" and not gpus:
        raise RuntimeError("FWBENCH_DEVICE=cuda but jax sees no GPU")
    return gpus[0] if gpus else jax.local_devices(backend="cpu")[0]


def jax_libraries(device: jax.Device) -> dict[str, str]:
    """jaxlib, optax, numpy, the XLA backend and, on GPUs, the CUDA libraries jax loaded."""
    backend = jax.extend.backend.get_backend(device.platform)
    libraries = {
        "jaxlib": importlib.metadata.version("jaxlib"),
        "optax": importlib.metadata.version("optax"),
        "numpy": np.__version__,
        "backend": backend.platform,
        "backend_version": backend.platform_version,
    }
    if device.platform == "gpu":
        libraries |= _cuda_versions()
    return libraries


def _cuda_versions() -> dict[str, str]:
    from jax._src.lib import cuda_versions  # None without the CUDA plugin

    found: dict[str, str] = {}
    for key, getter in (
        ("cuda", "cuda_runtime_get_version"),
        ("cudnn", "cudnn_get_version"),
        ("cublas", "cublas_get_version"),
    ):
        function = getattr(cuda_versions, getter, None)
        if function is not None:
            found[key] = str(function())
    return found


class JaxPlugin:
    # Model files (model_file.py) where jax's serialization can load (flatbuffers installed).
    optional_capabilities = frozenset(
        {ACCURACY, EQUIVALENCE} | ({MODEL_FILES} if model_file.available() else set())
    )
    model_formats = (model_file.FORMAT,)
    model_capability = Capability(phases=("infer",), dtypes=("float32",), modes=MODES)

    def __init__(self, context: PluginContext) -> None:
        threads = context.threads
        if threads and _backends_initialized():
            raise RuntimeError(
                f"{THREADS_VARIABLE}={threads} cannot apply: jax already created its backend"
            )
        self._threads = limit_cpu_threads(threads)  # before the backend exists
        self.world = context.world
        if self.world is not None:  # blocks until every rank of the world has joined
            distributed.start(self.world, context.device)
        self.device = select_device(context.device)
        self._gpu = self.device.platform == "gpu"
        # Every array this process creates (weights, synthetic data, host batches) and every
        # computation on them then lives on the selected device, also where JAX_PLATFORMS
        # would make another one the default (a CPU agent on a GPU host).
        jax.config.update("jax_default_device", self.device)
        self.backend = (
            "" if self.world is None else distributed.backend_name(self.device, self.world)
        )
        if context.tf32 is not None:  # FWBENCH_TF32; unset keeps XLA's default
            jax.config.update("jax_default_matmul_precision", _TF32_PRECISION[context.tf32])
        self.no_profiler = xplane.no_profiler("JAX's profiler", self._gpu, self.world is not None)
        if not self.no_profiler:
            self.optional_capabilities = JaxPlugin.optional_capabilities | {PROFILE}

    # ----------------------------------------------------------------------- FrameworkPlugin

    def _capability(self) -> Capability:
        """Every workload's but the transformers' own: both phases, the device's dtypes, jit."""
        dtypes = _GPU_DTYPES if self._gpu else _CPU_DTYPES
        return Capability(phases=("train", "infer"), dtypes=dtypes, modes=MODES)

    def _capabilities(self) -> dict[str, Capability]:
        """Alone (not in a world): every op and model, and the transformers; the attention op
        adds its plain mode, generate is inference only."""
        base = self._capability()
        found = dict.fromkeys((*_OPS, *models.MODEL_NAMES, *_TRANSFORMERS), base)
        found["attention"] = Capability(base.phases, base.dtypes, ATTENTION_MODES)
        found["generate"] = Capability(("infer",), base.dtypes, base.modes)
        return found

    def describe(self) -> PluginDescription:
        capability = self._capability()
        return PluginDescription(
            framework="jax",
            framework_version=jax.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries=jax_libraries(self.device),
            environment={k: os.environ[k] for k in _JAX_VARIABLES if k in os.environ},
            devices=self._devices(),
            intra_op_threads=self._threads,
            inter_op_threads=1,  # see Settings: XLA has no separate inter-op pool
            capabilities=(
                self._capabilities()
                if self.world is None
                else distributed.capabilities(capability, self.world)
            ),
            threads_fixed_at_startup=True,
            no_profiler=self.no_profiler,
        )

    def profiler(self) -> str:
        return jax_profile.PROFILER

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        return jax_profile.profile(run_steps, trace_dir)

    def _devices(self) -> tuple[DeviceInfo, ...]:
        import psutil

        devices = [DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total)]
        for gpu in _gpu_devices():
            stats = gpu.memory_stats() or {}
            devices.append(DeviceInfo("gpu", gpu.id, gpu.device_kind, stats.get("bytes_limit", 0)))
        return tuple(devices)

    def _check(self, spec: WorkloadSpec) -> jnp.dtype:
        """Refuses what this agent cannot run as asked; returns the jax dtype."""
        if spec.threads and spec.threads != self._threads:
            raise UnsupportedWorkload(
                "XLA sizes its CPU thread pool at start-up; start the agent with "
                f"{THREADS_VARIABLE}={spec.threads} (this one runs {self._threads})"
            )
        name = spec.workload.name
        capability = self._capability()
        if self.world is None:  # in a world, distributed.build refuses what it lacks
            capability = self._capabilities().get(name, capability)
        if spec.dtype not in capability.dtypes:
            raise UnsupportedWorkload(f"jax plugin on {self.device.platform}: no {spec.dtype}")
        if spec.mode not in capability.modes:
            raise UnsupportedWorkload(
                f"jax plugin has no mode {spec.mode!r} for {name}; modes: {capability.modes}"
            )
        if spec.phase not in capability.phases:
            raise UnsupportedWorkload(f"jax plugin has no phase {spec.phase!r} for {name}")
        return _JNP_DTYPES[spec.dtype]

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        built = _translated(self._build)(spec)
        if built.generation is not None:  # its parts are timed, each, by the runtime
            parts = built.generation
            steps = GenerationSteps(
                _translated(parts.prefill), _translated(parts.decode), parts.decode_steps
            )
            return BuiltStep.for_generation(steps, built.settings)
        outputs = None if built.outputs is None else _translated(built.outputs)
        flops = None if built.flops is None else _translated(built.flops)
        step = _translated(built.step)
        return dataclasses.replace(built, step=step, outputs=outputs, flops=flops)

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        dtype = self._check(spec)
        name = spec.workload.name
        train = spec.phase == "train"
        if self.world is not None:
            mesh = distributed.mesh_for(self.device)
            step, rank = distributed.build(spec, dtype, mesh, self.backend)
            return BuiltStep(step, self._settings(spec, name, train), rank=rank)
        if spec.model is not None:  # the runtime checked it against model_capability
            run = model_file.build(spec, self.device)
            settings = self._settings(spec, name, train, {"model_format": model_file.FORMAT})
            return BuiltStep(run.step, settings, outputs=run.outputs, flops=run.flops)
        if name in _TRANSFORMERS:
            return self._transformer(spec, dtype, train)
        if name in _OPS:
            key = models.data_key(spec.seed)
            step = _OPS[name](spec.batch_size, spec.params, dtype, key, train, spec.mode)
        elif name in models.MODEL_NAMES:
            step = self._model_step(spec, dtype, train)
        else:
            raise UnsupportedWorkload(f"jax plugin has no workload {name}")
        return BuiltStep(step=step, settings=self._settings(spec, name, train))

    def _model_step(
        self, spec: WorkloadSpec, dtype: jnp.dtype, train: bool
    ) -> Callable[[], object]:
        model = models.Model(spec.workload.name)
        params, state, inputs, labels = models.synthetic_training(model, spec, dtype)
        # Everything exists before the first timed call, which then measures compilation
        # (under jit) and the step, not the tail of asynchronous initialisation.
        jax.block_until_ready((params, state, inputs, labels))
        if not train:
            infer = compile_fn(make_infer_fn(model), spec.mode)
            return lambda: infer(params, state, inputs)
        dropout_key = models.dropout_key(spec.seed)
        loop = TrainLoop(model, params, state, sgd(0.01, 0.9), dropout_key, spec.mode)
        jax.block_until_ready(loop.params)
        return lambda: loop(inputs, labels)

    def _transformer(self, spec: WorkloadSpec, dtype: jnp.dtype, train: bool) -> BuiltStep:
        name = spec.workload.name
        if name == "generate":
            steps, extra = transformer_steps.build_generation(spec, dtype, self.device)
            return BuiltStep.for_generation(steps, self._settings(spec, name, train, extra))
        if name == "attention":
            key = models.data_key(spec.seed)
            step, kernel = build_attention(
                spec.batch_size, spec.params, dtype, key, train, spec.mode, self.device
            )
            extra = {"attention_kernel": kernel, "attention_layout": LAYOUT}
            return BuiltStep(step, self._settings(spec, name, train, extra))
        step, kernel = transformer_steps.build_step(spec, dtype, self.device)
        extra = {"attention_kernel": kernel}
        return BuiltStep(step, self._settings(spec, name, train, extra))

    def _settings(
        self,
        spec: WorkloadSpec,
        name: str,
        train: bool,
        more: Mapping[str, str] | None = None,
    ) -> Settings:
        precision = jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]
        extra = {
            "matmul_precision": precision or "default",
            "compiled": "whole step, one XLA program",
            "cpu_affinity": _cpu_list(),
        }
        if self.world is not None:
            extra.update(strategy=spec.strategy, backend=self.backend)
        if train and name in models.MODEL_NAMES:
            extra["donated"] = "params, BatchNorm state, optimizer state, dropout key"
        if train and name in TRANSFORMER_NAMES:
            extra["donated"] = "params, optimizer state"
        if self._gpu and not precision:
            extra["tf32"] = "XLA's default: float32 matmuls and convolutions may use TF32"
        if self._gpu:
            kind = float32_kind(precision)
            extra.update(float32_arithmetic(kind, kind, spec.dtype))
        if spec.dtype != "float32":
            extra["dtype_policy"] = "pure: parameters and inputs in the cell's dtype; no autocast"
        if spec.dtype != "float32" and name in models.MODEL_NAMES:
            extra["mixed"] = (
                f"params and activations {spec.dtype}; BatchNorm statistics and loss float32"
            )
        if spec.dtype != "float32" and name in (*TRANSFORMER_NAMES, "generate"):
            extra["mixed"] = (
                f"params and activations {spec.dtype}; LayerNorm statistics and loss float32"
            )
        extra.update(more or {})
        image_like = name == "conv2d" or name == "lenet" or "image_size" in spec.workload.params
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=self._threads,
            # XLA runs independent operations of one program concurrently on the same
            # intra-op pool; there is no second, inter-op pool to size.
            inter_op_threads=1,
            mode=spec.mode,
            layout="NHWC" if image_like else "",
            device=str(self.device),
            extra=extra,
        )

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return model_file.inspect(path)

    def synchronize(self, output: object) -> None:
        _block_until_ready(output)

    # ---------------------------------------------------------------------- ReferencePlugin

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        if model in TRANSFORMER_NAMES:
            return transformer_steps.canonical_weights(model, seed, params)
        return reference.canonical_weights(model, seed)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        if case.model in TRANSFORMER_NAMES:  # one process, whatever the world
            return transformer_steps.equivalence(case)
        if self.world is not None:  # a rank: the step jitted over the world's mesh
            return distributed.equivalence(case, distributed.mesh_for(self.device))
        return reference.equivalence(case)

    def trainer(
        self, model: str, weights: Weights, optimizer: OptimizerSpec, spec: WorkloadSpec
    ) -> reference.JaxTrainer:
        dtype = self._check(spec)
        return reference.JaxTrainer(
            model,
            weights,
            optimizer,
            dtype=dtype,
            mode=spec.mode,
            seed=spec.seed,
            settings=self._settings(spec, model, train=True),
        )


def _cpu_list() -> str:
    return ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
