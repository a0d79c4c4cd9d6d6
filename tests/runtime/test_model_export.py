"""ExportModel on the agent's side (runtime/model_export.py) with a plugin the test writes: the
request is checked before the exporter runs (the source, the format, the destination), the
export lands at the path only when it succeeded, and a failing exporter leaves nothing, said
in one line. The collector's side, over real gRPC: tests/integration/test_model_export.py."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.errors import status_for
from fwbench.runtime.model_export import export
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import Capability
from fwbench.spec import model_files


class Exporter:
    """Reads "onnx" (any bytes), writes "jax_export" by copying with a marker; `fails` makes
    it raise after writing half a file, `writes_nothing` returns without writing."""

    model_formats = ("onnx",)
    export_formats = ("jax_export",)
    model_capability = Capability(("infer",), ("float32",), ("eager",))

    def __init__(self, fails: bool = False, writes_nothing: bool = False) -> None:
        self.fails, self.writes_nothing = fails, writes_nothing
        self.calls: list[tuple[str, str, str, str]] = []

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        raise AssertionError("not asked")

    def export_model(self, path: str, format: str, target: str, dest: str) -> str:
        self.calls.append((path, format, target, dest))
        if self.writes_nothing:
            return "nothing 0"
        Path(dest).write_text(json.dumps({"from": Path(path).read_text()}))
        if self.fails:
            raise RuntimeError("unsupported operator\nLSTM   (opset 17)")
        return "copier 1.0"


def _request(source: Path, dest: Path | str, fmt: str = "jax_export", sha: str = ""):
    return agent_pb2.ExportModelRequest(
        model=agent_pb2.ModelFile(
            path=str(source), format="onnx", sha256=sha or model_files.digest(source)
        ),
        format=fmt,
        path=str(dest),
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "net.onnx"
    path.write_text("graph")
    return path


def test_the_export_lands_at_the_path_with_its_digest_and_tool(source: Path, tmp_path: Path):
    plugin = Exporter()
    dest = tmp_path / "out" / "net.jax"
    dest.parent.mkdir()
    reply = export(plugin, _request(source, dest), plugin.export_formats)
    assert reply.model.path == str(dest) and reply.model.format == "jax_export"
    assert reply.model.sha256 == model_files.digest(dest) and reply.tool == "copier 1.0"
    written = Path(plugin.calls[0][3])
    assert written != dest and written.parent == dest.parent  # a staging name, then moved
    assert written.name.endswith("net.jax") and list(dest.parent.iterdir()) == [dest]


@pytest.mark.parametrize(
    ("case", "code", "said"),
    [
        ("relative", grpc.StatusCode.INVALID_ARGUMENT, "give an absolute path"),
        ("exists", grpc.StatusCode.INVALID_ARGUMENT, "exists: an export never overwrites"),
        ("no_folder", grpc.StatusCode.INVALID_ARGUMENT, "does not exist"),
        ("not_written", grpc.StatusCode.UNIMPLEMENTED, "writes no savedmodel model files"),
        ("unknown", grpc.StatusCode.UNIMPLEMENTED, "writes no tflite model files"),
        ("same", grpc.StatusCode.UNIMPLEMENTED, "writes no onnx model files"),
        ("digest", grpc.StatusCode.INVALID_ARGUMENT, "another file than the client's"),
        ("missing", grpc.StatusCode.NOT_FOUND, "no file or folder"),
    ],
)
def test_a_bad_request_is_refused_before_the_exporter_runs(
    source: Path, tmp_path: Path, case: str, code: grpc.StatusCode, said: str
):
    plugin = Exporter()
    dest: Path | str = tmp_path / "net.jax"
    fmt, sha = "jax_export", ""
    if case == "relative":
        dest = "net.jax"
    elif case == "exists":
        Path(dest).write_text("keep me")
    elif case == "no_folder":
        dest = tmp_path / "absent" / "net.jax"
    elif case in ("not_written", "unknown", "same"):
        fmt = {"not_written": "savedmodel", "unknown": "tflite", "same": "onnx"}[case]
    elif case == "digest":
        sha = "0" * 64
    request = _request(source, dest, fmt, sha)
    if case == "missing":
        request.model.path = str(tmp_path / "gone.onnx")
    with pytest.raises(Exception) as caught:
        export(plugin, request, plugin.export_formats)
    status, message = status_for(caught.value)
    assert (status, said in message) == (code, True), message
    assert not plugin.calls
    if case == "exists":
        assert Path(dest).read_text() == "keep me"


@pytest.mark.parametrize("writes_nothing", [False, True])
def test_a_failed_export_leaves_nothing_and_says_why_in_one_line(
    source: Path, tmp_path: Path, writes_nothing: bool
):
    plugin = Exporter(fails=not writes_nothing, writes_nothing=writes_nothing)
    dest = tmp_path / "net.jax"
    with pytest.raises(Exception) as caught:
        export(plugin, _request(source, dest), plugin.export_formats)
    status, message = status_for(caught.value)
    assert status == grpc.StatusCode.INTERNAL and "\n" not in message
    expected = "wrote nothing" if writes_nothing else "RuntimeError: unsupported operator LSTM"
    assert expected in message and "net.onnx" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.onnx"]  # no staging file left
