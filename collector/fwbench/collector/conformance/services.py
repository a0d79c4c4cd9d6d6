"""What an agent serves besides AgentService (agent.proto): the gRPC health service, server
reflection (optional; when served it must list AgentService), and Prometheus /metrics when
Describe declares a port: an exposition that parses, passes `promtool check metrics` (when
promtool is on PATH) and has the series the collector reads (run/telemetry.py)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.suite import (
    Check,
    Failed,
    Skipped,
    Target,
    call_failed,
    status_text,
)
from fwbench.collector.run.telemetry import RSS

SERVICE = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
# The series the collector reads (run/telemetry.py's WATCHED), as agent.proto lists them.
REQUIRED_SERIES = (
    RSS,
    "fwbench_process_cpu_seconds_total",
    "fwbench_process_threads",
    "fwbench_process_resident_memory_peak_bytes",
    "fwbench_host_cpu_seconds_total",
    "fwbench_host_memory_available_bytes",
)
GPU_SERIES = (
    "fwbench_gpu_utilization_ratio",
    "fwbench_gpu_memory_used_bytes",
    "fwbench_gpu_power_watts",
)
_EXPOSITION = "metrics text"


def _health(target: Target) -> str:
    stub = health_pb2_grpc.HealthStub(target.client.channel)
    for service in ("", SERVICE):
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise Failed(
                    f"health Check({service!r}): {status_text(error)}: the agent serves no "
                    "grpc.health.v1 (agent.proto requires it: the collector waits on it for an "
                    "agent it starts to be ready)"
                ) from None
            raise call_failed(f"health Check({service!r})", error) from None
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            raise Failed(f"health Check({service!r}) says {status}, not SERVING")
    return f"SERVING for '' and {SERVICE}"


def _reflection(target: Target) -> str:
    stub = reflection_pb2_grpc.ServerReflectionStub(target.client.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    try:
        replies = list(stub.ServerReflectionInfo(iter([request]), timeout=5))
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:
            raise Skipped("server reflection is not served (optional)") from None
        raise call_failed("reflection", error) from None
    names = [s.name for r in replies for s in r.list_services_response.service]
    if SERVICE not in names:
        raise Failed(f"reflection lists {names}, not {SERVICE}")
    return ", ".join(names)


def metrics_text(target: Target) -> str:
    """The /metrics exposition, fetched once per suite; Skipped when none is declared."""
    cached = target.notes.get(_EXPOSITION)
    if isinstance(cached, str):
        return str(cached)
    port = target.described().metrics_port
    if port == 0:
        raise Skipped("Describe declares no /metrics (metrics_port 0)")
    address = target.metrics_address
    if not address:
        host = target.client.address.rpartition(":")[0]
        address = f"{host}:{port}"
    url = f"http://{address}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = str(reply.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, UnicodeDecodeError) as error:
        raise Failed(f"GET {url}: {error}") from None
    target.notes[_EXPOSITION] = text
    return text


def _metrics_parse(target: Target) -> str:
    text = metrics_text(target)
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as error:  # noqa: BLE001 (the parser's errors are ValueError and more)
        raise Failed(f"the exposition does not parse: {error}") from None
    return f"{len(families)} metric families"


def _promtool(target: Target) -> str:
    text = metrics_text(target)
    promtool = shutil.which("promtool")
    if promtool is None:
        raise Skipped("promtool is not on PATH")
    done = subprocess.run(
        [promtool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        problems = " ".join((done.stdout + done.stderr).split())[:400]
        raise Failed(f"promtool check metrics: {problems}")
    return "promtool check metrics: ok"


def _series(target: Target) -> str:
    text = metrics_text(target)
    names = {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }
    gpu = any(d.kind == agent_pb2.DEVICE_KIND_GPU for d in target.described().devices)
    required = REQUIRED_SERIES + (GPU_SERIES if gpu else ())
    missing = [name for name in required if name not in names]
    if missing:
        raise Failed(f"/metrics lacks {', '.join(missing)}")
    return f"{len(required)} series the collector reads"


def service_checks() -> list[Check]:
    return [
        ("health: SERVING", _health),
        ("reflection lists AgentService", _reflection),
    ]


def metrics_checks() -> list[Check]:
    return [
        ("/metrics parses", _metrics_parse),
        ("/metrics passes promtool", _promtool),
        ("/metrics has the collector's series", _series),
    ]
