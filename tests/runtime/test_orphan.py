"""An agent whose collector is gone exits on its own (runtime/orphan.py): calls of any service,
health checks included, keep it; silence with no run active ends it."""

from __future__ import annotations

import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fwbench.runtime import orphan
from fwbench.runtime.server import AgentServer


def _watching(agent: AgentServer, seconds: float) -> threading.Event:
    stop = threading.Event()
    threading.Thread(
        target=orphan.watch,
        args=(agent.last_call, agent.servicer.busy, seconds, stop),
        daemon=True,
    ).start()
    return stop


def test_health_checks_keep_an_agent_and_silence_ends_it(agent: AgentServer) -> None:
    stop = _watching(agent, 0.6)
    with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(12):  # 1.2 s of calls every 0.1 s: twice the orphan time
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            time.sleep(0.1)
        assert not stop.is_set()
    assert stop.wait(5.0)  # then silence: it takes itself for orphaned


def test_an_active_run_is_never_orphaned(agent: AgentServer) -> None:
    agent.servicer._active = object()  # type: ignore[assignment]  # a run under way
    try:
        stop = _watching(agent, 0.3)
        assert not stop.wait(1.2)
    finally:
        agent.servicer._active = None
