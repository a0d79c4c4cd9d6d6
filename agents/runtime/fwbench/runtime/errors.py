"""Maps what a run raises to the gRPC status the protocol promises (see agent.proto)."""

from __future__ import annotations

import grpc

from fwbench.runtime.model_export import ExportFailed
from fwbench.runtime.plugin import OutOfMemory, UnsupportedWorkload
from fwbench.runtime.timing import RunCancelled
from fwbench.spec.catalogue import CatalogueError, UnknownWorkload

# Plugins translate their framework's out-of-memory errors into OutOfMemory (plugin.py), so
# no framework's exception names or messages are listed here; MemoryError is Python's own.
_OUT_OF_MEMORY = (OutOfMemory, MemoryError)


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
    if isinstance(error, ExportFailed):
        return grpc.StatusCode.INTERNAL, message
    if isinstance(error, _OUT_OF_MEMORY):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"out of memory: {message}"
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {message}"
