"""The user's model files (protocol 1.7): what an agent declares in Describe.model_formats
holds. Known format names; InspectModel and a model Run refuse what they must: a format the
agent does not read (UNIMPLEMENTED, also for an agent that reads none, as a 1.6 agent does),
a path it cannot see (NOT_FOUND), a file that is not a model (INVALID_ARGUMENT, where the agent
sees this host's files). Exports (protocol 1.8): Describe.export_formats known names, only
from an agent that reads model files, and ExportModel refusing a format it does not write
(UNIMPLEMENTED) and a missing source (NOT_FOUND). Uploads (protocol 1.9): model_uploads.py.
Nothing here needs a real model: every request is one to refuse."""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.model_uploads import upload_checks
from fwbench.collector.conformance.refusals import refused
from fwbench.collector.conformance.suite import Check, Failed, Skipped, Target, expect_status
from fwbench.spec import model_files

ABSENT = "/nonexistent/fwbench-conformance/model"
# A format no agent reads under this name: UNIMPLEMENTED from any agent.
UNREAD = "no_such_format"


def _formats(target: Target) -> list[str]:
    return list(target.described().model_formats)


def _inspect(target: Target, model: agent_pb2.ModelFile, code: grpc.StatusCode) -> str:
    request = agent_pb2.InspectModelRequest(model=model)
    call = partial(target.client.inspect_model, request, 30.0)
    return refused(call, code, "InspectModel answered a signature")


def _known_formats(target: Target) -> str:
    formats = _formats(target)
    if not formats:
        raise Skipped("the agent reads no model files (Describe.model_formats is empty)")
    unknown = [f for f in formats if f not in model_files.FORMATS]
    if unknown or len(set(formats)) != len(formats):
        raise Failed(f"model_formats {formats}: each once, from {', '.join(model_files.FORMATS)}")
    return ", ".join(formats)


def _unread_format(target: Target) -> str:
    return _inspect(
        target, agent_pb2.ModelFile(path=ABSENT, format=UNREAD), grpc.StatusCode.UNIMPLEMENTED
    )


def _missing_file(target: Target) -> str:
    formats = _formats(target)
    if not formats:
        raise Skipped("the agent reads no model files")
    model = agent_pb2.ModelFile(path=f"{ABSENT}.{formats[0]}", format=formats[0])
    return _inspect(target, model, grpc.StatusCode.NOT_FOUND)


def _not_a_model(target: Target) -> str:
    formats = _formats(target)
    if not formats:
        raise Skipped("the agent reads no model files")
    with tempfile.TemporaryDirectory() as folder:
        if formats[0] == "savedmodel":  # a folder whose saved_model.pb is text
            path = Path(folder) / "not-a-model"
            path.mkdir()
            (path / "saved_model.pb").write_bytes(b"this is not a model\n")
        else:
            suffix = next(s for s, f in model_files.SUFFIXES.items() if f == formats[0])
            path = Path(folder) / f"not-a-model{suffix}"
            path.write_bytes(b"this is not a model\n")
        model = agent_pb2.ModelFile(path=str(path), format=formats[0])
        try:
            return _inspect(target, model, grpc.StatusCode.INVALID_ARGUMENT)
        except Failed as failed:
            if "got NOT_FOUND" in str(failed):
                raise Skipped("the agent does not see this host's files (NOT_FOUND)") from None
            raise


def _run_unread_format(target: Target) -> str:
    version = target.described().spec_version
    if tuple(int(p) for p in version.split(".")[:2]) < (1, 7):
        raise Skipped(f"protocol {version}: RunRequest.model came with 1.7")
    request = agent_pb2.RunRequest(
        run_id="conformance-model",
        workload="model:conformance@00000000",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        model=agent_pb2.ModelFile(
            path=ABSENT,
            format=UNREAD,
            inputs=[agent_pb2.TensorSpec(name="x", shape=[1, 1], dtype="float32")],
        ),
        min_iterations=1,
        max_iterations=1,
        min_seconds=0.0,
    )
    return expect_status(target, request, grpc.StatusCode.UNIMPLEMENTED)


def _known_exports(target: Target) -> str:
    exports = list(target.described().export_formats)
    if not exports:
        raise Skipped("the agent writes no model files (Describe.export_formats is empty)")
    unknown = [f for f in exports if f not in model_files.FORMATS]
    if unknown or len(set(exports)) != len(exports):
        raise Failed(f"export_formats {exports}: each once, from {', '.join(model_files.FORMATS)}")
    if not _formats(target):
        raise Failed(f"export_formats {exports} from an agent that reads no model files")
    return ", ".join(exports)


def _export(target: Target, request: agent_pb2.ExportModelRequest, code: grpc.StatusCode) -> str:
    call = partial(target.client.export_model, request, 30.0)
    return refused(call, code, "ExportModel answered that it wrote the file")


def _export_unwritten(target: Target) -> str:
    version = target.described().spec_version
    if tuple(int(p) for p in version.split(".")[:2]) < (1, 8):
        raise Skipped(f"protocol {version}: ExportModel came with 1.8")
    formats = _formats(target) or ["onnx"]
    request = agent_pb2.ExportModelRequest(
        model=agent_pb2.ModelFile(path=f"{ABSENT}.{formats[0]}", format=formats[0]),
        format=UNREAD,
        path=f"{ABSENT}-export",
    )
    return _export(target, request, grpc.StatusCode.UNIMPLEMENTED)


def _export_missing(target: Target) -> str:
    exports, formats = list(target.described().export_formats), _formats(target)
    if not exports or not formats:
        raise Skipped("the agent writes no model files")
    request = agent_pb2.ExportModelRequest(
        model=agent_pb2.ModelFile(path=f"{ABSENT}.{formats[0]}", format=formats[0]),
        format=exports[0],
        path=f"{ABSENT}-export",
    )
    return _export(target, request, grpc.StatusCode.NOT_FOUND)


def model_checks() -> list[Check]:
    return [
        ("model formats: known names", _known_formats),
        ("InspectModel of an unread format: UNIMPLEMENTED", _unread_format),
        ("InspectModel of a missing file: NOT_FOUND", _missing_file),
        ("InspectModel of a file that is no model: INVALID_ARGUMENT", _not_a_model),
        ("Run of a model in an unread format: UNIMPLEMENTED", _run_unread_format),
        ("export formats: known names, from a reader", _known_exports),
        ("ExportModel to an unwritten format: refused", _export_unwritten),
        ("ExportModel of a missing file: NOT_FOUND", _export_missing),
        *upload_checks(),
    ]
