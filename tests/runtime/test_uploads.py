"""UploadModel (protocol 1.9) over a real gRPC server with the fake plugin reading "onnx" files:
a file and a folder come in chunks of at most 1 MiB and are kept by digest where the agent
says, and a RunRequest naming that path runs; what the agent holds is answered before the rest
is sent; every upload that is not what its first chunk said is refused with the status the
proto names, and leaves nothing behind."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fake_plugin import FakePlugin

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime.server import AgentServer, create_server
from fwbench.spec import model_files, uploads
from fwbench.spec.uploads import CHUNK_BYTES

MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "agent-uploads"
    monkeypatch.setenv("FWBENCH_UPLOAD_DIR", str(folder))
    return folder


@pytest.fixture
def agent(kept: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[agent_pb2_grpc.AgentServiceStub]:
    monkeypatch.setenv("FAKE_MODEL_FORMATS", "onnx")
    monkeypatch.setenv("FAKE_MODEL_MICROS", "100")
    server: AgentServer = create_server(FakePlugin(), name="fake-cpu", variant="cpu")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)
    server.stop(0)


def _model(tmp_path: Path, padding: int = 0) -> Path:
    """A fake model of JSON, made over a MiB long by `padding` spaces where asked."""
    path = tmp_path / "sent" / "net.onnx"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(MODEL) + " " * padding)
    return path


def _upload(stub, chunks) -> agent_pb2.UploadModelResponse:
    return stub.UploadModel(iter(list(chunks)), timeout=30)


def test_a_file_comes_in_chunks_is_kept_by_digest_and_runs(agent, kept, tmp_path):
    path = _model(tmp_path, padding=2 * CHUNK_BYTES + 5)
    sha = model_files.digest(path)
    sent = list(uploads.chunks(path))
    assert [len(c.data) for c in sent[1:]] == [
        CHUNK_BYTES,
        CHUNK_BYTES,
        path.stat().st_size - 2 * CHUNK_BYTES,
    ]
    reply = _upload(agent, sent)
    assert reply.model.path == str(kept / sha / "net.onnx") and reply.model.sha256 == sha
    assert not reply.held and reply.received_bytes == path.stat().st_size
    assert Path(reply.model.path).read_bytes() == path.read_bytes()
    assert [p.name for p in kept.iterdir()] == [sha]  # no staging left
    model = agent_pb2.ModelFile(path=reply.model.path, format="onnx", sha256=sha)
    model.inputs.append(agent_pb2.TensorSpec(name="x", shape=[2, 3], dtype="float32"))
    request = agent_pb2.RunRequest(
        workload="model:net@12345678",
        phase=agent_pb2.PHASE_INFER,
        batch_size=2,
        seed=1,
        model=model,
        min_iterations=2,
        max_iterations=2,
        min_seconds=0.0,
    )
    result = list(agent.Run(request, timeout=30))[-1].result
    assert len(result.sample_nanoseconds) == 2 and result.outputs


def test_what_the_agent_holds_is_answered_before_the_rest_is_sent(agent, tmp_path):
    """The sender holds every data piece back until the reply has come: an agent that waited
    for the rest before answering "held" would leave the call without a reply, and fail it."""
    path = _model(tmp_path, padding=3 * CHUNK_BYTES)
    _upload(agent, uploads.chunks(path))
    replied = threading.Event()
    pulled = []

    def held_back() -> Iterator[agent_pb2.ModelChunk]:
        header, *pieces = uploads.chunks(path)
        pulled.append(header)
        yield header
        replied.wait(timeout=60)
        for piece in pieces:
            pulled.append(piece)
            yield piece

    call = agent.UploadModel.future(held_back(), timeout=30)
    try:
        reply = call.result(timeout=30)
        sent_before_reply = len(pulled)
    finally:
        replied.set()
    assert reply.held and reply.received_bytes == 0
    assert sent_before_reply == 1  # the header alone: none of the file's 4 pieces


def test_a_folder_comes_with_its_files_and_its_digest(agent, kept, tmp_path):
    folder = tmp_path / "net.savedmodel"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph" * 1000)
    (folder / "variables" / "variables.index").write_bytes(b"")
    reply = _upload(agent, uploads.chunks(folder))
    kept_folder = Path(reply.model.path)
    assert kept_folder == kept / model_files.digest(folder) / "net.savedmodel"
    assert model_files.digest(kept_folder) == model_files.digest(folder)
    assert (kept_folder / "variables" / "variables.index").read_bytes() == b""


def _header(path: Path, **change) -> agent_pb2.ModelChunk:
    header = next(uploads.chunks(path))
    for name, value in change.items():
        setattr(header, name, value)
    return header


def _pieces(path: Path) -> list[agent_pb2.ModelChunk]:
    return list(uploads.chunks(path))[1:]


@pytest.mark.parametrize(
    ("case", "code", "said"),
    [
        ("digest", grpc.StatusCode.INVALID_ARGUMENT, "has digest"),
        ("no digest", grpc.StatusCode.INVALID_ARGUMENT, "names no sha256"),
        ("name", grpc.StatusCode.INVALID_ARGUMENT, "is not a file's or a folder's name"),
        ("traversal", grpc.StatusCode.INVALID_ARGUMENT, "leaves the folder"),
        ("order", grpc.StatusCode.INVALID_ARGUMENT, "a piece at 7, not 5"),
        ("late start", grpc.StatusCode.INVALID_ARGUMENT, "its pieces are not in order"),
        ("more", grpc.StatusCode.INVALID_ARGUMENT, "more than the"),
        ("fewer", grpc.StatusCode.INVALID_ARGUMENT, "bytes came of the"),
        ("big chunk", grpc.StatusCode.INVALID_ARGUMENT, f"over {CHUNK_BYTES}"),
        ("limit", grpc.StatusCode.RESOURCE_EXHAUSTED, "takes at most 10 (FWBENCH_MAX_UPLOAD"),
    ],
)
def test_an_upload_that_is_not_what_it_said_is_refused_and_leaves_nothing(
    agent, kept, tmp_path, monkeypatch, case, code, said
):
    path = _model(tmp_path)
    size = path.stat().st_size
    data = path.read_bytes()
    sent: list[agent_pb2.ModelChunk] = {
        "digest": [_header(path, sha256=hashlib.sha256(b"other").hexdigest()), *_pieces(path)],
        "no digest": [_header(path, sha256=""), *_pieces(path)],
        "name": [_header(path, name="../net.onnx"), *_pieces(path)],
        "traversal": [
            _header(path, folder=True),
            agent_pb2.ModelChunk(path="../../escape", offset=0, data=data),
        ],
        "order": [
            _header(path),
            agent_pb2.ModelChunk(offset=0, data=data[:5]),
            agent_pb2.ModelChunk(offset=7, data=data[5:]),
        ],
        "late start": [_header(path), agent_pb2.ModelChunk(offset=5, data=data)],
        "more": [_header(path), *_pieces(path), agent_pb2.ModelChunk(offset=size, data=b"x")],
        "fewer": [_header(path, total_bytes=size + 1), *_pieces(path)],
        "big chunk": [
            _header(path, total_bytes=CHUNK_BYTES + 1),
            agent_pb2.ModelChunk(data=b"x" * (CHUNK_BYTES + 1)),
        ],
        "limit": [_header(path, total_bytes=11), *_pieces(path)],
    }[case]
    if case == "limit":
        monkeypatch.setenv("FWBENCH_MAX_UPLOAD_BYTES", "10")
    with pytest.raises(grpc.RpcError) as refused:
        _upload(agent, sent)
    assert refused.value.code() == code, refused.value.details()
    assert said in refused.value.details()
    assert not kept.exists() or not any(kept.iterdir())
    assert not (tmp_path / "escape").exists()


def test_an_operator_turns_uploads_off_with_a_limit_of_zero(agent, tmp_path, monkeypatch):
    monkeypatch.setenv("FWBENCH_MAX_UPLOAD_BYTES", "0")
    assert agent.Describe(agent_pb2.DescribeRequest(), timeout=10).max_upload_bytes == 0
    with pytest.raises(grpc.RpcError) as refused:
        _upload(agent, uploads.chunks(_model(tmp_path)))
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "FWBENCH_MAX_UPLOAD_BYTES is 0" in refused.value.details()


def test_an_agent_that_reads_no_model_files_takes_no_upload(kept, tmp_path):
    server = create_server(FakePlugin(), name="fake-cpu", variant="cpu")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            assert stub.Describe(agent_pb2.DescribeRequest(), timeout=10).max_upload_bytes == 0
            with pytest.raises(grpc.RpcError) as refused:
                _upload(stub, uploads.chunks(_model(tmp_path)))
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(0)
