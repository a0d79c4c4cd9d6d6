"""numpy-gemm: an fwbench agent written the way a third party would write one, from the
protocol alone (agent.proto, stubs generated at image build time) with grpcio and NumPy; it
imports nothing of fwbench. It runs one catalogue workload, gemm (C = A @ B, batched when
batch_size > 1), in the infer phase, in float32 or float64, and serves the standard gRPC
health service. The image's labels (Dockerfile) declare it to the collector.

Threads: NumPy's BLAS sizes its pool once, when NumPy is imported, so the agent reads
FWBENCH_THREADS (set by the collector for each thread count of a sweep) before importing it
and says so in Describe (threads.fixed_at_startup)."""

from __future__ import annotations

import os
import platform
import queue
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent import futures

_THREADS = os.environ.get("FWBENCH_THREADS", "")
if _THREADS.isdigit() and int(_THREADS) > 0:
    for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_variable] = _THREADS

import agent_pb2  # noqa: E402  (generated from agent.proto when the image is built)
import agent_pb2_grpc  # noqa: E402
import grpc  # noqa: E402
import numpy as np  # noqa: E402
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: E402

NAME = "numpy-gemm"  # the name in the image's fwbench.manifest label: they must agree
VARIANT = "example"
VERSION = "1.0"
SPEC_VERSION = "1.10"  # the protocol version this agent speaks (heartbeats included)
HEARTBEAT_SECONDS = 1.0  # the protocol asks for a Progress at least every 2 s during a run
PROGRESS_SECONDS = 0.5  # how often a warm-up or measure loop reports its growing count
# From the catalogue (proto/fwbench/spec/workloads.toml): gemm's limits and the run defaults.
PARAMS = {"m": (2048, 1, 32768), "n": (2048, 1, 32768), "k": (2048, 1, 32768)}
MAX_BATCH_SIZE = 1024
WARMUP, MIN_ITERATIONS, MIN_SECONDS, MAX_ITERATIONS = 5, 10, 1.0, 100000
DTYPES = {
    agent_pb2.DTYPE_UNSPECIFIED: np.float32,
    agent_pb2.DTYPE_FLOAT32: np.float32,
    agent_pb2.DTYPE_FLOAT64: np.float64,
}
SWITCHES = ("NUMPY_GEMM_CHECK", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "FWBENCH_THREADS")
# Describe also reports every variable this one names (what `collector run --agent-env` set).
REPORT_VARIABLES = "FWBENCH_REPORT_VARIABLES"


# Every workload name of the catalogue (proto/fwbench/spec/workloads.toml): a name outside it is
# NOT_FOUND, one in it that this agent does not run (all but gemm) is UNIMPLEMENTED (agent.proto,
# Run's errors).
CATALOGUE_WORKLOADS = frozenset(
    [
        "gemm",
        "conv2d",
        "lenet",
        "resnet18",
        "resnet50",
        "resnet152",
        "vgg16",
        "mobilenet_v2",
        "efficientnet_b0",
        "lstm",
        "attention",
        "bert",
        "gpt",
        "generate",
        "allreduce",
        "train_to_accuracy",
    ]
)
# The catalogue's [run] limits of the loop fields.
LOOP_LIMITS = {"warmup_iterations": (0, 10000), "min_iterations": (1, 1000000)}
LOOP_LIMITS |= {"max_iterations": (1, 10000000)}
MAX_PROFILE_STEPS = 1000  # RunRequest.profile.steps (1.10)
NO_PROFILER = "NumPy has no profiler of its own"
MAX_MIN_SECONDS = 3600.0


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Cancelled(Exception):
    pass


def _threads() -> int:
    value = os.environ.get("OPENBLAS_NUM_THREADS", "")
    return int(value) if value.isdigit() else len(os.sched_getaffinity(0))


def _read(path: str) -> str:
    try:
        with open(path) as stream:
            return stream.read()
    except OSError:
        return ""


def _host() -> agent_pb2.HostInfo:
    cpuinfo = _read("/proc/cpuinfo")
    models = [
        line.split(":", 1)[1].strip()
        for line in cpuinfo.splitlines()
        if ":" in line and line.startswith("model name")
    ]
    cores, physical = set(), ""
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "physical id":
            physical = value
        elif key == "core id":
            cores.add((physical, value))
    meminfo = [line.split() for line in _read("/proc/meminfo").splitlines()]
    memory = next((int(f[1]) * 1024 for f in meminfo if f and f[0] == "MemTotal:"), 0)
    return agent_pb2.HostInfo(
        hostname=socket.gethostname(),
        cpu_model=models[0] if models else platform.processor(),
        logical_cores=os.cpu_count() or 0,
        physical_cores=len(cores) or (os.cpu_count() or 0),
        usable_cores=len(os.sched_getaffinity(0)),
        memory_total_bytes=memory,
        os=platform.platform(),
        cpu_governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").strip(),
        in_container=os.path.exists("/.dockerenv"),
    )


