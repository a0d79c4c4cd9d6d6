"""What differs between Keras' backends outside Keras' own API, one small class each: the
device a step runs on, waiting for it, the framework's out-of-memory errors, the versions and
devices describe() reports, and, for the single-op workloads, compiling a function and its
gradient the backend's way (Keras has no backend-neutral gradient: its trainers call
torch.autograd, jax.vjp/value_and_grad or tf.GradientTape themselves).

Imported after environment.start(): Keras and the backend are imported, on the right backend."""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from fwbench.runtime import tf_flops, xla_flops
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.plugin import DeviceInfo, FlopCount

Forward = Callable[..., Any]
_OOM_MESSAGES = ("resource_exhausted", "out of memory", "failed to allocate")


def _cpu() -> DeviceInfo:
    import psutil

    return DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total)


class Backend:
    """The common part; `name` is Keras' backend name, `framework` its framework's module."""

    name = ""
    on_gpu = False
    device = "cpu"

    @property
    def framework(self) -> Any:
        return importlib.import_module(self.name)

    def version(self) -> str:
        return str(self.framework.__version__)

    def libraries(self) -> dict[str, str]:
        return {"keras": keras.__version__, "numpy": np.__version__}

    def devices(self) -> tuple[DeviceInfo, ...]:
        return (_cpu(),)

    def scope(self) -> contextlib.AbstractContextManager[object]:
        """Entered around building and every step: the device Keras places tensors on."""
        return contextlib.nullcontext()

    def inference(self) -> contextlib.AbstractContextManager[object]:
        """Entered around a forward pass outside Keras' predict (generation): no autograd
        record where the backend keeps one."""
        return contextlib.nullcontext()

    def synchronize(self, output: object) -> None:
        """Blocks until the work that produced `output` is done."""

    def is_out_of_memory(self, error: Exception) -> bool:
        return isinstance(error, MemoryError)

    def set_threads(self, threads: int) -> int:
        """Resizes the intra-op pool for one run where the backend can; returns its size."""
        raise NotImplementedError

    def count_flops(self, model: keras.Model, inputs: Any) -> FlopCount:
        """One inference call of a user's model on `inputs`, counted by the backend's own
        counter (protocol 1.9's FlopCount)."""
        raise NotImplementedError

    def op_step(
        self, forward: Forward, inputs: Sequence[Any], train: bool, mode: str
    ) -> Callable[[], object]:
        """A single op's step in `mode`: forward only, or forward and the gradients to every
        input from an all-ones upstream gradient (returned with the output, so a compiler
        cannot prune the forward pass)."""
        raise NotImplementedError


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, requested: str, default_threads: int) -> None:
        import torch
        from keras.src.backend.torch.core import DEFAULT_DEVICE

        gpus = 0 if requested == "cpu" else torch.cuda.device_count()
        if requested == "cuda" and not gpus:
            raise RuntimeError("FWBENCH_DEVICE=cuda but torch sees no GPU")
        self.on_gpu = bool(gpus)
        self.device = "cuda:0" if gpus else "cpu"
        # Keras picks CUDA whenever torch sees a GPU; a CPU agent on a GPU host says otherwise.
        self._scoped = DEFAULT_DEVICE.split(":")[0] != self.device.split(":")[0]
        self.default_threads = default_threads

    def libraries(self) -> dict[str, str]:
        import torch

        found = super().libraries()
        config = torch.__config__.show()
        for key, pattern in (
            ("mkl", r"Math Kernel Library Version ([\w.]+)"),
            ("onednn", r"(?:MKL-DNN|oneDNN) v([\w.]+)"),
            ("openmp", r"OpenMP (\d+)"),
            ("cpu_capability", r"CPU capability usage: (\w+)"),
        ):
            match = re.search(pattern, config)
            if match:
                found[key] = match.group(1)
        if torch.version.cuda:
            found["cuda"] = torch.version.cuda
        if torch.backends.cudnn.is_available():
            found["cudnn"] = str(torch.backends.cudnn.version())
        return found

    def devices(self) -> tuple[DeviceInfo, ...]:
        import torch

        gpus = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append(DeviceInfo("gpu", index, props.name, props.total_memory))
        return (_cpu(), *gpus)

    def scope(self) -> contextlib.AbstractContextManager[object]:
        return keras.device(self.device) if self._scoped else contextlib.nullcontext()

    def inference(self) -> contextlib.AbstractContextManager[object]:
        import torch

        return torch.no_grad()

    def synchronize(self, output: object) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize()

    def is_out_of_memory(self, error: Exception) -> bool:
        import torch

        if isinstance(error, torch.OutOfMemoryError | MemoryError):
            return True
        return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)

    def set_threads(self, threads: int) -> int:
        import torch

        torch.set_num_threads(threads or self.default_threads)
        return int(torch.get_num_threads())

    def count_flops(self, model: keras.Model, inputs: Any) -> FlopCount:
        """PyTorch's FlopCounterMode around the call: Keras' layers run torch's operators."""
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with counter, torch.inference_mode():
            model(inputs, training=False)
        name = f"torch.utils.flop_counter.FlopCounterMode (torch {torch.__version__})"
        return FlopCount(float(counter.get_total_flops()), name)

    def op_step(
        self, forward: Forward, inputs: Sequence[Any], train: bool, mode: str
    ) -> Callable[[], object]:
        import torch

        run = torch.compile(forward) if mode == "compile" else forward
        if not train:
            return lambda: run(*inputs)
        leaves = tuple(x.requires_grad_(True) for x in inputs)
        with torch.no_grad():
            upstream = torch.ones_like(forward(*inputs))

        def step() -> object:
            for leaf in leaves:
                leaf.grad = None
            out = run(*leaves)
            out.backward(upstream)
            return out

        return step


