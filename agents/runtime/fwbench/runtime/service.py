"""The AgentService implementation: Describe, Run (streaming) and Cancel.

Runs execute on one long-lived measurement thread, so framework thread settings and device
contexts stay put between runs, and at most one run measures at a time: a second Run while
one is in progress is refused with FAILED_PRECONDITION instead of sharing the machine.
Cancel stops a run its caller names by id, or, with no id, the caller's own run (security.py)."""

from __future__ import annotations

import gc
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import grpc

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime import uploads
from fwbench.runtime.accuracy import DATASET, OPTIMIZER, AccuracyRun, train_to_accuracy
from fwbench.runtime.errors import status_for
from fwbench.runtime.fits import require_fit
from fwbench.runtime.hostinfo import environment_switches, host_info
from fwbench.runtime.metrics import AgentMetrics
from fwbench.runtime.model_export import ExportPlugin, export
from fwbench.runtime.model_files import ModelPlugin, inspect, model_workload_spec
from fwbench.runtime.plugin import (
    ACCURACY,
    MODEL_EXPORT,
    MODEL_FILES,
    BuiltStep,
    Capability,
    FrameworkPlugin,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
)
from fwbench.runtime.profiling import no_profiler, profile_steps, profiler_of
from fwbench.runtime.quiet import idle_grpc_threads
from fwbench.runtime.reference import AccuracyPlugin
from fwbench.runtime.requests import loop_plan, workload_spec
from fwbench.runtime.security import caller
from fwbench.runtime.timing import LoopPlan, Measurement, measure
from fwbench.runtime.world import WHOLE_BATCH_STRATEGIES, World
from fwbench.spec import HEARTBEAT_SECONDS, SPEC_VERSION, Catalogue, model_files, startup
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

_STAGES = {
    "build": agent_pb2.STAGE_BUILD,
    "first_iteration": agent_pb2.STAGE_FIRST_ITERATION,
    "warmup": agent_pb2.STAGE_WARMUP,
    "measure": agent_pb2.STAGE_MEASURE,
    "profile": agent_pb2.STAGE_PROFILE,
}
_DEVICE_KINDS = {"cpu": agent_pb2.DEVICE_KIND_CPU, "gpu": agent_pb2.DEVICE_KIND_GPU}


# HEARTBEAT_SECONDS (fwbench.spec, agent.proto's "Heartbeat interval"): while a run is active
# the agent sends a Progress at least this often; _relay reads it from this module.


