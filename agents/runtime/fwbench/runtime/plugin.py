"""The narrow interface a framework plugin implements, and the types it exchanges.

docs/plugins.md is the contract in prose; tests/plugin_contract checks a plugin against it."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ParamSpec, Protocol, TypeVar, runtime_checkable

from fwbench.runtime.invalid_context import InvalidContext as InvalidContext  # plugins' import
from fwbench.runtime.model_request import ModelRequest
from fwbench.runtime.world import World, world_from_environment
from fwbench.spec import startup
from fwbench.spec.catalogue import WorkloadDef

DEVICES = ("cpu", "cuda", "auto")
DEVICE_VARIABLE = "FWBENCH_DEVICE"
THREADS_VARIABLE = startup.THREADS
INTEROP_THREADS_VARIABLE = "FWBENCH_INTEROP_THREADS"
# GPU math switches (docs/gpu.md): on or off; unset leaves the framework's default.
TF32_VARIABLE = "FWBENCH_TF32"  # TF32 for float32 matmuls and convolutions
CUDNN_BENCHMARK_VARIABLE = "FWBENCH_CUDNN_BENCHMARK"  # cuDNN autotuning (torch)
CUDA_EVENTS_VARIABLE = "FWBENCH_CUDA_EVENTS"  # device time per step from CUDA events (torch)
# Half-precision cells of models under the framework's autocast (float32 weights, products in
# the cell's dtype) instead of pure casts; only a plugin whose class says `supports_autocast`
# may start with it on (registry.py refuses the others: they would run pure under the name).
AUTOCAST_VARIABLE = "FWBENCH_AUTOCAST"
# What a float32 cell's matrix products and convolutions ran in on a GPU: settings keys every
# plugin reports on its GPU float32 rows, valued "float32", "tf32" or "bf16" (the collector
# says when two compared rows differ: analysis/arithmetic.py). NVIDIA_TF32_OVERRIDE=0 turns
# TF32 off in cuBLAS and cuDNN whatever the framework asks.
FLOAT32_MATMUL, FLOAT32_CONV = "float32_matmul", "float32_conv"
_ON = ("on", "1", "true", "yes")
_OFF = ("off", "0", "false", "no")

# Optional capabilities a plugin may declare, each with the methods it then implements
# (signatures in reference.py). "accuracy" runs the catalogue's accuracy workloads;
# "equivalence" serves fwbench-reference (canonical weights, the cross-framework check).
# "model_files" reads the user's model files: the plugin names the formats it reads in
# `model_formats` and answers `inspect_model` (model_files.py); `build` then gets
# WorkloadSpec.model set and returns BuiltStep.outputs. "model_export" (with "model_files")
# writes a file it reads in other formats: `export_formats` and `export_model`
# (model_export.py).
ACCURACY = "accuracy"
EQUIVALENCE = "equivalence"
MODEL_FILES = "model_files"
MODEL_EXPORT = "model_export"
PROFILE = "profile"  # profiling.py
OPTIONAL_CAPABILITIES: Mapping[str, tuple[str, ...]] = {
    ACCURACY: ("canonical_weights", "trainer"),
    EQUIVALENCE: ("canonical_weights", "equivalence"),
    MODEL_FILES: ("inspect_model",),
    MODEL_EXPORT: ("export_model",),
    PROFILE: ("profiler", "profile"),
}

P = ParamSpec("P")
T = TypeVar("T")


class UnsupportedWorkload(Exception):
    """The plugin cannot run this workload, phase, dtype or mode (maps to UNIMPLEMENTED)."""


class OutOfMemory(Exception):
    """The framework ran out of host or device memory (maps to RESOURCE_EXHAUSTED).

    Plugins raise it chained from the framework's own error: `raise OutOfMemory(...) from e`."""


def _check_device(name: str, value: str) -> None:
    if value not in DEVICES:
        raise InvalidContext(f"{name}={value!r}: expected cpu, cuda or auto")


def _check_count(name: str, value: int) -> None:
    if value < 0:
        raise InvalidContext(f"{name}={value!r}: expected a non-negative integer")


@dataclass(frozen=True)
class PluginContext:
    """What the runtime hands a plugin's constructor: decided once, per agent process."""

    device: str = "auto"  # "cpu"; "cuda" (refuse to start without one); "auto" (CUDA if any)
    threads: int = 0  # intra-op threads to size the pools with; 0 = the framework's default
    interop_threads: int = 0  # inter-op threads; 0 = the framework's default
    # The distributed world this process is a rank of (world.py); None = alone. A plugin
    # initialises its framework's distributed runtime in its constructor when it is set.
    world: World | None = None
    tf32: bool | None = None  # FWBENCH_TF32; None = the framework's default
    cudnn_benchmark: bool | None = None  # FWBENCH_CUDNN_BENCHMARK; None = the default
    cuda_events: bool | None = None  # FWBENCH_CUDA_EVENTS; None = on where there are events
    autocast: bool | None = None  # FWBENCH_AUTOCAST; None or False = pure half precision

    def __post_init__(self) -> None:
        _check_device("device", self.device)
        _check_count("threads", self.threads)
        _check_count("interop_threads", self.interop_threads)