class JaxBackend(Backend):
    name = "jax"

    def __init__(self, requested: str) -> None:
        import jax

        try:
            gpus = [] if requested == "cpu" else list(jax.local_devices(backend="gpu"))
        except RuntimeError:  # no GPU backend in this jaxlib, or JAX_PLATFORMS excludes it
            gpus = []
        if requested == "cuda" and not gpus:
            raise RuntimeError("FWBENCH_DEVICE=cuda but jax sees no GPU")
        self._device = gpus[0] if gpus else jax.local_devices(backend="cpu")[0]
        self.on_gpu = bool(gpus)
        self.device = str(self._device)
        jax.config.update("jax_default_device", self._device)

    def libraries(self) -> dict[str, str]:
        import jax.extend.backend

        backend = jax.extend.backend.get_backend(self._device.platform)
        return {
            **super().libraries(),
            "jaxlib": importlib.metadata.version("jaxlib"),
            "backend": backend.platform,
            "backend_version": backend.platform_version,
        }

    def devices(self) -> tuple[DeviceInfo, ...]:
        gpus = []
        if self.on_gpu:
            import jax

            for gpu in jax.local_devices(backend="gpu"):
                limit = (gpu.memory_stats() or {}).get("bytes_limit", 0)
                gpus.append(DeviceInfo("gpu", gpu.id, gpu.device_kind, limit))
        return (_cpu(), *gpus)

    def synchronize(self, output: object) -> None:
        import jax

        jax.block_until_ready(output)

    def is_out_of_memory(self, error: Exception) -> bool:
        import jax

        text = str(error).lower()
        if isinstance(error, MemoryError):
            return True
        return isinstance(error, jax.errors.JaxRuntimeError) and any(
            m in text for m in _OOM_MESSAGES
        )

    def count_flops(self, model: keras.Model, inputs: Any) -> FlopCount:
        """XLA's cost analysis of the model's stateless call, jitted at the inputs' shapes."""
        import jax

        def call(trainable: Any, other: Any, x: Any) -> Any:
            return model.stateless_call(trainable, other, x, training=False)[0]

        trainable = [v.value for v in model.trainable_variables]
        other = [v.value for v in model.non_trainable_variables]
        return xla_flops.count(jax.jit(call).lower(trainable, other, inputs), jax.__version__)

    def op_step(
        self, forward: Forward, inputs: Sequence[Any], train: bool, mode: str
    ) -> Callable[[], object]:
        import jax

        def with_grads(*xs: Any) -> object:
            out, pullback = jax.vjp(forward, *xs)
            return out, pullback(jax.numpy.ones_like(out))

        function = with_grads if train else forward
        run = jax.jit(function) if mode == "jit" else function
        return lambda: run(*inputs)