@dataclass
class _ActiveRun:
    run_id: str
    cancel: threading.Event
    owner: str  # security.caller() of the Run call


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(
        self,
        plugin: FrameworkPlugin,
        catalogue: Catalogue,
        identity: agent_pb2.AgentIdentity,
        metrics: AgentMetrics,
        world: World | None = None,
    ) -> None:
        self._plugin = plugin
        self._catalogue = catalogue
        self._world = world
        self._description: PluginDescription = plugin.describe()
        self._capabilities = capabilities(plugin, self._description, catalogue, world)
        # Formats of the user's model files the plugin reads (capability "model_files").
        self._model_formats: tuple[str, ...] = (
            tuple(cast(ModelPlugin, plugin).model_formats)
            if MODEL_FILES in plugin.optional_capabilities
            else ()
        )
        # Formats it writes from those (capability "model_export", protocol 1.8).
        self._export_formats: tuple[str, ...] = (
            tuple(cast(ExportPlugin, plugin).export_formats)
            if MODEL_EXPORT in plugin.optional_capabilities
            else ()
        )
        # The profiler a Run's `profile` uses ("" for none: no_profiler says why, protocol 1.10).
        self._profiler = profiler_of(plugin)
        self._no_profiler = "" if self._profiler else no_profiler(self._description)
        # Every device a CPU: the host's memory is the cells' (fits.py checks they fit).
        self._host_memory_only = all(d.kind == "cpu" for d in self._description.devices)
        self._identity = identity
        self._metrics = metrics
        self._host = host_info()
        self._busy = threading.Lock()
        self._active: _ActiveRun | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fwbench-measure")
        self.metrics_port = 0
        # Whether any caller may Cancel the active run without naming it (all are
        # authenticated: a token or mTLS); otherwise only the caller that started it.
        self.trust_every_caller = False

    def Describe(  # noqa: N802 (gRPC method name)
        self, request: agent_pb2.DescribeRequest, context: grpc.ServicerContext
    ) -> agent_pb2.DescribeResponse:
        d = self._description
        return agent_pb2.DescribeResponse(
            spec_version=SPEC_VERSION,
            identity=self._identity,
            libraries=dict(d.libraries),
            environment={**environment_switches(), **d.environment},
            devices=[
                agent_pb2.Device(
                    kind=_DEVICE_KINDS[dev.kind],
                    index=dev.index,
                    name=dev.name,
                    memory_total_bytes=dev.memory_total_bytes,
                )
                for dev in d.devices
            ],
            host=self._host,
            threads=agent_pb2.ThreadSettings(
                intra_op_threads=d.intra_op_threads,
                inter_op_threads=d.inter_op_threads,
                fixed_at_startup=d.threads_fixed_at_startup,
            ),
            workloads=self._workload_support(),
            metrics_port=self.metrics_port,
            pid=os.getpid(),
            world=_world_message(self._world),
            unsupported_reasons=dict(d.unsupported_reasons),
            model_formats=list(self._model_formats),
            export_formats=list(self._export_formats),
            model_files=self._model_support(),
            max_upload_bytes=uploads.max_upload_bytes() if self._model_formats else 0,
            profiler=self._profiler,
            no_profiler=self._no_profiler,
        )

    def _model_support(self) -> agent_pb2.WorkloadSupport | None:
        """How the plugin runs model files (protocol 1.8), from its model_capability."""
        if not self._model_formats:
            return None
        capability: Capability = cast(ModelPlugin, self._plugin).model_capability
        return agent_pb2.WorkloadSupport(
            name="model",
            phases=[PHASE_VALUES[p] for p in capability.phases],
            dtypes=[DTYPE_VALUES[t] for t in capability.dtypes],
            modes=list(capability.modes),
        )

    def InspectModel(  # noqa: N802
        self, request: agent_pb2.InspectModelRequest, context: grpc.ServicerContext
    ) -> agent_pb2.ModelSignature:
        """A model file's signature (protocol 1.7); the file checked as a Run checks it."""
        if not self._busy.acquire(blocking=False):  # loading a model would disturb the run
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "agent is busy with a run; it reads a model file between runs only",
            )
        try:
            if not self._model_formats:
                raise UnsupportedWorkload(
                    "this agent reads no model files (Describe.model_formats)"
                )
            return inspect(cast(ModelPlugin, self._plugin), request)
        except Exception as error:  # noqa: BLE001 (mapped to a status, never swallowed)
            context.abort(*status_for(error))
        finally:
            self._busy.release()

    def ExportModel(  # noqa: N802
        self, request: agent_pb2.ExportModelRequest, context: grpc.ServicerContext
    ) -> agent_pb2.ExportModelResponse:
        """A model file written in another format by the framework's exporter (protocol 1.8)."""
        if not self._busy.acquire(blocking=False):  # exporting would disturb the run
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "agent is busy with a run; it exports a model file between runs only",
            )
        try:
            if not self._export_formats:
                raise UnsupportedWorkload(
                    "this agent writes no model files (Describe.export_formats)"
                )
            return export(cast(ExportPlugin, self._plugin), request, self._export_formats)
        except Exception as error:  # noqa: BLE001 (mapped to a status, never swallowed)
            context.abort(*status_for(error))
        finally:
            self._busy.release()

    def UploadModel(  # noqa: N802
        self, chunks: Iterator[agent_pb2.ModelChunk], context: grpc.ServicerContext
    ) -> agent_pb2.UploadModelResponse:
        """A model file or folder from a client whose files this agent does not see, kept by
        digest (protocol 1.9, runtime/uploads.py)."""
        if not self._model_formats or not uploads.max_upload_bytes():
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "this agent takes no uploads (it reads no model files, or its "
                "FWBENCH_MAX_UPLOAD_BYTES is 0)",
            )
        if not self._busy.acquire(blocking=False):  # writing gigabytes would disturb the run
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "agent is busy with a run; it receives a model file between runs only",
            )
        try:
            return uploads.receive(chunks, uploads.upload_dir(), uploads.max_upload_bytes())
        except uploads.UploadRefused as refused:
            context.abort(refused.code, str(refused))
        except OSError as error:  # the agent's own disk: a full one, a folder it cannot write
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"upload: {error}")
        finally:
            self._busy.release()

    def _workload_support(self) -> list[agent_pb2.WorkloadSupport]:
        supported = []
        for name, capability in self._capabilities.items():
            workload = self._catalogue.get(name)
            supported.append(
                agent_pb2.WorkloadSupport(
                    name=name,
                    phases=[PHASE_VALUES[p] for p in capability.phases],
                    dtypes=[DTYPE_VALUES[t] for t in capability.dtypes],
                    modes=list(capability.modes),
                    max_batch_size=workload.max_batch_size,
                    params=[
                        agent_pb2.ParamLimit(
                            name=p.name,
                            default_value=p.default,
                            min_value=p.min,
                            max_value=p.max,
                            multiple_of=p.multiple_of,
                        )
                        for p in workload.params.values()
                    ],
                    strategies=list(capability.strategies) if self._world else [],
                )
            )
        return supported

    def Run(  # noqa: N802
        self, request: agent_pb2.RunRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.RunResponse]:
        run_id = request.run_id or uuid.uuid4().hex
        try:
            if request.HasField("model"):
                plugin = cast(ModelPlugin, self._plugin)
                spec = model_workload_spec(request, plugin, self._model_formats, self._world)
            else:
                spec = workload_spec(request, self._catalogue, self._capabilities, self._world)
            plan = loop_plan(request, self._catalogue, self._world)
        except Exception as error:  # noqa: BLE001 (mapped to a status, never swallowed)
            self._metrics.runs.labels(status="refused").inc()
            context.abort(*status_for(error))
        if not self._busy.acquire(blocking=False):
            busy_with = self._busy_with(context)
            self._metrics.runs.labels(status="refused").inc()
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"agent is busy with {busy_with}; it measures one workload at a time",
            )
        active = _ActiveRun(run_id, threading.Event(), caller(context))
        self._active = active
        context.add_callback(active.cancel.set)  # client gone or deadline passed: stop work
        events: queue.Queue[object] = queue.Queue()
        if self._world is not None and self._world.size > 1:
            idle_grpc_threads()  # off the rank's CPU while it steps (quiet.py)
        self._executor.submit(self._execute, spec, plan, active, events)
        yield from self._relay(run_id, events, context)

    def _busy_with(self, context: grpc.ServicerContext) -> str:
        """The active run, named only to a caller who may know it: a run id lets its holder
        cancel the run."""
        active = self._active
        if active and (self.trust_every_caller or caller(context) == active.owner):
            return f"run {active.run_id}"
        return "another run" if active is None else "another caller's run"

    def _relay(
        self, run_id: str, events: queue.Queue[object], context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.RunResponse]:
        """Streams the measurement thread's events; while none comes, repeats the last
        progress every HEARTBEAT_SECONDS (protocol 1.2), so that a client can tell a long step
        from a hung agent: a stopped or frozen process sends nothing."""
        started = time.monotonic()
        last = agent_pb2.Progress(run_id=run_id, stage=agent_pb2.STAGE_BUILD)
        while True:
            try:
                event = events.get(timeout=HEARTBEAT_SECONDS)
            except queue.Empty:
                last.elapsed_seconds = time.monotonic() - started
                yield agent_pb2.RunResponse(progress=last)
                continue
            if isinstance(event, agent_pb2.Progress):
                last = event
                event.elapsed_seconds = time.monotonic() - started
                yield agent_pb2.RunResponse(progress=event)
            elif isinstance(event, agent_pb2.RunResult):
                yield agent_pb2.RunResponse(result=event)
                return
            elif isinstance(event, BaseException):
                context.abort(*status_for(event))

    def _execute(
        self,
        spec: WorkloadSpec,
        plan: LoopPlan,
        active: _ActiveRun,
        events: queue.Queue[object],
    ) -> None:
        """Runs on the measurement thread; always releases the agent for the next run, before
        the last event goes out: a client that sends its next Run as soon as it has a result
        must not find the agent still busy with the run that answered it."""
        iterations = self._metrics.iterations.labels(workload=spec.workload.name, phase=spec.phase)
        counted: list[object] = ["", 0]  # stage, iterations already counted in it

        def on_progress(stage: str, done: int) -> None:
            previous = counted[1] if counted[0] == stage else 0
            iterations.inc(done - int(previous))  # type: ignore[call-overload]
            counted[:] = [stage, done]
            events.put(
                agent_pb2.Progress(run_id=active.run_id, stage=_STAGES[stage], iterations_done=done)
            )

        labels = {
            "workload": spec.workload.name,
            "phase": spec.phase,
            "mode": spec.mode,
            "dtype": spec.dtype,
            "batch_size": str(spec.batch_size),
        }
        self._metrics.workload_started(labels)
        outcome: object
        try:
            result = self._measure(spec, plan, active, on_progress)
            # Metrics first: a client that scrapes right after the result must see them.
            self._metrics.workload_finished(labels, result.sample_nanoseconds)
            outcome = result
            self._metrics.runs.labels(status="ok").inc()
        except BaseException as error:  # noqa: BLE001 (reported to the client as a status)
            outcome = error
            self._metrics.workload_finished(labels)
            code, _ = status_for(error)
            self._metrics.runs.labels(status=code.name.lower()).inc()
        finally:
            self._active = None
            self._busy.release()
        events.put(outcome)

    def _measure(
        self,
        spec: WorkloadSpec,
        plan: LoopPlan,
        active: _ActiveRun,
        on_progress: Callable[[str, int], None],
    ) -> agent_pb2.RunResult:
        # The previous cell's model and data, often held only by reference cycles (a
        # tf.function's or a jit's closures), which Python's collector may not reach for many
        # cells: without this a TensorFlow agent kept every GPT-2 of a sweep (0.5 GiB each).
        gc.collect()
        if self._host_memory_only and spec.model is None:  # a GPU refuses what does not fit
            require_fit(spec, self._catalogue)
        if spec.workload.kind != "accuracy":
            build = lambda: _checked(self._plugin.build(spec), spec, self._world)  # noqa: E731
            result = measure(build, self._plugin.synchronize, plan, active.cancel, on_progress)
            message = _result_message(active.run_id, spec, result, self._world)
            if plan.profile_steps and not self._profiler:
                message.profile.not_profiled = self._no_profiler
            elif plan.profile_steps:  # after the samples, the outputs and the FLOPs
                profiled = profile_steps(
                    self._plugin,
                    self._description.framework,
                    result.built.step,
                    plan.profile_steps,
                    plan.trace_dir,
                    active.cancel,
                    on_progress,
                )
                message.profile.CopyFrom(profiled)
            return message
        if ACCURACY not in self._plugin.optional_capabilities:  # capabilities() excludes it
            raise UnsupportedWorkload(f"{spec.workload.name} needs capability {ACCURACY!r}")
        plugin = cast(AccuracyPlugin, self._plugin)  # the registry checked the declaration
        run = train_to_accuracy(plugin, spec, self._plugin.synchronize, active.cancel, on_progress)
        message = _accuracy_message(active.run_id, spec, run)
        if plan.profile_steps:
            message.profile.not_profiled = "an accuracy workload's epochs are not profiled"
        return message

    def Cancel(  # noqa: N802
        self, request: agent_pb2.CancelRequest, context: grpc.ServicerContext
    ) -> agent_pb2.CancelResponse:
        """A named run is cancelled (its id is known to its caller alone); with no run id,
        only the caller's own run, unless every caller is trusted."""
        active = self._active
        if active is None or (request.run_id and request.run_id != active.run_id):
            return agent_pb2.CancelResponse(cancelled=False, run_id=request.run_id)
        if not request.run_id and not self.trust_every_caller and caller(context) != active.owner:
            return agent_pb2.CancelResponse(cancelled=False)
        active.cancel.set()
        return agent_pb2.CancelResponse(cancelled=True, run_id=active.run_id)

    def busy(self) -> bool:
        """Whether a run is active."""
        return self._active is not None

    def shutdown(self) -> None:
        if self._active is not None:
            self._active.cancel.set()
        self._executor.shutdown(wait=False, cancel_futures=True)


