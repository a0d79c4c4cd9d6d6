"""Maps what a run raises to the gRPC status the protocol promises (see agent.proto)."""

from __future__ import annotations

import grpc

from fwbench.runtime.plugin import UnsupportedWorkload
from fwbench.runtime.timing import RunCancelled
from fwbench.spec.catalogue import CatalogueError, UnknownWorkload

# Frameworks spell "out of memory" differently: torch.OutOfMemoryError, TensorFlow's
# ResourceExhaustedError, XLA's "RESOURCE_EXHAUSTED", the CPU allocators' messages.
_OOM_TYPE_NAMES = ("OutOfMemoryError", "ResourceExhaustedError")
_OOM_MESSAGES = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "resource_exhausted",
    "failed to allocate",
)


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, MemoryError) or type(error).__name__ in _OOM_TYPE_NAMES:
        return True
    text = str(error).lower()
    return any(marker in text for marker in _OOM_MESSAGES)


def status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and a one-line message for an exception raised by a run."""
    message = " ".join(str(error).split())[:2000] or type(error).__name__
    if isinstance(error, UnknownWorkload):
        return grpc.StatusCode.NOT_FOUND, message
    if isinstance(error, CatalogueError):
        return grpc.StatusCode.INVALID_ARGUMENT, message
    if isinstance(error, UnsupportedWorkload):
        return grpc.StatusCode.UNIMPLEMENTED, message
    if isinstance(error, RunCancelled):
        return grpc.StatusCode.CANCELLED, "run cancelled"
    if is_out_of_memory(error):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"out of memory: {message}"
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {message}"
