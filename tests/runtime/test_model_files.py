"""The runtime's side of the user's model files (protocol 1.7), over a real gRPC server with the
fake plugin reading "onnx" files of JSON: InspectModel's signature and every status it
promises, a Run of a model cell whose result carries the outputs for the inputs every agent
makes alike, and the refusals of a request that cannot be one; and LoadedModels, the cache of
what a plugin loaded from model files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from fake_plugin import FakePlugin

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime.model_files import LoadedModels
from fwbench.runtime.plugin import MODEL_FILES
from fwbench.runtime.registry import PluginInvalid, check_plugin
from fwbench.runtime.server import AgentServer, create_server
from fwbench.spec import model_files
from fwbench.spec.model_files import TensorInfo

MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[agent_pb2_grpc.AgentServiceStub]:
    monkeypatch.setenv("FAKE_MODEL_FORMATS", "onnx")
    monkeypatch.setenv("FAKE_MODEL_MICROS", "100")
    server: AgentServer = create_server(FakePlugin(), name="fake-cpu", variant="cpu")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)
    server.stop(0)


def _file(tmp_path: Path, text: object = MODEL) -> agent_pb2.ModelFile:
    path = tmp_path / "net.onnx"
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return agent_pb2.ModelFile(path=str(path), format="onnx", sha256=model_files.digest(path))


def _inspect(stub: agent_pb2_grpc.AgentServiceStub, model: agent_pb2.ModelFile):
    return stub.InspectModel(agent_pb2.InspectModelRequest(model=model), timeout=10)


def test_describe_names_the_formats_and_inspect_answers_the_signature(reader, tmp_path):
    assert list(reader.Describe(agent_pb2.DescribeRequest()).model_formats) == ["onnx"]
    signature = _inspect(reader, _file(tmp_path))
    assert [(t.name, list(t.shape), t.dtype) for t in signature.inputs] == [
        ("x", [-1, 3], "float32")
    ]
    assert list(signature.phases) == [agent_pb2.PHASE_INFER]
    assert signature.unsupported_reasons["train"] == "a fake model only infers"


@pytest.mark.parametrize(
    ("change", "code", "said"),
    [
        ({"path": "/nonexistent/net.onnx"}, grpc.StatusCode.NOT_FOUND, "no file or folder"),
        ({"sha256": "0" * 64}, grpc.StatusCode.INVALID_ARGUMENT, "another file than the client's"),
        ({"format": "keras"}, grpc.StatusCode.UNIMPLEMENTED, "reads no keras model files"),
    ],
)
def test_inspect_refuses_with_the_status_the_protocol_names(reader, tmp_path, change, code, said):
    model = _file(tmp_path)
    for name, value in change.items():
        setattr(model, name, value)
    with pytest.raises(grpc.RpcError) as refused:
        _inspect(reader, model)
    assert refused.value.code() == code and said in refused.value.details()


def test_a_file_that_is_not_a_model_is_invalid_in_one_line(reader, tmp_path):
    with pytest.raises(grpc.RpcError) as refused:
        _inspect(reader, _file(tmp_path, '{"inputs": [{"na'))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "net.onnx is not a readable onnx model" in refused.value.details()
    assert "\n" not in refused.value.details()


def test_an_agent_that_reads_no_files_refuses_inspect(stub, tmp_path):
    with pytest.raises(grpc.RpcError) as refused:
        _inspect(stub, _file(tmp_path))
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED


def _request(model: agent_pb2.ModelFile, batch: int = 4, **fields) -> agent_pb2.RunRequest:
    model.inputs.append(agent_pb2.TensorSpec(name="x", shape=[batch, 3], dtype="float32"))
    base = {
        "workload": "model:net@12345678",
        "phase": agent_pb2.PHASE_INFER,
        "batch_size": batch,
        "seed": 7,
        "model": model,
        "warmup_iterations": 0,
        "min_iterations": 3,
        "min_seconds": 0.0,
        "max_iterations": 3,
    }
    return agent_pb2.RunRequest(**{**base, **fields})


def _result(stub, request: agent_pb2.RunRequest) -> agent_pb2.RunResult:
    events = list(stub.Run(request, timeout=30))
    return events[-1].result


def test_a_model_cell_returns_the_outputs_of_the_inputs_every_agent_makes(reader, tmp_path):
    result = _result(reader, _request(_file(tmp_path)))
    assert len(result.sample_nanoseconds) == 3
    outputs = model_files.output_arrays(result.outputs)
    made = model_files.make_inputs((TensorInfo("x", (4, 3), "float32"),), 7)["x"]
    np.testing.assert_array_equal(outputs["y"], made.reshape(-1) * np.float32(2.0))
    assert [list(o.shape) for o in result.outputs] == [[12]]
    assert not result.HasField("flops")  # not asked: a timed cell counts nothing


@pytest.mark.parametrize(
    ("counter", "flops", "counted", "not_counted"),
    [
        ("", 2.0 * 12, "fake counter 1.0", ""),
        ("fail", 0.0, "", "the FLOP counter failed: the fake counter broke"),
        ("none", 0.0, "", "this agent has no FLOP counter for the format"),
    ],
)
def test_count_flops_sends_the_frameworks_count_or_why_none(
    reader, tmp_path, monkeypatch, counter, flops, counted, not_counted
):
    """Protocol 1.9: the plugin's counter after the loop, or why there is none; a counter
    that fails costs the count, never the cell's samples."""
    monkeypatch.setenv("FAKE_FLOPS", counter)
    result = _result(reader, _request(_file(tmp_path), count_flops=True))
    assert len(result.sample_nanoseconds) == 3
    assert result.flops == agent_pb2.FlopCount(
        forward_flops=flops, counter=counted, not_counted=not_counted
    )