class _RetracingNoticeFilter(logging.Filter):
    """Drops TensorFlow's "N out of the last M calls to <fn> triggered tf.function retracing":
    each compiled model has its own train and predict functions, traced once each, by design,
    and TensorFlow counts traces per Python code object across models."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


class TensorFlowBackend(Backend):
    name = "tensorflow"

    def __init__(self, requested: str) -> None:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if requested == "cpu" and gpus:
            tf.config.set_visible_devices([], "GPU")
        if requested == "cuda" and not gpus:
            raise RuntimeError("FWBENCH_DEVICE=cuda but TensorFlow sees no GPU")
        self.on_gpu = bool(gpus) and requested != "cpu"
        self.device = "/GPU:0" if self.on_gpu else "/CPU:0"
        logger = tf.get_logger()
        if not any(isinstance(f, _RetracingNoticeFilter) for f in logger.filters):
            logger.addFilter(_RetracingNoticeFilter())

    def libraries(self) -> dict[str, str]:
        import tensorflow as tf
        from tensorflow.python.util import _pywrap_util_port

        build = tf.sysconfig.get_build_info()
        found = {
            **super().libraries(),
            "tensorflow_git": tf.version.GIT_VERSION,
            "onednn_enabled": str(bool(_pywrap_util_port.IsMklEnabled())).lower(),
            "xla": str(_pywrap_util_port.IsBuiltWithXLA()).lower(),
            "cuda_build": str(build.get("is_cuda_build", False)).lower(),
        }
        for key in ("cuda_version", "cudnn_version"):
            if build.get(key):
                found[key.removesuffix("_version")] = str(build[key])
        return found

    def devices(self) -> tuple[DeviceInfo, ...]:
        import tensorflow as tf

        gpus = []
        for index, gpu in enumerate(tf.config.get_visible_devices("GPU")):
            details = tf.config.experimental.get_device_details(gpu)
            gpus.append(DeviceInfo("gpu", index, str(details.get("device_name", gpu.name))))
        return (_cpu(), *gpus)

    def synchronize(self, output: object) -> None:
        """CPU kernels finish before TensorFlow returns; GPU ones run on CUDA streams."""
        if self.on_gpu:
            import tensorflow as tf

            tf.test.experimental.sync_devices()

    def is_out_of_memory(self, error: Exception) -> bool:
        import tensorflow as tf

        if isinstance(error, tf.errors.ResourceExhaustedError | MemoryError):
            return True
        text = str(error).lower()
        return isinstance(error, tf.errors.OpError) and any(m in text for m in _OOM_MESSAGES)

    def count_flops(self, model: keras.Model, inputs: Any) -> FlopCount:
        """TensorFlow's profiler over the model's call traced at the inputs' shapes."""
        import tensorflow as tf

        specs = tf.nest.map_structure(tf.TensorSpec.from_tensor, inputs)
        traced = tf.function(lambda x: model(x, training=False))
        return tf_flops.count(traced.get_concrete_function(specs))

    def op_step(
        self, forward: Forward, inputs: Sequence[Any], train: bool, mode: str
    ) -> Callable[[], object]:
        import tensorflow as tf

        upstream = tf.ones_like(forward(*inputs)) if train else None

        def with_grads(*xs: Any) -> object:
            with tf.GradientTape() as tape:
                tape.watch(list(xs))
                out = forward(*xs)
            return out, tape.gradient(out, list(xs), output_gradients=upstream)

        function = with_grads if train else forward
        if mode != "eager":
            function = tf.function(function, jit_compile=mode == "xla", autograph=False)
        return lambda: function(*inputs)


def make_backend(name: str, requested_device: str, default_threads: int) -> Backend:
    if name == "torch":
        return TorchBackend(requested_device, default_threads)
    if name == "jax":
        return JaxBackend(requested_device)
    return TensorFlowBackend(requested_device)