def capabilities(
    plugin: FrameworkPlugin,
    description: PluginDescription,
    catalogue: Catalogue,
    world: World | None = None,
) -> dict[str, Capability]:
    """The plugin's own capabilities, plus every accuracy workload whose model it trains, when
    it declares capability "accuracy" (the runtime drives those; same dtypes and modes as the
    model's training step). In a world, only what the plugin distributes (a strategy); alone,
    everything but collectives, which need a world."""
    result = dict(description.capabilities)
    if world is not None:
        return {name: c for name, c in result.items() if c.strategies}
    result = {n: c for n, c in result.items() if catalogue.get(n).kind != "collective"}
    if ACCURACY in plugin.optional_capabilities:
        for name, workload in catalogue.workloads.items():
            model = result.get(workload.model)
            if workload.kind == "accuracy" and model is not None and "train" in model.phases:
                result[name] = Capability(("train",), model.dtypes, model.modes)
    return result


def _settings_message(
    spec: WorkloadSpec, s: Settings, report: Mapping[str, str] | None = None
) -> agent_pb2.EffectiveSettings:
    return agent_pb2.EffectiveSettings(
        dtype=DTYPE_VALUES[s.dtype],
        intra_op_threads=s.intra_op_threads,
        inter_op_threads=s.inter_op_threads,
        mode=s.mode,
        layout=s.layout,
        device=s.device,
        params=dict(spec.params),
        extra={**s.extra, **(report or {})},
    )


