"""The onnxruntime plugin's graphs (models.py, graphs.py), in the onnxruntime-cpu environment:
every model's graph passes onnx.checker and holds exactly the catalogue's parameters under
PyTorch's names; canonical weights are checked key by key and shape by shape; the LSTM's gate
reordering computes PyTorch's LSTM; `fwbench-onnx-export` writes a graph ORT can run.

Cross-framework numerics (logits against torch's at 224 pixels) are the equivalence tests'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from stepped_models import built_params

from fwbench.onnxruntime_plugin import models
from fwbench.onnxruntime_plugin.graphs import OPSET, PLUGIN_VERSION, PRODUCER, WeightsError
from fwbench.runtime import architectures as arch
from fwbench.runtime.reference import param_count
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
HERE = Path(__file__).parent
SHAPES = json.loads((HERE.parent / "equivalence" / "canonical_shapes.json").read_text())


def _params(model: str, image_size: int = 32) -> dict[str, int]:
    given = {"image_size": image_size} if model not in ("lenet", "lstm") else {}
    if model == "lstm":
        given = {"seq_len": 5}
    return CATALOGUE.get(model).resolve_params(given)


def _run(graph: models.Graph, feed: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(graph.serialized, providers=["CPUExecutionProvider"])
    return session.run([graph.output], feed)[0]


def _batch(model: str, batch: int, params: dict[str, int]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if model == "lstm":
        return rng.integers(0, arch.LSTM_VOCAB_SIZE, (batch, params["seq_len"]))
    return rng.standard_normal((batch, *models.model_input_shape(model, params)), np.float32)


@pytest.mark.parametrize("model", built_params(models.MODELS))
def test_each_model_graph_passes_the_checker_and_runs_any_batch(model):
    params = _params(model)
    graph = models.build_model(model, params, seed=3)
    onnx.checker.check_model(graph.serialized, full_check=True)
    for batch in (1, 3):  # the batch axis is symbolic
        logits = _run(graph, {models.INPUT: _batch(model, batch, params)})
        assert logits.shape == (batch, arch.NUM_CLASSES[model]) and np.isfinite(logits).all()


@pytest.mark.parametrize("model", models.MODELS)
def test_canonical_weights_are_pytorchs_names_shapes_and_the_catalogues_count(model):
    weights = models.canonical_weights(model, 0)
    assert {k: list(v.shape) for k, v in weights.items()} == SHAPES[model]
    assert param_count(weights) == int(CATALOGUE.get(model).parameters)
    assert all(v.dtype == np.float32 for v in weights.values())


def test_canonical_weights_follow_pytorchs_default_initialisers():
    weights = models.canonical_weights("resnet18", 0)
    bound = 1 / np.sqrt(3 * 7 * 7)  # kaiming-uniform(a=sqrt(5)) of conv1, fan_in 147
    assert np.abs(weights["conv1.weight"]).max() <= bound
    assert np.abs(weights["conv1.weight"]).max() > 0.9 * bound
    assert (weights["bn1.running_var"] == 1).all() and (weights["bn1.running_mean"] == 0).all()
    assert not np.array_equal(
        weights["fc.weight"], models.canonical_weights("resnet18", 1)["fc.weight"]
    )


def test_graphs_record_producer_opset_and_model():
    proto = onnx.load_from_string(models.build_model("lenet", {}).serialized)
    assert (proto.producer_name, proto.producer_version) == (PRODUCER, PLUGIN_VERSION)
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", OPSET)]
    assert {p.key: p.value for p in proto.metadata_props}["model"] == "lenet"
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize("op", models.OPS)
def test_operator_graphs_check_and_run(op):
    params = CATALOGUE.get(op).resolve_params(
        {"m": 8, "n": 5, "k": 3} if op == "gemm" else {"height": 9, "width": 7, "kernel": 4}
    )
    graph = models.build_op(op, params, 2)
    onnx.checker.check_model(graph.serialized, full_check=True)
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal(shape, np.float32) for n, (shape, _) in graph.inputs.items()}
    out = _run(graph, feed)
    assert out.shape == graph.output_shape
    if op == "gemm":
        np.testing.assert_allclose(out, feed["a"] @ feed["b"], rtol=1e-5, atol=1e-5)


def test_a_missing_weight_is_refused_by_name():
    weights = models.canonical_weights("lenet", 0)
    del weights["classifier.2.bias"]
    with pytest.raises(WeightsError, match=r"classifier\.2\.bias.*missing"):
        models.build_model("lenet", {}, weights)


def test_a_misshapen_weight_is_refused_by_name():
    weights = models.canonical_weights("lenet", 0)
    weights["features.3.weight"] = weights["features.3.weight"][:, :, :4, :4]
    with pytest.raises(WeightsError, match=r"features\.3\.weight.*\(16, 6, 4, 4\)"):
        models.build_model("lenet", {}, weights)


def test_an_unused_weight_is_refused_by_name():
    weights = models.canonical_weights("lenet", 0) | {
        "classifier.9.weight": np.zeros(3, np.float32)
    }
    with pytest.raises(WeightsError, match=r"classifier\.9\.weight"):
        models.build_model("lenet", {}, weights)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def test_the_lstm_computes_the_canonical_gate_order():
    """The canonical LSTM (gates input, forget, cell, output; one bias) in numpy, against the
    graph that reorders them into ONNX's (input, output, forget, cell)."""
    rng = np.random.default_rng(1)
    weights = {
        k: rng.normal(0, 0.3, v.shape).astype(np.float32)
        for k, v in models.canonical_weights("lstm", 0).items()
    }
    tokens = rng.integers(0, arch.LSTM_VOCAB_SIZE, (2, 6))
    graph = models.build_model("lstm", {"seq_len": 6}, weights)
    hidden = arch.LSTM_HIDDEN_SIZE
    h = c = np.zeros((2, hidden), np.float64)
    for x in weights["embedding.weight"][tokens].transpose(1, 0, 2):
        z = x @ weights["lstm.weight_ih_l0"].T + h @ weights["lstm.weight_hh_l0"].T
        i, f, g, o = np.split(z + weights["lstm.bias_l0"], 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    expected = h @ weights["fc.weight"].T + weights["fc.bias"]
    logits = _run(graph, {models.INPUT: tokens})
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_vggs_adaptive_pool_averages_pytorchs_windows():
    matrix = models.adaptive_pool_matrix(3, 7)  # 3 -> 7: overlapping windows of 1 or 2
    assert np.allclose(matrix.sum(axis=1), 1)
    assert matrix[2].tolist() == [0.5, 0.5, 0.0]  # PyTorch's window [0, 2) for row 2
    assert np.array_equal(models.adaptive_pool_matrix(7, 7), np.eye(7, dtype=np.float32))


def _export_script() -> str:
    return str(Path(sys.executable).parent / "fwbench-onnx-export")


def test_the_export_script_writes_a_graph_ort_loads(tmp_path):
    out = tmp_path / "resnet18.onnx"
    done = subprocess.run(
        [_export_script(), "resnet18", "--out", str(out), "--params", "image_size=64"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto)
    assert proto.producer_name == PRODUCER
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"input": np.zeros((2, 3, 64, 64), np.float32)})[0]
    assert logits.shape == (2, 1000)


def test_the_export_script_takes_canonical_weights_and_names_a_bad_one(tmp_path):
    weights = models.canonical_weights("lenet", 5)
    np.savez(tmp_path / "w.npz", **weights)
    out = tmp_path / "lenet.onnx"
    done = subprocess.run(
        [_export_script(), "lenet", "--out", str(out), "--weights", str(tmp_path / "w.npz")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    assert np.array_equal(stored["classifier.0.weight"], weights["classifier.0.weight"])
    del weights["features.0.bias"]
    np.savez(tmp_path / "bad.npz", **weights)
    done = subprocess.run(
        [_export_script(), "lenet", "--out", str(out), "--weights", str(tmp_path / "bad.npz")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "features.0.bias" in done.stderr
