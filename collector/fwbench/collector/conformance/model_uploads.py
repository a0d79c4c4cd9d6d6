"""Uploads (protocol 1.9, UploadModel): an agent that declares Describe.max_upload_bytes keeps
what it is sent by digest and answers where, answers "held" for what it holds, and refuses an
upload whose digest is not the one said (INVALID_ARGUMENT) or that is over its limit
(RESOURCE_EXHAUSTED); one that declares 0 answers UNIMPLEMENTED. The file sent is the same
few bytes on every run (it need not be a model: an agent keeps, it does not read), so a suite
run leaves one small file in the agent's folder however often it runs."""

from __future__ import annotations

import hashlib
import tempfile
from functools import partial
from pathlib import Path

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.refusals import refused
from fwbench.collector.conformance.suite import Check, Failed, Skipped, Target
from fwbench.spec import uploads

PAYLOAD = b"fwbench conformance: an upload kept by its digest\n" * 40
NAME = "conformance-upload.bin"


def _since_1_9(target: Target) -> agent_pb2.DescribeResponse:
    described = target.described()
    if tuple(int(p) for p in described.spec_version.split(".")[:2]) < (1, 9):
        raise Skipped(f"protocol {described.spec_version}: UploadModel came with 1.9")
    return described


def _send(target: Target, chunks: list[agent_pb2.ModelChunk]) -> agent_pb2.UploadModelResponse:
    return target.client.upload_model(iter(chunks), 30.0)


def _chunks() -> list[agent_pb2.ModelChunk]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / NAME
        path.write_bytes(PAYLOAD)
        return list(uploads.chunks(path))


def _status(target: Target, chunks: list[agent_pb2.ModelChunk], code: grpc.StatusCode) -> str:
    return refused(partial(_send, target, chunks), code, "it kept the upload")


def _kept(target: Target) -> str:
    if not _since_1_9(target).max_upload_bytes:
        raise Skipped("the agent takes no uploads (Describe.max_upload_bytes is 0)")
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    try:
        first, again = _send(target, _chunks()), _send(target, _chunks())
    except grpc.RpcError as error:
        raise Failed(f"UploadModel failed: {error.code().name}: {error.details()}") from None
    for reply in (first, again):
        if reply.model.sha256 != digest or not reply.model.path:
            raise Failed(
                f"answered {reply.model.path or 'no path'} with digest "
                f"{reply.model.sha256[:12] or 'none'}, not {digest[:12]}"
            )
    if not again.held:
        raise Failed("the same file sent twice: the second answer says held = false")
    return f"kept at {first.model.path}, held the second time"


def _wrong_digest(target: Target) -> str:
    if not _since_1_9(target).max_upload_bytes:
        raise Skipped("the agent takes no uploads")
    chunks = _chunks()
    chunks[0].sha256 = hashlib.sha256(b"another file").hexdigest()
    return _status(target, chunks, grpc.StatusCode.INVALID_ARGUMENT)


def _over_limit(target: Target) -> str:
    limit = _since_1_9(target).max_upload_bytes
    if not limit:
        raise Skipped("the agent takes no uploads")
    header = _chunks()[0]
    header.total_bytes = limit + 1  # said, never sent: refused before any byte
    return _status(target, [header], grpc.StatusCode.RESOURCE_EXHAUSTED)


def _none_taken(target: Target) -> str:
    if _since_1_9(target).max_upload_bytes:
        raise Skipped("the agent takes uploads (Describe.max_upload_bytes > 0)")
    return _status(target, _chunks(), grpc.StatusCode.UNIMPLEMENTED)


def upload_checks() -> list[Check]:
    return [
        ("UploadModel: kept by digest, held when sent again", _kept),
        ("UploadModel of another digest: INVALID_ARGUMENT", _wrong_digest),
        ("UploadModel over max_upload_bytes: RESOURCE_EXHAUSTED", _over_limit),
        ("UploadModel to an agent that takes none: UNIMPLEMENTED", _none_taken),
    ]