def _world_message(world: World | None) -> agent_pb2.WorldInfo | None:
    if world is None:
        return None
    return agent_pb2.WorldInfo(
        world_size=world.size,
        rank=world.rank,
        local_rank=world.local_rank,
        rendezvous=world.rendezvous,
        backend=world.backend,
        local_devices=world.local_devices,
    )


def _rank_message(
    spec: WorkloadSpec, world: World | None, m: Measurement
) -> agent_pb2.RankResult | None:
    report = m.built.rank
    if world is None or report is None:
        return None
    return agent_pb2.RankResult(
        rank=world.rank,
        world_size=world.size,
        strategy=spec.strategy,
        backend=report.backend,
        engine_nanoseconds=dict(report.engine_nanoseconds()),
        collective_bytes=report.collective_bytes,
        first_step_loss=report.first_step_loss(),
    )


def _result_message(
    run_id: str, spec: WorkloadSpec, m: Measurement, world: World | None = None
) -> agent_pb2.RunResult:
    return agent_pb2.RunResult(
        rank=_rank_message(spec, world, m),
        run_id=run_id,
        sample_nanoseconds=m.samples_ns,
        first_iteration_nanoseconds=m.first_iteration_ns,
        build_nanoseconds=m.build_ns,
        warmup_iterations=m.warmup_iterations,
        settings=_settings_message(spec, m.built.settings, m.report),
        measure_started_unix_nanoseconds=m.measure_started_unix_ns,
        measure_ended_unix_nanoseconds=m.measure_ended_unix_ns,
        items_per_sample=_replica_items(spec, world),
        generation=_generation_message(m),
        outputs=_outputs_message(spec, m),
        flops=_flops_message(spec, m),
    )


