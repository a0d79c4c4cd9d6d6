"""A framework-free plugin for in-process runtime tests: its "steps" sleep or spin for a
duration chosen by the request, so timing, cancellation and error mapping can be exercised
without a framework. The real frameworks are tested through real agent processes. It keeps
the plugin contract (docs/plugins.md): tests/plugin_contract runs against it too."""

from __future__ import annotations

import json
import mmap
import os
import threading
import time
from pathlib import Path

import numpy as np

from fwbench.runtime.model_files import ModelSignature, reject_unreadable
from fwbench.runtime.plugin import (
    MODEL_EXPORT,
    MODEL_FILES,
    PROFILE,
    BuiltStep,
    Capability,
    DeviceInfo,
    FlopCount,
    GenerationSteps,
    PluginContext,
    PluginDescription,
    RankReport,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
    translate_out_of_memory,
)
from fwbench.runtime.profiling import OperationSample, ProfiledSteps, RunSteps
from fwbench.spec import op_classes
from fwbench.spec.model_files import TensorInfo

# gemm's "m" parameter sets the step duration in microseconds; m above this "runs out of
# memory" the way a framework does: with its own exception, which the plugin translates.
OOM_ABOVE = 30000


class FakeAllocatorError(RuntimeError):
    """This "framework's" out-of-memory error."""


def _is_out_of_memory(error: Exception) -> bool:
    return isinstance(error, FakeAllocatorError)


