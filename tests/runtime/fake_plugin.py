"""A framework-free plugin for in-process runtime tests: its "steps" sleep or spin for a
duration chosen by the request, so timing, cancellation and error mapping can be exercised
without a framework. The real frameworks are tested through real agent processes."""

from __future__ import annotations

import time

from fwbench.runtime.plugin import (
    BuiltStep,
    Capability,
    DeviceInfo,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
)

# gemm's "m" parameter sets the step duration in microseconds; m above this "runs out of
# memory" the way a framework does, with its own exception type.
OOM_ABOVE = 30000


class OutOfMemoryError(RuntimeError):
    """Named like torch.OutOfMemoryError, which the runtime must recognise by name."""


class FakePlugin:
    def __init__(self) -> None:
        self.built: list[WorkloadSpec] = []
        self.synchronized = 0

    def describe(self) -> PluginDescription:
        return PluginDescription(
            framework="fake",
            framework_version="1.2.3",
            plugin_version="0.0.1",
            libraries={"blas": "none"},
            environment={"FAKE_SWITCH": "on"},
            devices=(DeviceInfo("cpu", 0, "fake cpu", 1024),),
            intra_op_threads=1,
            inter_op_threads=1,
            capabilities={
                "gemm": Capability(("train", "infer"), ("float32", "float64"), ("eager",)),
                "lenet": Capability(("infer",), ("float32",), ("eager", "compiled")),
            },
        )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        self.built.append(spec)
        if spec.workload.name == "lenet" and spec.mode == "compiled":
            raise UnsupportedWorkload("compiled lenet is not available in this build")
        micros = spec.params.get("m", 100)
        if micros > OOM_ABOVE:
            raise OutOfMemoryError("tried to allocate 1 PiB")
        seconds = micros / 1e6

        def step() -> object:
            time.sleep(seconds)
            return seconds

        settings = Settings(spec.dtype, 1, 1, spec.mode, "", "cpu", {"fake": "yes"})
        return BuiltStep(step=step, settings=settings)

    def synchronize(self, output: object) -> None:
        self.synchronized += 1