def _outputs_message(spec: WorkloadSpec, m: Measurement) -> list[agent_pb2.Tensor]:
    """A model file's outputs for the cell's inputs, from one forward pass after the timed loop
    (the collector compares them across agents); nothing for a catalogue workload."""
    if spec.model is None:
        return []
    if m.built.outputs is None:
        raise RuntimeError(
            f"the plugin built {spec.workload.name} without its outputs (BuiltStep.outputs): "
            "a model file's results are compared across agents"
        )
    return model_files.output_messages(m.built.outputs())  # type: ignore[arg-type]


def _flops_message(spec: WorkloadSpec, m: Measurement) -> agent_pb2.FlopCount | None:
    """A model file's forward FLOPs, where the request asked (protocol 1.9): the plugin's
    count, or why there is none. A counter that fails costs the row its FLOPs, not its
    samples: the reason is sent instead."""
    if spec.model is None or not spec.model.count_flops:
        return None
    if m.built.flops is None:
        return agent_pb2.FlopCount(not_counted="this agent has no FLOP counter for the format")
    try:
        count = m.built.flops()
    except Exception as error:  # noqa: BLE001 (the counter's failure, named in the reply)
        text = " ".join(str(error).split())[:200] or type(error).__name__
        return agent_pb2.FlopCount(not_counted=f"the FLOP counter failed: {text}")
    if not count.flops > 0:
        return agent_pb2.FlopCount(
            counter=count.counter, not_counted=count.not_counted or "the counter counted 0"
        )
    return agent_pb2.FlopCount(forward_flops=count.flops, counter=count.counter)


