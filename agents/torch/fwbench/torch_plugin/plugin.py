"""TorchPlugin: the PyTorch framework plugin, on CPU or the first CUDA device.

Modes: "eager" (the default) and "compile" (``torch.compile`` with the inductor backend, its
default mode). Compilation happens lazily on the first call, so it lands in the first-iteration
figure, never in the steady-state samples. torch before 2.0 (Debian 12's 1.13) has no
torch.compile: there the plugin offers "eager" only, and says so in Describe.

At start-up the plugin finds the BLAS its gemm actually runs on (blas.py), names it in Describe
(libraries["blas"], so in every row) and refuses to start when $FWBENCH_EXPECT_BLAS asks for
another."""

from __future__ import annotations

import dataclasses
import gc
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np
import torch
from torch import nn

from fwbench.runtime import torch_profile
from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.blas import require_expected
from fwbench.runtime.device_timing import EventTimer
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import (
    ACCURACY,
    EQUIVALENCE,
    MODEL_EXPORT,
    MODEL_FILES,
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
    float32_arithmetic,
    translate_out_of_memory,
)
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec
from fwbench.torch_plugin import (
    distributed,
    model_export,
    model_file,
    models,
    reference,
    torchscript,
    transformers,
)
from fwbench.torch_plugin.batchnorm import refuse_one_value_batch_norm
from fwbench.torch_plugin.blas import build_blas_info, torch_blas
from fwbench.torch_plugin.ops import build_conv2d, build_gemm

PLUGIN_VERSION = "0.1.0"
_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_OPS = {"gemm": build_gemm, "conv2d": build_conv2d}
MODES = ("eager", "compile")
P = ParamSpec("P")
T = TypeVar("T")
# Variables that change what torch does; reported when set.
_TORCH_VARIABLES = (
    "OMP_NUM_THREADS",
    "TORCH_NUM_THREADS",
    "ATEN_CPU_CAPABILITY",
    "TORCH_CUDNN_V8_API_ENABLED",
)
# How a float16/bfloat16 cell runs: the model's weights and the inputs are cast to the dtype
# (no torch.autocast), so every operation, the optimizer's too, runs in it.
DTYPE_POLICY = "pure: weights, inputs and optimizer state in the cell's dtype; no autocast"
# With FWBENCH_AUTOCAST=on, a half-precision cell of a model (not a single op) runs this way.
AUTOCAST_POLICY = (
    "autocast: float32 weights, inputs and optimizer state; torch.autocast runs the products, "
    "convolutions and attention in the cell's dtype"
)
_OP_POLICY = DTYPE_POLICY + (
    " (FWBENCH_AUTOCAST applies to the benchmark steps of models run alone, not to single ops, "
    "training to accuracy or a world's ranks)"
)


def autocast(
    fn: Callable[..., torch.Tensor], device: torch.device, dtype: torch.dtype
) -> Callable[..., torch.Tensor]:
    """`fn` under torch.autocast to `dtype` (outside a compiled function: Dynamo traces it)."""

    def run(*args: object) -> torch.Tensor:
        with torch.autocast(device.type, dtype=dtype):
            return fn(*args)

    return run


Wrapper = Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]


def wrapper(mode: str) -> Wrapper:
    """Identity in eager mode; torch.compile (inductor, default mode) in compile mode. Dynamo's
    caches are reset first so that one agent can compile many workloads in a row."""
    if mode == "eager":
        return lambda fn: fn
    torch._dynamo.reset()
    return lambda fn: torch.compile(fn)  # type: ignore[return-value]


def offered_modes() -> tuple[str, ...]:
    """MODES, less "compile" where torch predates torch.compile (2.0)."""
    major = str(torch.__version__).split(".", 1)[0]
    return MODES if major.isdigit() and int(major) >= 2 else MODES[:1]