def _env_count(environ: Mapping[str, str], name: str) -> int:
    raw = environ.get(name, "").strip()
    try:
        value = int(raw or "0")
    except ValueError:
        raise InvalidContext(f"{name}={raw!r}: expected a non-negative integer") from None
    _check_count(name, value)
    return value


def env_switch(environ: Mapping[str, str], name: str) -> bool | None:
    """An on/off variable: True, False, or None when unset or empty."""
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in _ON or raw in _OFF:
        return raw in _ON
    raise InvalidContext(f"{name}={raw!r}: expected on or off")


def context_from_environment(environ: Mapping[str, str] = os.environ) -> PluginContext:
    """FWBENCH_DEVICE (default auto), FWBENCH_THREADS and FWBENCH_INTEROP_THREADS (default 0),
    FWBENCH_TF32, FWBENCH_CUDNN_BENCHMARK, FWBENCH_CUDA_EVENTS and FWBENCH_AUTOCAST (on/off,
    default unset);
    raises InvalidContext naming the variable and its allowed values."""
    device = environ.get(DEVICE_VARIABLE, "").strip() or "auto"
    _check_device(DEVICE_VARIABLE, device)
    threads = _env_count(environ, THREADS_VARIABLE)
    return PluginContext(
        device,
        threads,
        _env_count(environ, INTEROP_THREADS_VARIABLE),
        world_from_environment(environ),
        tf32=env_switch(environ, TF32_VARIABLE),
        cudnn_benchmark=env_switch(environ, CUDNN_BENCHMARK_VARIABLE),
        cuda_events=env_switch(environ, CUDA_EVENTS_VARIABLE),
        autocast=env_switch(environ, AUTOCAST_VARIABLE),
    )


def float32_arithmetic(matmul: str, conv: str, dtype: str) -> dict[str, str]:
    """The FLOAT32_MATMUL and FLOAT32_CONV settings of a GPU row, given what the framework is
    set to use for float32 products and convolutions; {} for a cell not in float32."""
    if dtype != "float32":
        return {}
    if os.environ.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0":
        matmul, conv = (("float32" if kind == "tf32" else kind) for kind in (matmul, conv))
    return {FLOAT32_MATMUL: matmul, FLOAT32_CONV: conv}