def _reported() -> list[str]:
    named = [name.strip() for name in os.environ.get(REPORT_VARIABLES, "").split(",")]
    return [*SWITCHES, *filter(None, named)]


def _blas() -> str:
    try:
        config = np.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"]["name"])
    except Exception:  # noqa: BLE001 (informational only)
        return "unknown"


def _caller(context: grpc.ServicerContext) -> str:
    metadata = dict(context.invocation_metadata() or ())
    return str(metadata.get("x-fwbench-client") or context.peer())


def _check_loop(request: agent_pb2.RunRequest) -> None:
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    values = {"min_iterations": request.min_iterations, "max_iterations": request.max_iterations}
    if request.HasField("warmup_iterations"):
        values["warmup_iterations"] = request.warmup_iterations
    for name, value in values.items():
        least, most = LOOP_LIMITS[name]
        if value and not least <= value <= most:  # 0 (or unset): the catalogue's default
            raise Refused(invalid, f"{name}={value} is out of range: allowed {least}..{most}")
    if request.HasField("min_seconds") and not 0 <= request.min_seconds <= MAX_MIN_SECONDS:
        raise Refused(
            invalid,
            f"min_seconds={request.min_seconds} is out of range: allowed 0..{MAX_MIN_SECONDS}",
        )
    steps = request.profile.steps  # 1.10: checked, though nothing profiles here
    if steps > MAX_PROFILE_STEPS:
        raise Refused(
            invalid, f"profile.steps={steps} is out of range: allowed 0..{MAX_PROFILE_STEPS}"
        )
    least = request.min_iterations or MIN_ITERATIONS
    if request.max_iterations and request.max_iterations < least:
        raise Refused(
            invalid, f"max_iterations={request.max_iterations} is below min_iterations={least}"
        )


class Gemm:
    """One request, checked; build() makes the inputs, step() multiplies once."""

    def __init__(self, request: agent_pb2.RunRequest) -> None:
        """Checks in the protocol's order: limits (INVALID_ARGUMENT naming the field), then
        what Describe declares (NOT_FOUND for a name outside the catalogue, UNIMPLEMENTED for
        what this agent does not run)."""
        if request.HasField("model"):  # 1.7: a user's model file; Describe names no format
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, f"{NAME} reads no model files")
        if request.workload != "gemm":
            if request.workload not in CATALOGUE_WORKLOADS:
                raise Refused(grpc.StatusCode.NOT_FOUND, f"no workload {request.workload!r}")
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, f"{NAME} runs gemm only")
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        if request.phase not in (agent_pb2.PHASE_TRAIN, agent_pb2.PHASE_INFER):
            raise Refused(invalid, f"phase={request.phase} is out of range: give train or infer")
        if request.dtype not in agent_pb2.DType.values():
            raise Refused(invalid, f"dtype={request.dtype} is not a DType value")
        if not 1 <= request.batch_size <= MAX_BATCH_SIZE:
            raise Refused(
                invalid,
                f"batch_size={request.batch_size} is out of range: allowed 1..{MAX_BATCH_SIZE}",
            )
        unknown = sorted(set(request.params) - set(PARAMS))
        if unknown:
            raise Refused(invalid, f"params.{unknown[0]}: gemm has no such parameter")
        self.params = {}
        for name, (default, least, most) in PARAMS.items():
            value = request.params.get(name, default)
            if not least <= value <= most:
                raise Refused(
                    invalid, f"params.{name}={value} is out of range: allowed {least}..{most}"
                )
            self.params[name] = value
        _check_loop(request)
        if request.threads > 1024:
            raise Refused(invalid, f"threads={request.threads} is out of range: allowed 0..1024")
        if request.phase != agent_pb2.PHASE_INFER:
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, "gemm: only phase infer")
        if request.dtype not in DTYPES:
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, "gemm: only float32 and float64")
        if request.mode not in ("", "eager"):
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, f"gemm: no mode {request.mode!r}")
        if request.strategy:  # an agent alone (no distributed world) runs no strategy
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, "strategy: this agent runs alone")
        if request.threads not in (0, _threads()):  # BLAS threads are set at start-up
            raise Refused(
                grpc.StatusCode.UNIMPLEMENTED,
                f"threads={request.threads}: this agent runs {_threads()} (FWBENCH_THREADS, "
                "fixed at start-up)",
            )
        self.batch = request.batch_size
        self.dtype = DTYPES[request.dtype]
        self.seed = request.seed
        self.a = self.b = self.out = np.empty(0)

    def build(self) -> None:
        m, n, k = (self.params[name] for name in ("m", "n", "k"))
        lead = (self.batch,) if self.batch > 1 else ()
        rng = np.random.default_rng(self.seed)
        self.a = rng.standard_normal((*lead, m, k), dtype=self.dtype)
        self.b = rng.standard_normal((*lead, k, n), dtype=self.dtype)
        self.out = np.empty((*lead, m, n), dtype=self.dtype)
        if os.environ.get("NUMPY_GEMM_CHECK") == "1":  # a switch the image's label sets
            self.step()
            expected = float(np.dot(self.a[..., 0, :].ravel()[:k], self.b[..., :, 0].ravel()[:k]))
            tolerance = 1e-3 * k**0.5  # float32 sums of k products, in another order
            if not np.isclose(float(self.out.ravel()[0]), expected, rtol=1e-3, atol=tolerance):
                raise RuntimeError("gemm check failed: C[0, 0] differs from a dot product")

    def step(self) -> None:
        np.matmul(self.a, self.b, out=self.out)  # synchronous on the CPU: done when it returns


