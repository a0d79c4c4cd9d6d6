"""The narrow interface a framework plugin implements, and the types it exchanges."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from fwbench.spec.catalogue import WorkloadDef


class UnsupportedWorkload(Exception):
    """The plugin cannot run this workload, phase, dtype or mode (maps to UNIMPLEMENTED)."""


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
class BuiltStep:
    """`step()` runs one iteration and returns whatever `synchronize` needs to wait on."""

    step: Callable[[], object]
    settings: Settings


@dataclass(frozen=True)
class Capability:
    """What a plugin supports for one catalogue workload; modes[0] is the default."""

    phases: tuple[str, ...]
    dtypes: tuple[str, ...]
    modes: tuple[str, ...]


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


@runtime_checkable
class FrameworkPlugin(Protocol):
    """A framework, as the runtime sees it. Implementations are constructed with no
    arguments by the registry; construction may import the framework."""

    def describe(self) -> PluginDescription:
        """Identity, build info, devices and capabilities. Cheap; called once at start-up."""
        ...

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        """Builds model, synthetic inputs (on the device, from spec.seed) and optimizer.

        Blocks while building. Raises UnsupportedWorkload for what the plugin cannot run;
        any framework error (out of memory included) propagates unchanged."""
        ...

    def synchronize(self, output: object) -> None:
        """Blocks until the device has finished the work that produced `output`."""
        ...