def translate_out_of_memory(
    is_out_of_memory: Callable[[Exception], bool], function: Callable[P, T]
) -> Callable[P, T]:
    """`function`, raising OutOfMemory (chained) for the errors `is_out_of_memory` recognises:
    lets a plugin translate its framework's errors in one place (build, step, synchronize)."""

    # Name, docstring and __wrapped__ only: a framework's callable object (a tf.function) keeps
    # its own state, which has no business in this wrapper's __dict__.
    @functools.wraps(function, updated=())
    def translated(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        except Exception as error:
            if is_out_of_memory(error):
                raise OutOfMemory(f"{type(error).__name__}: {error}") from error
            raise

    return translated


@dataclass(frozen=True)
class WorkloadSpec:
    """One validated workload cell, as handed to `FrameworkPlugin.build`."""

    workload: WorkloadDef
    phase: str  # "train" or "infer"
    batch_size: int
    dtype: str  # "float32", "float16", "bfloat16" or "float64"
    params: Mapping[str, int]  # every shape parameter, defaults filled in
    threads: int  # intra-op threads to use; 0 keeps the framework's current setting
    seed: int
    mode: str  # one of the workload's supported modes, never empty
    # A distributed strategy of Capability.strategies ("ddp", ...) when the agent is a rank
    # of a world; "" when it runs alone.
    strategy: str = ""
    # The user's model file of this cell (capability "model_files"); None for the catalogue's
    # workloads. Its inputs come from `model.arrays(seed)`: the same numbers on every agent.
    model: ModelRequest | None = None


@dataclass(frozen=True)
class Settings:
    """What a built step will actually run with."""

    dtype: str
    intra_op_threads: int
    inter_op_threads: int
    mode: str
    layout: str
    device: str
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RankReport:
    """What a rank of a world reports besides its samples (RankResult in agent.proto)."""

    backend: str
    # Per timed step, framework-measured times by name (e.g. DDP's "communication"), in
    # nanoseconds, the mean over the timed steps: called once, after the timed loop.
    engine_nanoseconds: Callable[[], Mapping[str, int]] = dict
    collective_bytes: int = 0  # bytes each rank contributes per collective (allreduce)
    first_step_loss: Callable[[], float] = lambda: float("nan")
    # Devices of this process the data-parallel step ran on, batch_size items each: a rank
    # started with FWBENCH_LOCAL_DEVICES=D must run on D (the runtime checks; world.py).
    replicas: int = 1


@dataclass(frozen=True)
class GenerationSteps:
    """A workload of kind "generation" in its parts, which the runtime times one by one (each
    followed by `synchronize`): `prefill()` starts a fresh generation (the KV cache emptied)
    with the prompt's forward pass up to and including the first new token; `decode()` then
    makes one more token for every sequence, `decode_steps` times per generation (the
    catalogue's count for the cell: the runtime refuses another). Each returns what
    `FrameworkPlugin.synchronize` needs to wait on."""

    prefill: Callable[[], object]
    decode: Callable[[], object]
    decode_steps: int

    def generate(self) -> object:
        """One whole generation, untimed."""
        output = self.prefill()
        for _ in range(self.decode_steps):
            output = self.decode()
        return output


@dataclass(frozen=True)
class FlopCount:
    """One forward pass of a model file's cell, as the framework's own counter counts it
    (agent.proto's FlopCount, protocol 1.9): `flops` for the whole batch (a multiply-add is 2),
    `counter` the counter and its version; or flops 0 and `not_counted` saying why."""

    flops: float
    counter: str = ""
    not_counted: str = ""


@dataclass(frozen=True)
class BuiltStep:
    """`step()` runs one iteration and returns whatever `synchronize` needs to wait on.
    `report`, when given, is asked once after the timed loop for figures the plugin measured
    itself (device time from CUDA events: device_timing.py); they join the row's
    settings.extra. A generation workload's step is `generation` (use `for_generation`): the
    runtime times its prefill and each decode step. A model file's step (WorkloadSpec.model)
    gives `outputs`: called once after the timed loop, the model's outputs for the cell's
    inputs by name, as NumPy arrays (the runtime sends them: RunResult.outputs); and, where
    the framework has a FLOP counter, `flops`: called once after the timed loop when the
    request asks (RunRequest.count_flops), one forward pass counted (FlopCount)."""

    step: Callable[[], object]
    settings: Settings
    rank: RankReport | None = None  # set when the step ran as a rank of a world
    report: Callable[[], Mapping[str, str]] | None = None
    generation: GenerationSteps | None = None
    outputs: Callable[[], Mapping[str, object]] | None = None
    flops: Callable[[], FlopCount] | None = None

    @classmethod
    def for_generation(cls, steps: GenerationSteps, settings: Settings) -> BuiltStep:
        return cls(step=steps.generate, settings=settings, generation=steps)


@dataclass(frozen=True)
class Capability:
    """What a plugin supports for one catalogue workload; modes[0] is the default."""

    phases: tuple[str, ...]
    dtypes: tuple[str, ...]
    modes: tuple[str, ...]
    # Distributed strategies for an agent in a world; strategies[0] is the default. Empty:
    # the workload runs alone only (a plugin in a world declares what it can distribute).
    strategies: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cpu" or "gpu"
    index: int
    name: str
    memory_total_bytes: int = 0


@dataclass(frozen=True)
class PluginDescription:
    framework: str
    framework_version: str
    plugin_version: str
    libraries: Mapping[str, str]
    environment: Mapping[str, str]
    devices: tuple[DeviceInfo, ...]
    intra_op_threads: int
    inter_op_threads: int
    capabilities: Mapping[str, Capability]  # keyed by catalogue workload name
    # True when the framework sizes its thread pools once, at start-up (TensorFlow, XLA): a
    # different thread count then needs a new agent process started with FWBENCH_THREADS=N,
    # and build() raises UnsupportedWorkload for any other nonzero `WorkloadSpec.threads`.
    threads_fixed_at_startup: bool = False
    # The native framework this one's results stand beside (Keras: its backend's name;
    # ONNX Runtime: the framework whose definitions its graphs reproduce) and that framework's
    # version as this process runs it; "" when the framework is its own family.
    family: str = ""
    family_version: str = ""
    # Why something is not offered, one line each, keyed "WORKLOAD", "WORKLOAD/PHASE" or
    # "*/PHASE"; the collector records it on the cell's unsupported row.
    unsupported_reasons: Mapping[str, str] = field(default_factory=dict)
    # Why a plugin without the capability "profile" profiles nothing (Describe.no_profiler);
    # "" says only that it has no profiler.
    no_profiler: str = ""


@runtime_checkable
class FrameworkPlugin(Protocol):
    """A framework, as the runtime sees it: constructed by the registry as `Plugin(context)`
    with a PluginContext; construction may import the framework and size its thread pools."""

    # Names from OPTIONAL_CAPABILITIES this plugin implements; the registry refuses a plugin
    # that declares one without its methods. Declared, never probed: frozenset() for none.
    optional_capabilities: frozenset[str]

    def describe(self) -> PluginDescription:
        """Identity, build info, devices and capabilities. Cheap; called once at start-up."""
        ...

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        """Builds model, synthetic inputs (on the device, from spec.seed) and optimizer.

        Blocks while building. Raises UnsupportedWorkload for what the plugin cannot run and
        OutOfMemory (here or from the step) when the framework runs out of memory; any other
        framework error propagates unchanged."""
        ...

    def synchronize(self, output: object) -> None:
        """Blocks until the device has finished the work that produced `output`."""
        ...