class Agent(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self) -> None:
        self._busy = threading.Lock()
        self._active: tuple[str, str, threading.Event] | None = None  # run id, caller, cancel

    def Describe(self, request, context):  # noqa: N802
        return agent_pb2.DescribeResponse(
            spec_version=SPEC_VERSION,
            identity=agent_pb2.AgentIdentity(
                name=NAME,
                framework="numpy",
                framework_version=np.__version__,
                variant=VARIANT,
                plugin_version=VERSION,
                runtime_version=f"grpcio {grpc.__version__}",
                python_version=platform.python_version(),
            ),
            libraries={"numpy": np.__version__, "blas": _blas()},
            environment={k: os.environ[k] for k in _reported() if k in os.environ},
            devices=[agent_pb2.Device(kind=agent_pb2.DEVICE_KIND_CPU, index=0, name="cpu")],
            host=_host(),
            threads=agent_pb2.ThreadSettings(
                intra_op_threads=_threads(), inter_op_threads=1, fixed_at_startup=True
            ),
            workloads=[
                agent_pb2.WorkloadSupport(
                    name="gemm",
                    phases=[agent_pb2.PHASE_INFER],
                    dtypes=[agent_pb2.DTYPE_FLOAT32, agent_pb2.DTYPE_FLOAT64],
                    modes=["eager"],
                    max_batch_size=MAX_BATCH_SIZE,
                    params=[
                        agent_pb2.ParamLimit(
                            name=name, default_value=d, min_value=lo, max_value=hi, multiple_of=1
                        )
                        for name, (d, lo, hi) in PARAMS.items()
                    ],
                )
            ],
            metrics_port=0,  # no /metrics (the label says so too)
            pid=os.getpid(),
            no_profiler=NO_PROFILER,  # 1.10: profiler left empty, and why
        )

    def Run(self, request, context):  # noqa: N802
        run_id = request.run_id or uuid.uuid4().hex
        try:
            gemm = Gemm(request)
        except Refused as error:
            context.abort(error.code, str(error))
        if not self._busy.acquire(blocking=False):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "busy: one run at a time")
        cancel = threading.Event()
        self._active = (run_id, _caller(context), cancel)
        context.add_callback(cancel.set)  # the client went away or the deadline passed
        events: queue.Queue[object] = queue.Queue()
        threading.Thread(
            target=self._measure, args=(gemm, request, run_id, cancel, events), daemon=True
        ).start()
        started = time.monotonic()
        last = agent_pb2.Progress(run_id=run_id, stage=agent_pb2.STAGE_BUILD)
        while True:
            try:
                event = events.get(timeout=HEARTBEAT_SECONDS)
            except queue.Empty:  # a long step: repeat the last progress (the heartbeat)
                event = last
            if isinstance(event, agent_pb2.Progress):
                last = event
                event.elapsed_seconds = time.monotonic() - started
                yield agent_pb2.RunResponse(progress=event)
            elif isinstance(event, agent_pb2.RunResult):
                yield agent_pb2.RunResponse(result=event)
                return
            elif isinstance(event, Cancelled):
                context.abort(grpc.StatusCode.CANCELLED, "run cancelled")
            elif isinstance(event, MemoryError):
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "out of memory")
            else:
                context.abort(grpc.StatusCode.INTERNAL, f"{type(event).__name__}: {event}")

    def _measure(self, gemm, request, run_id, cancel, events) -> None:
        def progress(stage: int, done: int) -> None:
            events.put(agent_pb2.Progress(run_id=run_id, stage=stage, iterations_done=done))

        def check() -> None:
            if cancel.is_set():
                raise Cancelled()

        clock = time.perf_counter_ns
        try:
            warmup = request.warmup_iterations if request.HasField("warmup_iterations") else WARMUP
            least = request.min_iterations or MIN_ITERATIONS
            seconds = request.min_seconds if request.HasField("min_seconds") else MIN_SECONDS
            most = request.max_iterations or MAX_ITERATIONS
            progress(agent_pb2.STAGE_BUILD, 0)
            start = clock()
            gemm.build()
            build_ns = clock() - start
            check()
            progress(agent_pb2.STAGE_FIRST_ITERATION, 0)
            start = clock()
            gemm.step()
            first_ns = clock() - start
            progress(agent_pb2.STAGE_FIRST_ITERATION, 1)
            progress(agent_pb2.STAGE_WARMUP, 0)
            next_report = clock() + int(PROGRESS_SECONDS * 1e9)
            for done in range(1, warmup + 1):  # the count as it grows (agent.proto: stuck)
                check()
                gemm.step()
                if clock() >= next_report:
                    progress(agent_pb2.STAGE_WARMUP, done)
                    next_report = clock() + int(PROGRESS_SECONDS * 1e9)
            progress(agent_pb2.STAGE_WARMUP, warmup)
            progress(agent_pb2.STAGE_MEASURE, 0)
            samples: list[int] = []
            window_start = time.time_ns()
            loop_start = end = clock()
            next_report = loop_start + int(PROGRESS_SECONDS * 1e9)
            while len(samples) < most and (
                len(samples) < least or end - loop_start < seconds * 1e9
            ):
                check()
                start = clock()
                gemm.step()
                end = clock()
                samples.append(max(1, end - start))
                if end >= next_report:
                    progress(agent_pb2.STAGE_MEASURE, len(samples))
                    next_report = end + int(PROGRESS_SECONDS * 1e9)
            window_end = time.time_ns()
            progress(agent_pb2.STAGE_MEASURE, len(samples))
            outcome: object = agent_pb2.RunResult(
                run_id=run_id,
                sample_nanoseconds=samples,
                first_iteration_nanoseconds=first_ns,
                build_nanoseconds=build_ns,
                warmup_iterations=warmup,
                settings=agent_pb2.EffectiveSettings(
                    dtype=agent_pb2.DTYPE_FLOAT64
                    if gemm.dtype is np.float64
                    else agent_pb2.DTYPE_FLOAT32,
                    intra_op_threads=_threads(),
                    inter_op_threads=1,
                    mode="eager",
                    device="cpu",
                    params=gemm.params,
                ),
                measure_started_unix_nanoseconds=window_start,
                measure_ended_unix_nanoseconds=window_end,
                # 1.10: a profile asked for is answered, with why there is none
                profile=agent_pb2.ProfileResult(not_profiled=NO_PROFILER)
                if request.profile.steps
                else None,
            )
        except BaseException as error:  # noqa: BLE001 (sent to the client as a status)
            outcome = error
        finally:
            self._active = None
            self._busy.release()
        events.put(outcome)

    def Cancel(self, request, context):  # noqa: N802
        active = self._active
        if active is None or (request.run_id and request.run_id != active[0]):
            return agent_pb2.CancelResponse(cancelled=False, run_id=request.run_id)
        if not request.run_id and _caller(context) != active[1]:
            return agent_pb2.CancelResponse(cancelled=False)  # only the caller's own run
        active[2].set()
        return agent_pb2.CancelResponse(cancelled=True, run_id=active[0])


def main() -> None:
    # Loopback unless told: on a host, an agent on 0.0.0.0 takes Runs from anyone who reaches
    # the port. The image sets GRPC_HOST=0.0.0.0: Docker forwards the published port to the
    # container's own interface, never to its loopback.
    host = os.environ.get("GRPC_HOST", "127.0.0.1")
    port = int(os.environ.get("GRPC_PORT", "50051"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(Agent(), server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    server.add_insecure_port(f"{host}:{port}")
    server.start()
    checker.set("", health_pb2.HealthCheckResponse.SERVING)
    checker.set("fwbench.agent.v1.AgentService", health_pb2.HealthCheckResponse.SERVING)
    blas = f"{_threads()} BLAS threads"
    print(f"{NAME} {VERSION} serving on port {port} of {host} ({blas})", flush=True)
    # The container's PID 1 ignores SIGTERM unless it handles it (`docker stop` then kills it
    # after 10 s): stop the server on SIGTERM and SIGINT, NOT_SERVING meanwhile, and exit 0.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    checker.enter_graceful_shutdown()
    server.stop(grace=2).wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