def _generation_message(m: Measurement) -> agent_pb2.GenerationResult | None:
    steps = m.built.generation
    if steps is None:
        return None
    return agent_pb2.GenerationResult(
        prefill_nanoseconds=m.prefill_ns,
        decode_step_nanoseconds=m.decode_ns,
        decode_steps_per_sample=steps.decode_steps,
    )


def _spread_over_devices(spec: WorkloadSpec, world: World | None) -> bool:
    """Whether the step is data parallel in a process of several devices (FWBENCH_LOCAL_DEVICES):
    each device a replica with batch_size items. Not a collective's message, not a
    model-parallel strategy (the world's one batch)."""
    if world is None or world.local_devices <= 1 or spec.workload.kind == "collective":
        return False
    return spec.strategy not in WHOLE_BATCH_STRATEGIES


def _checked(built: BuiltStep, spec: WorkloadSpec, world: World | None) -> BuiltStep:
    """A data-parallel step of a process started with D devices ran on D, or the counts of
    items would be wrong: a plugin that ignored FWBENCH_LOCAL_DEVICES fails the cell. A
    generation workload comes in its parts (GenerationSteps), with the catalogue's number of
    decode steps: the collector's figures per token rest on it."""
    if spec.workload.kind == "generation":
        if built.generation is None:
            raise RuntimeError(
                f"the plugin built {spec.workload.name} as one step: a generation workload "
                "needs its parts (BuiltStep.for_generation) for time to first token and the "
                "time of each token"
            )
        expected = spec.workload.decode_steps(spec.params)
        if built.generation.decode_steps != expected:
            raise RuntimeError(
                f"the plugin decodes {built.generation.decode_steps} steps per generation; "
                f"the catalogue's {spec.workload.name} has {expected} for these parameters"
            )
    if world is not None and _spread_over_devices(spec, world):
        replicas = built.rank.replicas if built.rank is not None else 1
        if replicas != world.local_devices:
            raise RuntimeError(
                f"the {spec.strategy!r} step ran on {replicas} device(s), but this process was "
                f"started with {startup.LOCAL_DEVICES}={world.local_devices}: the plugin does not "
                "spread it over its devices"
            )
    return built


def _replica_items(spec: WorkloadSpec, world: World | None) -> int:
    """D x batch_size for a step spread over D devices; 0 (= batch_size) otherwise."""
    if world is None or not _spread_over_devices(spec, world):
        return 0
    return spec.batch_size * world.local_devices


def _accuracy_message(run_id: str, spec: WorkloadSpec, run: AccuracyRun) -> agent_pb2.RunResult:
    """Epoch 1 is the first iteration; later epochs are the samples."""
    epochs = run.epochs
    return agent_pb2.RunResult(
        run_id=run_id,
        sample_nanoseconds=[e.train_ns for e in epochs[1:]],
        first_iteration_nanoseconds=epochs[0].train_ns if epochs else 0,
        build_nanoseconds=run.build_ns,
        warmup_iterations=0,
        settings=_settings_message(spec, run.settings),
        measure_started_unix_nanoseconds=run.measure_started_unix_ns,
        measure_ended_unix_nanoseconds=run.measure_ended_unix_ns,
        items_per_sample=run.items_per_epoch,
        accuracy=agent_pb2.AccuracyResult(
            target_accuracy=run.target_accuracy,
            reached=bool(run.reached_at),
            time_to_target_nanoseconds=run.time_to_target_ns,
            epochs_to_target=run.reached_at,
            epochs=len(epochs),
            final_accuracy=epochs[-1].validation_accuracy if epochs else 0.0,
            train_examples=run.train_examples,
            validation_examples=run.validation_examples,
            dataset=DATASET,
            learning_rate=OPTIMIZER.learning_rate,
            momentum=OPTIMIZER.momentum,
            history=[
                agent_pb2.EpochRecord(
                    epoch=e.epoch,
                    train_nanoseconds=e.train_ns,
                    eval_nanoseconds=e.eval_ns,
                    validation_accuracy=e.validation_accuracy,
                )
                for e in epochs
            ],
        ),
    )