def torch_libraries() -> dict[str, str]:
    """BLAS (as built: blas_info), oneDNN, OpenMP, CUDA and cuDNN versions as torch reports
    them; the BLAS actually loaded is added by the plugin ("blas")."""
    config = torch.__config__.show()
    libraries = {"torch_cxx11_abi": str(torch.compiled_with_cxx11_abi())}
    if build_blas_info(config):
        libraries["blas_info"] = build_blas_info(config)
    patterns = {
        "lapack": r"LAPACK_INFO=(\w+)",
        "mkl": r"Math Kernel Library Version ([\w.]+)",
        "onednn": r"(?:MKL-DNN|oneDNN) v([\w.]+)",
        "openmp": r"OpenMP (\d+)",
        "cpu_capability": r"CPU capability usage: (\w+)",
    }
    for key, pattern in patterns.items():
        match = re.search(pattern, config)
        if match:
            libraries[key] = match.group(1)
    if torch.version.cuda:
        libraries["cuda"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        libraries["cudnn"] = str(torch.backends.cudnn.version())
    return libraries


def select_device(requested: str) -> torch.device:
    """PluginContext.device: "cpu", "cuda" or "auto" (CUDA when available). A CUDA agent on a
    host without CUDA must fail loudly, not measure the CPU under a CUDA label."""
    if requested == "cpu":
        return torch.device("cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("FWBENCH_DEVICE=cuda but torch sees no CUDA device")
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def is_out_of_memory(error: Exception) -> bool:
    """torch.OutOfMemoryError (CUDA's caching allocator); on the CPU, the default allocator's
    plain RuntimeError ("DefaultCPUAllocator: can't allocate memory: ...")."""
    # torch.OutOfMemoryError arrived in 2.x; 1.13 has torch.cuda.OutOfMemoryError.
    out_of_memory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(error, out_of_memory):
        return True
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


def apply_gpu_switches(tf32: bool | None, cudnn_benchmark: bool | None) -> None:
    """FWBENCH_TF32 (TF32 for float32 matmuls and cuDNN convolutions) and
    FWBENCH_CUDNN_BENCHMARK (cuDNN autotuning); None keeps torch's default. Process-wide:
    one agent process runs with one setting, which every row records."""
    if tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    if cudnn_benchmark is not None:
        torch.backends.cudnn.benchmark = cudnn_benchmark


def gpu_settings() -> dict[str, str]:
    """The settings that decide a CUDA row's figures, as torch has them now."""
    settings = {
        "tf32_matmul": str(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": str(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": str(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": str(torch.backends.cudnn.deterministic),
        "cuda_runtime": str(torch.version.cuda),
    }
    if torch.backends.cudnn.is_available():
        settings["cudnn_loaded"] = str(torch.backends.cudnn.version())
    return settings


# torch.set_float32_matmul_precision: "high" lets cuBLAS use TF32, "medium" bf16 as well;
# at "highest", allow_tf32 says.
_MATMUL_KINDS = {"high": "tf32", "medium": "bf16"}


def float32_kinds() -> tuple[str, str]:
    """What float32 matmuls and cuDNN convolutions run in, as torch is set now."""
    allowed = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "float32"
    matmul = _MATMUL_KINDS.get(torch.get_float32_matmul_precision(), allowed)
    return matmul, "tf32" if torch.backends.cudnn.allow_tf32 else "float32"


def release_cuda_memory(device: torch.device) -> None:
    """Before a cell: what the previous cell (an out-of-memory one too) left in the caching
    allocator goes back to the device, and the allocator's peak starts again from here."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _translated(function: Callable[P, T]) -> Callable[P, T]:
    return translate_out_of_memory(is_out_of_memory, function)


# Asynchronous CUDA errors, out of memory too, surface when the device is awaited. Wrapped
# once, here: synchronize runs inside every timed sample.
_cuda_synchronize = _translated(torch.cuda.synchronize)


class TorchPlugin:
    # Model files: TorchScript on every torch (torchscript.py), programs (model_file.py) where
    # torch has torch.export (2.1 and later).
    optional_capabilities = frozenset(
        {ACCURACY, EQUIVALENCE, MODEL_FILES, PROFILE}
        | ({MODEL_EXPORT} if model_export.formats() else set())
    )
    supports_autocast = True  # FWBENCH_AUTOCAST (registry.py)
    model_formats = ((model_file.FORMAT,) if model_file.available() else ()) + (torchscript.FORMAT,)
    export_formats = model_export.formats()
    model_capability = Capability(phases=("infer",), dtypes=("float32",), modes=offered_modes())

    def __init__(self, context: PluginContext) -> None:
        self.device = select_device(context.device)
        if context.threads:
            torch.set_num_threads(context.threads)
        if context.interop_threads:  # only possible before torch's first parallel work
            torch.set_num_interop_threads(context.interop_threads)
        # A request for 0 threads means this default, not whatever the previous run left.
        self.default_threads = torch.get_num_threads()
        apply_gpu_switches(context.tf32, context.cudnn_benchmark)
        # CUDA events around each step (device_timing.py): on by default on CUDA.
        self.cuda_events = self.device.type == "cuda" and context.cuda_events is not False
        self.autocast = bool(context.autocast)
        self.blas = torch_blas()
        require_expected(self.blas)  # BlasMismatch: the runtime refuses to start
        self.world = context.world
        self.backend = ""
        if self.world is not None:  # blocks until every rank of the world has joined
            self.device = distributed.device_for(self.world, self.device)
            self.backend = distributed.start(self.world, self.device)

    def _apply_threads(self, requested: int) -> None:
        torch.set_num_threads(requested or self.default_threads)

    def _capability(self) -> Capability:
        """Every workload's but the transformers' own: both phases, the device's dtypes, both
        modes."""
        cuda = self.device.type == "cuda"
        dtypes = ("float32", "float16", "bfloat16") if cuda else ("float32", "bfloat16", "float64")
        return Capability(phases=("train", "infer"), dtypes=dtypes, modes=offered_modes())

    def _capabilities(self) -> dict[str, Capability]:
        """Per workload: the attention op adds its plain mode, generate is inference only; no
        transformer before torch 2.0 (Debian's 1.13), which has no scaled_dot_product_attention."""
        base = self._capability()
        found = dict.fromkeys((*_OPS, *models.MODEL_NAMES), base)
        if offered_modes() == MODES[:1]:  # torch 1.x
            return found
        found |= dict.fromkeys(TRANSFORMER_NAMES, base)
        plain = tuple(m for m in transformers.ATTENTION_MODES if m in (*base.modes, "plain"))
        found["attention"] = Capability(base.phases, base.dtypes, plain)
        found["generate"] = Capability(("infer",), base.dtypes, base.modes)
        return found

    def describe(self) -> PluginDescription:
        capability = self._capability()
        return PluginDescription(
            framework="torch",
            framework_version=torch.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries={**torch_libraries(), "blas": self.blas.describe()},
            environment={k: os.environ[k] for k in _TORCH_VARIABLES if k in os.environ},
            devices=self._devices(),
            intra_op_threads=torch.get_num_threads(),
            inter_op_threads=torch.get_num_interop_threads(),
            capabilities=(
                self._capabilities()
                if self.world is None
                else distributed.capabilities(capability, models.MODEL_NAMES, self.world)
            ),
        )

    def _devices(self) -> tuple[DeviceInfo, ...]:
        import psutil

        devices = [DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total)]
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(DeviceInfo("gpu", index, props.name, props.total_memory))
        return tuple(devices)

    def _check(self, spec: WorkloadSpec) -> torch.dtype:
        """Refuses what describe() does not offer; returns the torch dtype."""
        capability = self._capabilities().get(spec.workload.name, self._capability())
        for aspect, value, offered in (
            ("phase", spec.phase, capability.phases),
            ("dtype", spec.dtype, capability.dtypes),
            ("mode", spec.mode, capability.modes),
        ):
            if value not in offered:
                raise UnsupportedWorkload(
                    f"torch plugin on {self.device.type}: no {aspect} {value!r}; "
                    f"offered: {', '.join(offered)}"
                )
        return _DTYPES[spec.dtype]

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        built = _translated(self._build)(spec)
        if built.generation is not None:  # its parts are timed, each, by the runtime
            parts = built.generation
            steps = GenerationSteps(
                _translated(parts.prefill), _translated(parts.decode), parts.decode_steps
            )
            return BuiltStep.for_generation(steps, built.settings)
        step = _translated(built.step)
        outputs = None if built.outputs is None else _translated(built.outputs)
        flops = None if built.flops is None else _translated(built.flops)
        built = dataclasses.replace(built, step=step, outputs=outputs, flops=flops)
        if not self.cuda_events:
            return built
        timer = EventTimer(step, lambda: torch.cuda.Event(enable_timing=True))
        return dataclasses.replace(built, step=timer, report=_translated(timer.report))

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        dtype = self._check(spec)
        self._apply_threads(spec.threads)
        release_cuda_memory(self.device)
        torch.manual_seed(spec.seed)
        generator = torch.Generator(device=self.device).manual_seed(spec.seed)
        train = spec.phase == "train"
        name = spec.workload.name
        if self.world is not None:
            step, rank = distributed.build(spec, dtype, self.device, self.world, self.backend)
            return BuiltStep(step, self._settings(spec, name), rank=rank)
        if spec.model is not None:  # the runtime checked it against model_capability
            fmt = spec.model.format
            cell = (
                torchscript.build(spec, self.device)
                if fmt == torchscript.FORMAT
                else model_file.build(spec, self.device, wrapper(spec.mode))
            )
            settings = self._settings(spec, name, {"model_format": fmt})
            return BuiltStep(cell.step, settings, outputs=cell.outputs, flops=cell.flops)
        if name == "attention":
            step, kernel = transformers.build_attention(
                spec.batch_size,
                spec.params,
                dtype,
                self.device,
                generator,
                train,
                spec.mode,
                wrapper("eager" if spec.mode == "plain" else spec.mode),
            )
            return BuiltStep(step, self._settings(spec, name, {"attention_kernel": kernel}))
        if name == "generate":
            weights, wrap = self._precision(spec, dtype, wrapper(spec.mode))
            steps, run = transformers.build_generation(
                spec.params,
                spec.batch_size,
                weights,
                self.device,
                generator,
                spec.mode,
                wrap,
                cache_dtype=dtype,
            )
            settings = self._settings(spec, name, transformers.kv_cache_settings(run))
            return BuiltStep.for_generation(steps, settings)
        if name in TRANSFORMER_NAMES:
            step, kernel = self._transformer_step(spec, dtype, generator, train)
            return BuiltStep(step, self._settings(spec, name, {"attention_kernel": kernel}))
        if name in _OPS:
            step = _OPS[name](
                spec.batch_size,
                spec.params,
                dtype,
                self.device,
                generator,
                train,
                wrapper(spec.mode),
            )
        elif name in models.MODEL_NAMES:
            step = self._model_step(spec, dtype, generator, train)
        else:
            raise UnsupportedWorkload(f"torch plugin has no workload {name}")
        return BuiltStep(step=step, settings=self._settings(spec, name))

    def _model_step(
        self, spec: WorkloadSpec, dtype: torch.dtype, generator: torch.Generator, train: bool
    ) -> Callable[[], object]:
        name = spec.workload.name
        image_size = spec.params.get("image_size", 224)
        if train:  # a cell torch's BatchNorm would refuse in its first step: unsupported
            refuse_one_value_batch_norm(name, spec.batch_size, image_size)
        weights, wrap = self._precision(spec, dtype, wrapper(spec.mode))
        model = models.build_model(name).to(device=self.device, dtype=weights)
        forward = wrap(model)
        inputs, labels = models.example_batch(
            name,
            spec.batch_size,
            image_size=image_size,
            seq_len=spec.params.get("seq_len", 200),
            dtype=weights,
            device=self.device,
            generator=generator,
        )
        if not train:
            model.eval()

            def infer() -> object:
                with torch.inference_mode():
                    return forward(inputs)

            return infer
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()

        def train_step() -> object:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(forward(inputs), labels)
            loss.backward()
            optimizer.step()
            return loss

        return train_step

    def _transformer_step(
        self, spec: WorkloadSpec, dtype: torch.dtype, generator: torch.Generator, train: bool
    ) -> tuple[Callable[[], object], str]:
        """bert or gpt: inference gives every position's logits; a training step is the
        language-model loss (float32), backward and the catalogue's SGD with momentum."""
        config = transformers.config_for(spec.workload.name, spec.params)
        weights, wrap = self._precision(spec, dtype, wrapper(spec.mode))
        model = transformers.build_transformer(config).to(device=self.device, dtype=weights)
        forward = wrap(model)
        seq_len = spec.params["seq_len"]
        tokens, labels = transformers.example_batch(
            config, spec.batch_size, seq_len, self.device, generator
        )
        kernel = transformers.kernel_of(model, dtype, self.device, seq_len)
        if not train:
            model.eval()

            def infer() -> object:
                with torch.inference_mode():
                    return forward(tokens)

            return infer, kernel
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def train_step() -> object:
            optimizer.zero_grad(set_to_none=True)
            loss = transformers.language_model_loss(forward(tokens), labels)
            loss.backward()
            optimizer.step()
            return loss

        return train_step, kernel

    def _autocasts(self, spec: WorkloadSpec) -> bool:
        """Whether the cell runs under autocast: FWBENCH_AUTOCAST=on, half precision, the
        benchmark step of a model (or generation) run alone."""
        half = spec.dtype in ("float16", "bfloat16")
        model = spec.workload.kind in ("model", "generation")
        return self.autocast and half and model and self.world is None

    def _precision(
        self,
        spec: WorkloadSpec,
        dtype: torch.dtype,
        wrap: Callable[..., Callable[..., torch.Tensor]],
    ) -> tuple[torch.dtype, Callable[..., Callable[..., torch.Tensor]]]:
        """The weights' dtype and the wrapper of the forward pass: the cell's dtype and the
        mode's wrapper, or under autocast float32 weights and the wrapper then autocast."""
        if not self._autocasts(spec):
            return dtype, wrap
        return torch.float32, lambda fn: autocast(wrap(fn), self.device, dtype)

    def _settings(
        self, spec: WorkloadSpec, name: str, more: Mapping[str, str] | None = None
    ) -> Settings:
        extra = {"mkldnn_enabled": str(torch.backends.mkldnn.enabled), **(more or {})}
        if self.world is not None:
            extra.update(strategy=spec.strategy, backend=self.backend)
        if spec.dtype in ("float16", "bfloat16"):
            extra["dtype_policy"] = DTYPE_POLICY
            if self.autocast:
                extra["dtype_policy"] = AUTOCAST_POLICY if self._autocasts(spec) else _OP_POLICY
        if spec.mode == "compile":
            extra["compile_backend"] = "inductor"
            extra["compile_mode"] = "default"
        if self.device.type == "cuda":
            extra.update(gpu_settings())
            extra.update(float32_arithmetic(*float32_kinds(), spec.dtype))
        image_like = name == "conv2d" or "image_size" in spec.workload.params or name == "lenet"
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=torch.get_num_threads(),
            inter_op_threads=torch.get_num_interop_threads(),
            mode=spec.mode,
            layout="NCHW" if image_like else "",
            device=str(self.device),
            extra=extra,
        )

    # ReferencePlugin: canonical weights are the state_dict, on CPU in float32.

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        return reference.canonical_weights(model, seed, params)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        return reference.equivalence(case, self.world)

    def trainer(
        self,
        model: str,
        weights: Mapping[str, np.ndarray],
        optimizer: OptimizerSpec,
        spec: WorkloadSpec,
    ) -> reference.TorchTrainer:
        dtype = self._check(spec)
        self._apply_threads(spec.threads)
        torch.manual_seed(spec.seed)
        module: nn.Module = reference.load(model, weights)
        return reference.TorchTrainer(
            module,
            optimizer,
            self.device,
            dtype,
            wrapper(spec.mode),
            self._settings(spec, model),
        )

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        if format == torchscript.FORMAT:
            return torchscript.inspect(path)
        return model_file.inspect(path)

    def export_model(self, path: str, format: str, target: str, dest: str) -> str:
        return model_export.export(path, format, target, dest)

    def profiler(self) -> str:
        return torch_profile.PROFILER

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        return torch_profile.profile(run_steps, trace_dir, self.device)

    def synchronize(self, output: object) -> None:
        if self.device.type == "cuda":
            _cuda_synchronize(self.device)
