from __future__ import annotations

import grpc
import pytest

from fwbench.runtime.errors import status_for
from fwbench.runtime.plugin import OutOfMemory, UnsupportedWorkload, translate_out_of_memory
from fwbench.runtime.timing import RunCancelled
from fwbench.spec.catalogue import CatalogueError, UnknownWorkload


class OutOfMemoryError(RuntimeError):
    """Named like torch's: the runtime no longer recognises frameworks' errors by name."""


class ResourceExhaustedError(Exception):
    pass


def _translated(error: Exception) -> OutOfMemory:
    def fail() -> None:
        raise error

    with pytest.raises(OutOfMemory) as caught:
        translate_out_of_memory(lambda e: isinstance(e, OutOfMemoryError), fail)()
    return caught.value


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
        (OutOfMemory("CUDA out of memory"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        # A framework's own error is the plugin's to translate; untranslated, it is INTERNAL.
        (OutOfMemoryError("CUDA out of memory"), grpc.StatusCode.INTERNAL),
        (ResourceExhaustedError("OOM when allocating"), grpc.StatusCode.INTERNAL),
        (ValueError("shapes do not match"), grpc.StatusCode.INTERNAL),
    ],
)
def test_status_for_maps_errors_to_protocol_codes(error, code):
    assert status_for(error)[0] == code


def test_status_for_internal_message_names_the_exception_type():
    _code, message = status_for(ValueError("shapes\ndo not   match"))
    assert message == "ValueError: shapes do not match"


def test_translate_out_of_memory_chains_the_frameworks_error_and_keeps_its_message():
    original = OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
    translated = _translated(original)
    assert translated.__cause__ is original
    code, message = status_for(translated)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert message == "out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"


def test_translate_out_of_memory_passes_other_errors_and_results_through():
    def fail() -> None:
        raise ValueError("shapes")

    with pytest.raises(ValueError, match="shapes"):
        translate_out_of_memory(lambda e: False, fail)()
    assert translate_out_of_memory(lambda e: True, lambda x: x + 1)(1) == 2
