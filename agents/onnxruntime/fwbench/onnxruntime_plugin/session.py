"""ONNX Runtime sessions as the benchmark runs them: the execution provider, the graph
optimisation level (the plugin's modes), thread pools, and inputs bound once.

A cell's session is created at build (a new one per build, so each run's thread count and
optimisation level are its own). Its inputs are copied once to the device as OrtValues and
bound, with a preallocated output, in an IOBinding: the timed step is
`session.run_with_iobinding` only, with no host-device copy and no allocation of the output.
On the CPU the run is synchronous; on CUDA the binding's `synchronize_outputs` waits for it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import psutil

from fwbench.runtime.plugin import DeviceInfo

# The plugin's modes: ORT's graph optimisation levels, the default ("all") first.
LEVELS: Mapping[str, ort.GraphOptimizationLevel] = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
MODES: tuple[str, ...] = tuple(LEVELS)
CPU_PROVIDER, CUDA_PROVIDER = "CPUExecutionProvider", "CUDAExecutionProvider"
_OOM_MESSAGES = ("out of memory", "failed to allocate", "bad_alloc", "bfcarena", "bfc arena")


def is_out_of_memory(error: Exception) -> bool:
    """ORT's allocation failures (the CPU arena's bad_alloc, the CUDA BFC arena's "Failed to
    allocate memory", cudaErrorMemoryAllocation "out of memory"), and Python's MemoryError."""
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower()
    return type(error).__module__.startswith("onnxruntime") and any(
        m in text for m in _OOM_MESSAGES
    )


def default_intra_op_threads() -> int:
    """The intra-op pool ORT sizes when asked for 0 threads: one thread per physical core
    (no more than the CPUs this process may run on)."""
    usable = len(os.sched_getaffinity(0))
    physical = psutil.cpu_count(logical=False) or usable
    return max(1, min(physical, usable))


@dataclass(frozen=True)
class Device:
    """Where sessions run: ORT's providers, in preference order, and OrtValue's device name."""

    providers: tuple[str, ...]
    ort_device: str  # "cpu" or "cuda"
    index: int = 0
    # The CUDA provider's options ("use_tf32" from FWBENCH_TF32); empty: ORT's defaults.
    cuda_options: tuple[tuple[str, str], ...] = ()

    @property
    def cuda(self) -> bool:
        return self.ort_device == "cuda"


CPU = Device((CPU_PROVIDER,), "cpu")
CUDA = Device((CUDA_PROVIDER, CPU_PROVIDER), "cuda")


def options(mode: str, intra_op_threads: int, inter_op_threads: int) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[mode]
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = intra_op_threads  # 0: ORT's default
    so.inter_op_num_threads = inter_op_threads  # only used by ORT_PARALLEL
    so.log_severity_level = 3  # errors only: no per-session warnings on the agent's stderr
    return so


def create(
    serialized: bytes | str,
    device: Device,
    mode: str,
    intra_op_threads: int = 0,
    inter_op_threads: int = 0,
    optimized_model_path: str = "",
    profile_prefix: str = "",
) -> ort.InferenceSession:
    """A session on `device` over a serialised graph or a file's path; `optimized_model_path`
    asks ORT to write the graph it runs, `profile_prefix` to profile it (profiling.py)."""
    so = options(mode, intra_op_threads, inter_op_threads)
    if optimized_model_path:
        so.optimized_model_filepath = optimized_model_path
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    providers: list[str | tuple[str, dict[str, str]]] = [
        (name, dict(device.cuda_options)) if name == CUDA_PROVIDER else name
        for name in device.providers
    ]
    return ort.InferenceSession(serialized, sess_options=so, providers=providers)


class BoundRun:
    """A session with its inputs on the device and its output preallocated, all bound."""

    def __init__(
        self,
        session: ort.InferenceSession,
        device: Device,
        inputs: Mapping[str, np.ndarray],
        output: str,
        output_shape: tuple[int, ...],
    ) -> None:
        self.session = session
        self.binding = session.io_binding()
        # Kept referenced: the OrtValues (and, on the CPU, the arrays they may share).
        self._arrays = dict(inputs)
        self._values = {
            name: ort.OrtValue.ortvalue_from_numpy(array, device.ort_device, device.index)
            for name, array in self._arrays.items()
        }
        for name, value in self._values.items():
            self.binding.bind_ortvalue_input(name, value)
        self.output = ort.OrtValue.ortvalue_from_shape_and_type(
            list(output_shape), np.float32, device.ort_device, device.index
        )
        self.binding.bind_ortvalue_output(output, self.output)
        self._output_name = output

    def step(self) -> ort.IOBinding:
        self.session.run_with_iobinding(self.binding)
        return self.binding

    @contextlib.contextmanager
    def running_on(self, other: ort.InferenceSession) -> Iterator[None]:
        """The step runs `other` (a session of the same graph), on the same inputs and output,
        until the block ends."""
        kept = self.session, self.binding
        binding = other.io_binding()
        for name, value in self._values.items():
            binding.bind_ortvalue_input(name, value)
        binding.bind_ortvalue_output(self._output_name, self.output)
        self.session, self.binding = other, binding
        try:
            yield
        finally:
            self.session, self.binding = kept


def synchronize(output: object, device: Device) -> None:
    """The CPU provider returns when the run is done; on CUDA, wait for the bound outputs."""
    if device.cuda and isinstance(output, ort.IOBinding):
        output.synchronize_outputs()


def session_settings(
    session: ort.InferenceSession, intra_asked: int, inter_asked: int
) -> dict[str, str]:
    """What the session really runs with, for Settings.extra."""
    so = session.get_session_options()
    providers = session.get_providers()
    extra = {
        "graph_optimization_level": so.graph_optimization_level.name,
        "execution_providers": ",".join(providers),
        "execution_mode": so.execution_mode.name,
        "intra_op_num_threads": str(intra_asked) + ("" if intra_asked else " (ORT's default)"),
        "inter_op_num_threads": f"{inter_asked} (unused: sequential execution)",
        "timed_step": "session.run_with_iobinding: inputs bound once on the device, "
        "output preallocated",
    }
    options_by_provider = session.get_provider_options()
    cuda = options_by_provider.get(CUDA_PROVIDER, {})
    for key in ("use_tf32", "cudnn_conv_algo_search", "device_id"):
        if key in cuda:
            extra[f"cuda_{key}"] = str(cuda[key])
    return extra


def gpu_info(index: int) -> DeviceInfo:
    """The GPU's name and memory from NVML (the runtime's dependency), as far as it tells."""
    unknown = DeviceInfo("gpu", index, "CUDA device", 0)
    try:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py, where installed
    except ImportError:
        return unknown
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except pynvml.NVMLError:  # no driver library: the GPU is still the one ORT runs on
        return unknown
    return DeviceInfo("gpu", index, name if isinstance(name, str) else name.decode(), memory)