@pytest.mark.parametrize(
    ("fields", "code", "said"),
    [
        ({"phase": agent_pb2.PHASE_TRAIN}, grpc.StatusCode.UNIMPLEMENTED, "infer only"),
        ({"workload": "Model Net"}, grpc.StatusCode.INVALID_ARGUMENT, "a model file's name"),
        ({"params": {"m": 3}}, grpc.StatusCode.INVALID_ARGUMENT, "no shape parameters"),
        ({"batch_size": 70000}, grpc.StatusCode.INVALID_ARGUMENT, "batch_size=70000"),
        ({"dtype": agent_pb2.DTYPE_FLOAT16}, grpc.StatusCode.UNIMPLEMENTED, "not float16"),
    ],
)
def test_a_model_request_out_of_bounds_is_refused(reader, tmp_path, fields, code, said):
    with pytest.raises(grpc.RpcError) as refused:
        _result(reader, _request(_file(tmp_path), **fields))
    assert refused.value.code() == code and said in refused.value.details()


def _sample(tmp_path: Path, rows: int = 6, dtype: str = "float32") -> tuple[Path, np.ndarray]:
    x = np.arange(rows * 3, dtype=dtype).reshape(rows, 3)
    path = tmp_path / "inputs.npz"
    np.savez(path, input_0=x)
    return path, x


def test_a_model_cell_feeds_the_first_rows_of_the_sample_inputs(reader, tmp_path):
    path, x = _sample(tmp_path)
    model = _file(tmp_path)
    model.inputs_path, model.inputs_sha256 = str(path), model_files.digest(path)
    outputs = model_files.output_arrays(_result(reader, _request(model)).outputs)
    np.testing.assert_array_equal(outputs["y"], x[:4].reshape(-1) * np.float32(2.0))


@pytest.mark.parametrize(
    ("change", "code", "said"),
    [
        ("missing", grpc.StatusCode.NOT_FOUND, "model.inputs_path: no file at"),
        ("digest", grpc.StatusCode.INVALID_ARGUMENT, "model.inputs_path: inputs.npz has digest"),
        ("rows", grpc.StatusCode.INVALID_ARGUMENT, "input_0 is float32[2x3], which cannot give"),
        ("dtype", grpc.StatusCode.INVALID_ARGUMENT, "input_0 is int32[6x3], which cannot give"),
    ],
)
def test_sample_inputs_that_cannot_feed_the_cell_are_refused(reader, tmp_path, change, code, said):
    path, _ = _sample(
        tmp_path,
        rows=2 if change == "rows" else 6,
        dtype="int32" if change == "dtype" else "float32",
    )
    model = _file(tmp_path)
    model.inputs_path, model.inputs_sha256 = str(path), model_files.digest(path)
    if change == "missing":
        model.inputs_path = str(tmp_path / "gone.npz")
    if change == "digest":
        model.inputs_sha256 = "0" * 64
    with pytest.raises(grpc.RpcError) as refused:
        _result(reader, _request(model))
    assert refused.value.code() == code and said in refused.value.details()


def test_an_input_shape_with_a_zero_is_refused(reader, tmp_path):
    model = _file(tmp_path)
    model.inputs.append(agent_pb2.TensorSpec(name="x", shape=[0, 3], dtype="float32"))
    request = _request(model)
    del request.model.inputs[1:]
    with pytest.raises(grpc.RpcError) as refused:
        _result(reader, request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_registry_refuses_a_model_plugin_without_its_formats(monkeypatch):
    monkeypatch.setenv("FAKE_MODEL_FORMATS", "onnx")
    plugin = FakePlugin()
    assert MODEL_FILES in plugin.optional_capabilities
    plugin.model_formats = ("pickle",)
    with pytest.raises(PluginInvalid, match="model_formats must be"):
        check_plugin("fake", plugin)
    plugin.model_formats = ("onnx",)
    del plugin.model_capability
    with pytest.raises(PluginInvalid, match="without model_capability"):
        check_plugin("fake", plugin)


def test_loaded_models_load_a_file_once_per_digest_and_keep_the_last_ones(tmp_path):
    """LoadedModels: a plugin's cache of what it loaded (the keras and tf plugins')."""
    loads: list[str] = []

    def load(path: str) -> str:
        loads.append(path)
        return f"model {len(loads)}"

    cache = LoadedModels(load, size=2)
    one, two, three = (tmp_path / f"{n}.onnx" for n in ("one", "two", "three"))
    for path in (one, two, three):
        path.write_text(path.stem)
    assert cache.get(str(one)) == cache.get(str(one)) == "model 1"
    assert cache.get(str(one), "ab" * 32) == "model 2"  # another digest: loaded again
    cache.get(str(two))
    cache.get(str(three))  # the two most recently used stay: two, three
    assert cache.get(str(two)) == "model 3" and len(loads) == 4
    cache.get(str(one))
    assert len(loads) == 5
    one.write_text("changed, and longer")  # the file's own digest changes with it
    assert cache.get(str(one)) == "model 6"