class FakePlugin:
    optional_capabilities: frozenset[str] = frozenset()

    def __init__(self, context: PluginContext | None = None) -> None:
        # FAKE_START_SECONDS (an agent's environment) makes the agent slow to start, as a
        # framework's import can be (tests/faults/test_leftovers.py interrupts a start).
        # FAKE_START_FAILS_ON_RANK: that rank of a world fails at start-up, before the others
        # (which FAKE_START_SECONDS keeps starting, as ranks waiting in a rendezvous).
        if os.environ.get("RANK") == os.environ.get("FAKE_START_FAILS_ON_RANK", "-"):
            raise RuntimeError(f"fake rank {os.environ['RANK']} fails at start-up")
        # FAKE_PORT_TAKEN_ONCE (a file): the first rank 0 to start finds its rendezvous port
        # taken, as when another process binds a port between the collector choosing it free
        # and the rank binding it (a race no test can stage on time).
        taken = os.environ.get("FAKE_PORT_TAKEN_ONCE", "")
        if taken and os.environ.get("RANK") == "0" and not os.path.exists(taken):
            open(taken, "x").close()
            port = os.environ.get("MASTER_PORT")
            raise OSError(98, f"Address already in use (port {port}, taken before rank 0)")
        time.sleep(float(os.environ.get("FAKE_START_SECONDS", "0")))
        self.context = context or PluginContext(device="cpu")
        self.built: list[WorkloadSpec] = []
        # FAKE_MODEL_FORMATS=onnx,...: it "reads" model files of those formats (capability
        # model_files): JSON that names the inputs and a scale (_fake_model).
        formats = tuple(f for f in os.environ.get("FAKE_MODEL_FORMATS", "").split(",") if f)
        if formats:
            self.optional_capabilities = frozenset({MODEL_FILES})
            self.model_formats = formats
            # FAKE_MODEL_MODES=eager,compiled: the modes it runs them in (its first the default).
            modes = tuple(os.environ.get("FAKE_MODEL_MODES", "eager").split(","))
            self.model_capability = Capability(("infer",), ("float32",), modes)
        # FAKE_EXPORT_FORMATS=onnx,...: it also writes those (capability model_export): the
        # JSON with its inputs renamed (an exporter's names) and its scale times
        # FAKE_EXPORT_FACTOR (an export that computes otherwise); FAKE_EXPORT_FAILS: it fails.
        exports = tuple(f for f in os.environ.get("FAKE_EXPORT_FORMATS", "").split(",") if f)
        if formats and exports:
            self.optional_capabilities = frozenset({MODEL_FILES, MODEL_EXPORT})
            self.export_formats = exports
        self.synchronized = 0
        # FAKE_PROFILE=CLASS=SHARE,...: it profiles (capability profile): each profiled step's
        # time split into operations "fake::CLASS" of those shares, a class the common mapping
        # lacks left unmapped; FAKE_PROFILE_FAILS: its profiler raises. Without it, FAKE_NO_PROFILER
        # says why it has none.
        self.profile_shares = _shares(os.environ.get("FAKE_PROFILE", ""))
        if self.profile_shares:
            self.optional_capabilities = self.optional_capabilities | {PROFILE}
        self.step_seconds = 0.0

    def profiler(self) -> str:
        return "fake profiler 1.0"

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        if os.environ.get("FAKE_PROFILE_FAILS"):
            raise RuntimeError("the fake profiler failed, as asked")
        counted: list[int] = []  # the profiled steps: on_step(0) follows the warm-up step
        run_steps(counted.append)
        steps = len(counted) - 1
        known = op_classes.classes()
        operations = [
            OperationSample(
                f"fake::{name}",
                int(share * self.step_seconds * steps * 1e9),
                steps,
                name if name in known else "",
            )
            for name, share in self.profile_shares.items()
        ]
        if trace_dir is None:
            return ProfiledSteps(operations)
        trace = trace_dir / f"fake-{os.getpid()}-{time.monotonic_ns()}.json"
        events = [
            {"name": o.name, "ph": "X", "ts": 0, "dur": o.self_nanoseconds / 1e3}
            for o in operations
        ]
        trace.write_text(json.dumps({"traceEvents": events}))
        return ProfiledSteps(operations, str(trace), "chrome-trace")

    def _capabilities(self) -> dict[str, Capability]:
        if self.context.world is not None:  # a rank: "ddp" gemm training, no communication
            return {"gemm": Capability(("train",), ("float32",), ("eager",), ("ddp",))}
        return {
            "gemm": Capability(("train", "infer"), ("float32", "float64"), ("eager",)),
            "lenet": Capability(("infer",), ("float32",), ("eager", "compiled")),
            "generate": Capability(("infer",), ("float32",), ("eager",)),
        }

    def describe(self) -> PluginDescription:
        # FAKE_FRAMEWORK, FAKE_FAMILY, FAKE_FAMILY_VERSION: another framework's name, and the
        # family it says it stands beside (verdicts/families.py); FAKE_UNSUPPORTED=KEY=REASON;...
        # its unsupported_reasons.
        reasons = os.environ.get("FAKE_UNSUPPORTED", "")
        return PluginDescription(
            framework=os.environ.get("FAKE_FRAMEWORK", "fake"),
            family=os.environ.get("FAKE_FAMILY", ""),
            family_version=os.environ.get("FAKE_FAMILY_VERSION", ""),
            unsupported_reasons=dict(r.split("=", 1) for r in reasons.split(";") if r),
            no_profiler=os.environ.get("FAKE_NO_PROFILER", ""),
            framework_version="1.2.3",
            plugin_version="0.0.1",
            libraries={"blas": "none"},
            # FAKE_REPORTS=NAME=VALUE: reported as a switch of its own whatever the process's
            # environment holds, as an agent whose start replaced a variable would.
            environment={"FAKE_SWITCH": "on", **_reports(os.environ.get("FAKE_REPORTS", ""))},
            devices=(DeviceInfo("cpu", 0, "fake cpu", 1024),),
            intra_op_threads=1,
            inter_op_threads=1,
            capabilities=self._capabilities(),
        )

    def _check(self, spec: WorkloadSpec) -> None:
        capability = self.describe().capabilities.get(spec.workload.name)
        if capability is None:
            raise UnsupportedWorkload(f"the fake plugin has no {spec.workload.name}")
        for aspect, value, allowed in (
            ("phase", spec.phase, capability.phases),
            ("dtype", spec.dtype, capability.dtypes),
            ("mode", spec.mode, capability.modes),
        ):
            if value not in allowed:
                raise UnsupportedWorkload(f"{spec.workload.name}: no {aspect} {value!r}")

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        if spec.model is not None:
            return _model_step(spec)
        return translate_out_of_memory(_is_out_of_memory, self._build)(spec)

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return ModelSignature(
            inputs=tuple(_fake_model(path, format)[0]),
            outputs=(TensorInfo("y", (None,), "float32"),),
            parameters=1,
            unsupported_reasons={"train": "a fake model only infers"},
        )

    def export_model(self, path: str, format: str, target: str, dest: str) -> str:
        inputs, scale = _fake_model(path, format)
        if os.environ.get("FAKE_EXPORT_FAILS"):
            raise ValueError(f"the fake exporter cannot write {target}")
        text = {
            "inputs": [
                {"name": f"input_{i}", "shape": list(t.shape), "dtype": t.dtype}
                for i, t in enumerate(inputs)
            ],
            "scale": scale * float(os.environ.get("FAKE_EXPORT_FACTOR", "1")),
        }
        with open(dest, "w") as handle:
            json.dump(text, handle)
        return "fake-exporter 1.0"

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        self.built.append(spec)
        self._check(spec)
        if spec.workload.name == "lenet" and spec.mode == "compiled":
            raise UnsupportedWorkload("compiled lenet is not available in this build")
        if spec.workload.name == "generate":
            return _generation(spec)
        micros = spec.params.get("m", 100)
        # FAKE_FAILS_ONCE (a file): the first build of any process sharing it fails, as a
        # process that crashes once in a run of many.
        fails_once = os.environ.get("FAKE_FAILS_ONCE", "")
        if fails_once:
            try:
                open(fails_once, "x").close()
            except FileExistsError:
                pass
            else:
                raise RuntimeError(
                    f"fake failure, once ({spec.workload.name} bs={spec.batch_size})"
                )
        if micros > OOM_ABOVE:
            raise FakeAllocatorError("tried to allocate 1 PiB")
        # FAKE_STEP_SCALE (an agent's environment) stretches every step: two agents of this
        # plugin then differ by a known factor, whatever the CPU (tests/integration).
        seconds = micros / 1e6 * float(os.environ.get("FAKE_STEP_SCALE", "1"))
        # FAKE_BATCH_SCALE=SIZE=FACTOR,...: the steps of those batch sizes take FACTOR times
        # as long ("1=10": batch size 1's, as a framework with a slow kernel path there); the
        # others' steps take the same time whatever the batch size (tests/integration).
        seconds *= _batch_scales(os.environ.get("FAKE_BATCH_SCALE", "")).get(spec.batch_size, 1.0)
        world = self.context.world
        rank = None
        if world is not None:
            # A rank of a world: FAKE_RANK<N>_SCALE stretches rank N's steps (the world is
            # as slow as its slowest rank), FAKE_RANK<N>_FAIL_AT fails its step N.
            seconds *= float(os.environ.get(f"FAKE_RANK{world.rank}_SCALE", "1"))
            # FAKE_DEVICES_SCALE stretches the step of a process of several devices (1xD).
            if world.local_devices > 1:
                seconds *= float(os.environ.get("FAKE_DEVICES_SCALE", "1"))
            # A rank of D devices runs on all of them, unless FAKE_IGNORE_DEVICES says not.
            replicas = 1 if os.environ.get("FAKE_IGNORE_DEVICES") else world.local_devices
            rank = RankReport(
                "fake", lambda: {"communication_not_overlapped": 1000}, replicas=replicas
            )
        fail_at = int(os.environ.get(f"FAKE_RANK{world.rank}_FAIL_AT", "0")) if world else 0
        # FAKE_RANK<N>_EXIT_AT: rank N's process dies at that step (a crash, no reply at all).
        exit_at = int(os.environ.get(f"FAKE_RANK{world.rank}_EXIT_AT", "0")) if world else 0
        once = os.environ.get("FAKE_FAIL_ONCE", "")  # a file: only the first cell fails
        if fail_at and once:
            fail_at = 0 if os.path.exists(once) else fail_at
            open(once, "a").close()
        steps = [0]
        # FAKE_FAULT_MIB: each step maps that many MiB afresh and touches every page, as an
        # allocator that gives memory back and faults it in again: CPU time in the kernel.
        # With FAKE_FAULT_ONCE (a file) only the first process to build a step does.
        fault = int(float(os.environ.get("FAKE_FAULT_MIB", "0")) * 2**20)
        spin = bool(os.environ.get("FAKE_SPIN"))
        marker = os.environ.get("FAKE_FAULT_ONCE", "")
        if fault and marker:
            try:
                with open(marker, "x"):  # this process drew the faulting ticket
                    self.faulting = True
            except FileExistsError:
                fault = 0 if not getattr(self, "faulting", False) else fault

        # FAKE_STUCK=SIZE:STEP: that step of a cell of batch size SIZE blocks forever while the
        # process lives (a measuring thread stuck on a lock, a device that never answers).
        stuck_size, _, stuck_at = os.environ.get("FAKE_STUCK", "0:0").partition(":")
        stuck_at = stuck_at if int(stuck_size) == spec.batch_size else "0"
        # FAKE_MARK=SIZE:STEP:PATH: that step of a cell of batch size SIZE creates the file PATH
        # (a test then knows that cell is being measured, however loaded the host).
        mark_size, _, mark = os.environ.get("FAKE_MARK", "0:0:").partition(":")
        mark_at, _, mark_path = mark.partition(":")
        mark_at = mark_at if int(mark_size) == spec.batch_size else "0"

        self.step_seconds = seconds

        def step() -> object:
            steps[0] += 1
            if steps[0] == int(mark_at):
                open(mark_path, "a").close()
            if steps[0] == fail_at:
                raise RuntimeError(f"rank failed at step {fail_at}")
            if steps[0] == exit_at:
                os._exit(3)
            if steps[0] == int(stuck_at):
                threading.Event().wait()  # forever; heartbeats go on from another thread
            if spin:  # FAKE_SPIN: the step's time on the CPU, in user space, not asleep
                until = time.perf_counter() + seconds
                while time.perf_counter() < until:
                    pass
            else:
                time.sleep(seconds)
            if fault:
                with mmap.mmap(-1, fault) as pages:
                    pages[:: mmap.PAGESIZE] = b"\x01" * (fault // mmap.PAGESIZE)
            return seconds

        # FAKE_SETTINGS=NAME=VALUE,...: more settings on every row, as a GPU plugin reports
        # what its float32 cells ran in (float32_matmul=tf32).
        extra = {"fake": "yes", **_settings(os.environ.get("FAKE_SETTINGS", ""))}
        settings = Settings(spec.dtype, 1, 1, spec.mode, "", "cpu", extra)
        return BuiltStep(step=step, settings=settings, rank=rank)

    def synchronize(self, output: object) -> None:
        self.synchronized += 1


def _generation(spec: WorkloadSpec) -> BuiltStep:
    """A "generation" whose prefill sleeps 20 us per prompt token and whose decode steps sleep
    FAKE_DECODE_MICROS (default 200) x FAKE_STEP_SCALE each. FAKE_DECODE_STEPS_OFF adds that
    many decode steps to the catalogue's, as a plugin that decodes the wrong count."""
    scale = float(os.environ.get("FAKE_STEP_SCALE", "1"))
    prefill_seconds = spec.params["prompt_len"] * 20e-6 * scale
    decode_seconds = float(os.environ.get("FAKE_DECODE_MICROS", "200")) * 1e-6 * scale
    steps = spec.workload.decode_steps(spec.params)
    steps += int(os.environ.get("FAKE_DECODE_STEPS_OFF", "0"))
    generation = GenerationSteps(
        prefill=lambda: time.sleep(prefill_seconds),
        decode=lambda: time.sleep(decode_seconds),
        decode_steps=steps,
    )
    settings = Settings(spec.dtype, 1, 1, spec.mode, "", "cpu", {"kv_cache": "none: it sleeps"})
    return BuiltStep.for_generation(generation, settings)


def _reports(pairs: str) -> dict[str, str]:
    name, _, value = pairs.partition("=")
    return {name: value} if name else {}


def _batch_scales(pairs: str) -> dict[int, float]:
    """ "1=10,4=3" -> {1: 10.0, 4: 3.0}."""
    found = (pair.partition("=") for pair in pairs.split(",") if pair)
    return {int(size): float(factor) for size, _, factor in found}


def _shares(pairs: str) -> dict[str, float]:
    found = {}
    for pair in filter(None, pairs.split(",")):
        name, _, value = pair.partition("=")
        found[name] = float(value)
    return found


def _settings(pairs: str) -> dict[str, str]:
    return dict(pair.partition("=")[::2] for pair in pairs.split(",") if pair)  # type: ignore[misc]


def _fake_model(path: str, format: str) -> tuple[list[TensorInfo], float]:
    """A fake model file: JSON {"inputs": [{"name", "shape" (null: open), "dtype"}], "scale"};
    anything else is not a readable model."""
    try:
        with open(path) as handle:
            text = json.load(handle)
        inputs = [TensorInfo(i["name"], tuple(i["shape"]), i["dtype"]) for i in text["inputs"]]
        return inputs, float(text["scale"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise reject_unreadable(path, format, error) from None


def _model_step(spec: WorkloadSpec) -> BuiltStep:
    """Each step sleeps FAKE_MODEL_MICROS (default 1000) x FAKE_STEP_SCALE; the output is every
    input's elements, flattened and concatenated, times the file's scale, plus
    FAKE_OUTPUT_OFFSET (an agent that computes something else, by an amount the test chose);
    FAKE_DUMP_INPUTS (a folder) keeps the inputs it fed, as fed-BATCH.npz. Its FLOP counter
    counts that multiply and add: 2 FLOPs an input element; FAKE_FLOPS=fail makes it fail,
    FAKE_FLOPS=none leaves the plugin without one."""
    assert spec.model is not None
    if os.environ.get("FAKE_MODEL_REJECT"):  # a reader whose framework cannot load this file
        raise reject_unreadable(spec.model.path, spec.model.format, ValueError("unknown opset 99"))
    _, scale = _fake_model(spec.model.path, spec.model.format)
    arrays = spec.model.arrays(spec.seed)
    dump = os.environ.get("FAKE_DUMP_INPUTS")  # a folder: the inputs it fed, per batch size
    if dump:
        np.savez(os.path.join(dump, f"fed-{spec.batch_size}.npz"), **arrays)
    seconds = float(os.environ.get("FAKE_MODEL_MICROS", "1000")) * 1e-6
    seconds *= float(os.environ.get("FAKE_STEP_SCALE", "1"))
    offset = float(os.environ.get("FAKE_OUTPUT_OFFSET", "0"))

    def outputs() -> dict[str, np.ndarray]:
        flat = np.concatenate([a.reshape(-1).astype(np.float32) for a in arrays.values()])
        return {"y": flat * np.float32(scale) + np.float32(offset)}

    def flops() -> FlopCount:
        if os.environ.get("FAKE_FLOPS") == "fail":
            raise RuntimeError("the fake counter broke")
        return FlopCount(2.0 * sum(a.size for a in arrays.values()), "fake counter 1.0")

    settings = Settings(spec.dtype, 1, 1, spec.mode, "", "cpu", {"fake": "yes"})
    counter = None if os.environ.get("FAKE_FLOPS") == "none" else flops
    return BuiltStep(lambda: time.sleep(seconds), settings, outputs=outputs, flops=counter)
