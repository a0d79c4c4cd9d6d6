"""A call the agent must refuse with one status: what the model checks (model_files.py,
model_uploads.py) ask of InspectModel, ExportModel and UploadModel."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from fwbench.collector.conformance.suite import Failed


def refused(call: Callable[[], object], code: grpc.StatusCode, answered: str) -> str:
    """The details of `call`'s refusal with `code`; Failed for another status or an answer."""
    try:
        call()
    except grpc.RpcError as error:
        if error.code() != code:
            raise Failed(
                f"expected {code.name}, got {error.code().name}: {error.details()}"
            ) from None
        return (error.details() or "")[:120]
    raise Failed(f"expected {code.name}, {answered}")
