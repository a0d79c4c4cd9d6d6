"""OpenVINO's CPU device as the benchmark runs it: a graph read by OpenVINO's ONNX reader,
reshaped to the cell's input shapes, compiled with the cell's performance hint (the plugin's
modes) and threads, and one infer request with its inputs set once.

Each build compiles anew, so each cell's hint and thread count are its own. Float32 is asked
for explicitly (INFERENCE_PRECISION_HINT f32): OpenVINO's CPU device otherwise infers in
bfloat16 on processors that have it (AMX, AVX-512 BF16), which a float32 row must not. The
inputs are numpy arrays wrapped as tensors that share their memory and set on the request
once; the timed step is `request.infer()`, which returns when the inference is done, its
outputs left in the request's own tensors (share_outputs: no copy to new numpy arrays per
step)."""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import openvino as ov

DEVICE = "CPU"
# The plugin's modes: OpenVINO's performance hints, the default ("latency") first. With one
# infer request, "throughput" runs it on one of the streams the hint makes, with that
# stream's share of the threads (NUM_STREAMS and threads_per_stream in the settings).
HINTS: Mapping[str, str] = {"latency": "LATENCY", "throughput": "THROUGHPUT"}
MODES: tuple[str, ...] = tuple(HINTS)
PRECISION = "f32"
# What a compiled model reports for Settings.extra, read back from it.
REPORTED = (
    "PERFORMANCE_HINT",
    "INFERENCE_NUM_THREADS",
    "NUM_STREAMS",
    "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
    "INFERENCE_PRECISION_HINT",
    "EXECUTION_MODE_HINT",
    "ENABLE_CPU_PINNING",
    "ENABLE_HYPER_THREADING",
    "SCHEDULING_CORE_TYPE",
    "EXECUTION_DEVICES",
)
_OOM_MESSAGES = ("out of memory", "bad_alloc", "failed to allocate", "cannot allocate memory")


def is_out_of_memory(error: Exception) -> bool:
    """OpenVINO's allocation failures (std::bad_alloc, "Failed to allocate ..." from the CPU
    plugin's memory manager, surfacing as RuntimeError) and Python's MemoryError."""
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(m in text for m in _OOM_MESSAGES)


@functools.cache
def core() -> ov.Core:
    """One Core per process: it holds the CPU plugin and its thread pools."""
    return ov.Core()


def version() -> str:
    """OpenVINO's release (2026.4.1), without the build's hash and branch."""
    return str(ov.__version__).split("-")[0]


def read(serialized: bytes) -> ov.Model:
    """A serialised ONNX graph through OpenVINO's ONNX reader."""
    return core().read_model(io.BytesIO(serialized))


def reshape(model: ov.Model, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Fixes every input's shape (the symbolic batch axis too), so the CPU device compiles
    static kernels for the cell's shapes rather than dynamic ones."""
    model.reshape({name: ov.PartialShape(list(shape)) for name, shape in shapes.items()})


def compile_for(
    model: ov.Model, mode: str, threads: int, profiling: bool = False
) -> ov.CompiledModel:
    """`model` compiled on the CPU device with the mode's hint, float32 inference and
    `threads` (0: OpenVINO's default, one per core it may use); with `profiling`, its
    requests keep performance counters (PERF_COUNT: a profile's own compilation, never the
    timed one's)."""
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": HINTS[mode],
        "INFERENCE_PRECISION_HINT": PRECISION,
        "INFERENCE_NUM_THREADS": threads,
    }
    if profiling:
        config["PERF_COUNT"] = True
    return core().compile_model(model, DEVICE, config)


def port_name(port: ov.Output) -> str:
    """An input's or output's name as the ONNX graph has it (the names ONNX Runtime reports)."""
    return str(port.get_any_name())


class BoundRequest:
    """One infer request of a compiled model, its inputs set once, sharing the arrays'
    memory (kept referenced here)."""

    def __init__(self, compiled: ov.CompiledModel, inputs: Mapping[str, np.ndarray]) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self._arrays = {name: np.ascontiguousarray(a) for name, a in inputs.items()}
        for name, array in self._arrays.items():
            self.request.set_tensor(name, ov.Tensor(array, shared_memory=True))

    def step(self) -> ov.InferRequest:
        self.request.infer(share_outputs=True)
        return self.request

    @contextlib.contextmanager
    def running_on(self, other: ov.InferRequest) -> Iterator[None]:
        """The step runs `other` (a request of another compilation of the same model), on
        the same input arrays, until the block ends."""
        for name, array in self._arrays.items():
            other.set_tensor(name, ov.Tensor(array, shared_memory=True))
        kept, self.request = self.request, other
        try:
            yield
        finally:
            self.request = kept

    def outputs(self) -> dict[str, np.ndarray]:
        """One inference, then each output by its ONNX name, copied out of the request."""
        self.step()
        return {
            port_name(port): np.array(self.request.get_tensor(port).data, copy=True)
            for port in self.compiled.outputs
        }


def _text(value: Any) -> str:
    """A property's value as one line: enums by name, element types by their short name."""
    if isinstance(value, ov.Type):
        return str(value.get_type_name())
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(sorted(_text(v) for v in value))
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


def runtime_layers(compiled: ov.CompiledModel) -> str:
    """The CPU plugin's layers after its own fusions, by type with their counts ("Subgraph"
    is a kernel its Snippets JIT-compiled from fused nodes), Input, Output, Const left out."""
    counts: dict[str, int] = {}
    for op in compiled.get_runtime_model().get_ops():
        kind = str(op.get_rt_info()["layerType"].astype(str))
        if kind not in ("Input", "Output", "Const"):
            counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items()))


def properties(compiled: ov.CompiledModel) -> dict[str, str]:
    """What the compiled model really runs with (REPORTED), read back from it."""
    return {key: _text(compiled.get_property(key)) for key in REPORTED}


def threads_of(compiled: ov.CompiledModel) -> int:
    """INFERENCE_NUM_THREADS as compiled: what was asked, or OpenVINO's default for 0, never
    more than the cores it may use (Settings.intra_op_threads, as the protocol asks: the
    run's count; in "throughput" one infer request runs on its stream's share of them)."""
    return int(compiled.get_property("INFERENCE_NUM_THREADS"))


def threads_per_stream(compiled: ov.CompiledModel) -> int:
    """The threads one infer request runs on: its stream's share of INFERENCE_NUM_THREADS
    (all of them in "latency", one stream; "throughput" splits them among its streams)."""
    streams = int(compiled.get_property("NUM_STREAMS"))
    return max(1, threads_of(compiled) // max(1, streams))


def settings_extra(compiled: ov.CompiledModel, threads_asked: int) -> dict[str, str]:
    """Settings.extra: the compiled model's properties (inference_num_threads: all its
    streams' threads), the threads asked and how many one infer request runs on (its
    stream's share), and what the timed step is."""
    extra = {key.lower(): value for key, value in properties(compiled).items()}
    extra["inference_num_threads_asked"] = str(threads_asked) + (
        "" if threads_asked else " (OpenVINO's default)"
    )
    extra["threads_per_stream"] = str(threads_per_stream(compiled))
    extra["infer_requests"] = "1"
    extra["timed_step"] = (
        "request.infer(): one synchronous infer request, inputs set once as shared-memory "
        "tensors, outputs left in the request"
    )
    extra["shapes"] = "static: inputs reshaped to the cell's before compiling"
    return extra
