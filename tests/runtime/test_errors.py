from __future__ import annotations

import grpc
import pytest

from fwbench.runtime.errors import status_for
from fwbench.runtime.plugin import UnsupportedWorkload
from fwbench.runtime.timing import RunCancelled
from fwbench.spec.catalogue import CatalogueError, UnknownWorkload


class OutOfMemoryError(RuntimeError):
    pass


class ResourceExhaustedError(Exception):
    pass


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UnknownWorkload("unknown workload 'x'"), grpc.StatusCode.NOT_FOUND),
        (
            CatalogueError("batch_size=0 is out of range", "batch_size"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (UnsupportedWorkload("no"), grpc.StatusCode.UNIMPLEMENTED),
        (RunCancelled(), grpc.StatusCode.CANCELLED),
        (MemoryError(), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (OutOfMemoryError("CUDA out of memory"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ResourceExhaustedError("OOM when allocating"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        (ValueError("shapes do not match"), grpc.StatusCode.INTERNAL),
    ],
)
def test_status_for_maps_errors_to_protocol_codes(error, code):
    assert status_for(error)[0] == code


def test_status_for_internal_message_names_the_exception_type():
    _code, message = status_for(ValueError("shapes\ndo not   match"))
    assert message == "ValueError: shapes do not match"
