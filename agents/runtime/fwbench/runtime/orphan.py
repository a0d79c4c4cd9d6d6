"""An agent whose collector is gone exits on its own (`--orphan-seconds N`): when no gRPC call
of any kind (a Run, a Describe, a health check) has arrived for N seconds and no run is active.
For agents a scheduler started on another host (a Slurm job), where the collector's process is
not this agent's parent: the collector calls each agent's health service every few seconds
while its run lasts, so only a collector that died, or lost its network, stops the calls. A
collector killed mid-run closes its channel, which cancels the run, so the clock starts then."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc


class LastCall(grpc.ServerInterceptor):
    """Notes when the last call of any service arrived (a server interceptor sees them all)."""

    def __init__(self) -> None:
        self.at = time.monotonic()

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        self.at = time.monotonic()
        return continuation(details)


def watch(last: LastCall, busy: Callable[[], bool], seconds: float, stop: threading.Event) -> None:
    """Sets `stop` once `seconds` pass with no call and no active run (a thread's target)."""
    while not stop.wait(min(1.0, seconds / 4)):
        if busy():
            last.at = time.monotonic()
        elif time.monotonic() - last.at > seconds:
            stop.set()
