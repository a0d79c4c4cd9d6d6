"""Tests for the Paddle plugin's models: parameter counts against the catalogue, canonical
names and shapes against PyTorch's (tests/equivalence/canonical_shapes.json), the canonical
<-> Paddle weight mapping both ways, numerics against numpy references written from the
canonical (PyTorch-layout) weights, the BatchNorm momentum convention, the LSTM's second bias,
and the optimizer. Runs inside the paddle-cpu agent environment (no torch there)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle
import pytest
from stepped_models import built_params

from fwbench.paddle_plugin import models, reference, weights
from fwbench.paddle_plugin.training import TrainStep, momentum, synthetic_batch
from fwbench.runtime.architectures import LSTM_HIDDEN_SIZE
from fwbench.runtime.reference import param_count
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import evaluate_expression

CATALOGUE = load_catalogue()
SHAPES = json.loads(
    (Path(__file__).parents[1] / "equivalence" / "canonical_shapes.json").read_text()
)
ROUND_TRIP = ("lenet", "resnet18", "mobilenet_v2", "efficientnet_b0", "lstm")


def catalogue_parameters(name: str) -> int:
    workload = CATALOGUE.get(name)
    return int(evaluate_expression(workload.parameters, workload.resolve_params({})))


# ------------------------------------------------------------------------ architecture facts


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_trainable_parameter_count_equals_the_catalogues(name):
    assert models.trainable_count(models.build_model(name, 0)) == catalogue_parameters(name)


@pytest.mark.parametrize("name", built_params(models.MODEL_NAMES))
def test_canonical_weights_have_pytorch_names_and_shapes(name):
    exported = reference.canonical_weights(name, 0)
    assert list(exported) == list(SHAPES[name])  # same names, in state_dict order
    assert {k: list(v.shape) for k, v in exported.items()} == SHAPES[name]
    assert all(v.dtype == np.float32 for v in exported.values())
    assert param_count(exported) == catalogue_parameters(name)


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_canonical_round_trip_is_exact(name):
    exported = reference.canonical_weights(name, 3)
    model = models.build_model(name, 4)  # other values everywhere
    weights.load(model, exported)
    again = weights.export(model)
    assert list(again) == list(exported)
    for key, value in exported.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)


def test_layouts_are_translated_where_paddle_differs():
    exported = reference.canonical_weights("lstm", 0)
    model = reference.loaded("lstm", exported)
    # Linear: Paddle (in, out), canonical (out, in).
    np.testing.assert_array_equal(model.fc.weight.numpy(), exported["fc.weight"].T)
    np.testing.assert_array_equal(model.lstm.bias_ih_l0.numpy(), exported["lstm.bias_l0"])
    np.testing.assert_array_equal(model.lstm.bias_hh_l0.numpy(), np.zeros(4 * LSTM_HIDDEN_SIZE))
    resnet = reference.loaded("resnet18", reference.canonical_weights("resnet18", 0))
    bn = dict(resnet.bn1.named_parameters())
    assert set(bn) == {"weight", "bias", "_mean", "_variance"}
    assert resnet.bn1._momentum == pytest.approx(0.9)  # PyTorch's momentum 0.1
    assert resnet.bn1._epsilon == pytest.approx(1e-5)
    effnet = models.build_model("efficientnet_b0")
    assert effnet.features[0][1]._epsilon == pytest.approx(1e-3)


def test_load_rejects_missing_unknown_or_misshaped_weights():
    model = models.build_model("lenet")
    exported = reference.canonical_weights("lenet", 0)
    with pytest.raises(ValueError, match=r"missing weights \['features.0.bias'\]"):
        weights.load(model, {k: v for k, v in exported.items() if k != "features.0.bias"})
    with pytest.raises(ValueError, match=r"unknown weights \['extra'\]"):
        weights.load(model, exported | {"extra": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match=r"classifier\.0\.weight has shape"):
        weights.load(model, exported | {"classifier.0.weight": np.zeros((400, 120), np.float32)})


def test_canonical_weights_are_seeded():
    first = reference.canonical_weights("lenet", 5)
    np.testing.assert_array_equal(
        first["features.0.weight"], reference.canonical_weights("lenet", 5)["features.0.weight"]
    )
    other = reference.canonical_weights("lenet", 6)
    assert not np.array_equal(first["features.0.weight"], other["features.0.weight"])


# ---------------------------------------------------------------- numerics against numpy


def np_conv2d(x: np.ndarray, w: np.ndarray, padding: int = 0) -> np.ndarray:
    """PyTorch's stride-1 conv2d on NCHW input and an OIHW kernel, in numpy."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


def np_lenet(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    def conv_relu_pool(x: np.ndarray, name: str, padding: int) -> np.ndarray:
        y = np_conv2d(x, w[f"{name}.weight"], padding) + w[f"{name}.bias"][None, :, None, None]
        n, c, h, width = np.maximum(y, 0).shape
        return np.maximum(y, 0).reshape(n, c, h // 2, 2, width // 2, 2).max(axis=(3, 5))

    x = conv_relu_pool(conv_relu_pool(x, "features.0", 2), "features.3", 0).reshape(len(x), -1)
    for name in ("classifier.0", "classifier.2"):
        x = np.maximum(x @ w[f"{name}.weight"].T + w[f"{name}.bias"], 0)
    return x @ w["classifier.4.weight"].T + w["classifier.4.bias"]


def np_lstm(w: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    x = w["embedding.weight"][tokens].astype(np.float64)
    h = c = np.zeros((len(tokens), LSTM_HIDDEN_SIZE))
    for t in range(tokens.shape[1]):
        gates = x[:, t] @ w["lstm.weight_ih_l0"].T + h @ w["lstm.weight_hh_l0"].T
        i, f, g, o = np.split(gates + w["lstm.bias_l0"], 4, axis=1)  # PyTorch's gate order
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h @ w["fc.weight"].T + w["fc.bias"]


def _eval_logits(name: str, canonical: dict[str, np.ndarray], inputs: np.ndarray) -> np.ndarray:
    model = reference.loaded(name, canonical).eval()
    with paddle.no_grad():
        return model(paddle.to_tensor(inputs)).numpy()


def test_lenet_matches_numpy_from_canonical_weights():
    canonical = reference.canonical_weights("lenet", 1)
    canonical = {k: v + np.float32(0.01) for k, v in canonical.items()}  # nonzero biases
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    expected = np_lenet(canonical, x)
    np.testing.assert_allclose(_eval_logits("lenet", canonical, x), expected, rtol=1e-5, atol=1e-5)


def test_lstm_matches_numpy_gate_order_and_one_bias():
    rng = np.random.default_rng(1)
    canonical = reference.canonical_weights("lstm", 1)
    canonical["lstm.bias_l0"] = rng.normal(0, 0.5, canonical["lstm.bias_l0"].shape).astype(
        np.float32
    )
    tokens = rng.integers(0, 20_000, (3, 6))
    np.testing.assert_allclose(
        _eval_logits("lstm", canonical, tokens), np_lstm(canonical, tokens), atol=1e-5
    )


def test_batch_norm_running_statistics_follow_pytorchs_momentum():
    model = models.build_model("resnet18", 0)
    x = paddle.to_tensor(np.random.default_rng(2).normal(3.0, 1.0, (2, 3, 32, 32)), "float32")
    conv = model.conv1(x).numpy()
    model.bn1(paddle.to_tensor(conv))
    # running = (1 - 0.1) * running + 0.1 * batch mean (initial running mean 0)
    np.testing.assert_allclose(model.bn1._mean.numpy(), 0.1 * conv.mean(axis=(0, 2, 3)), rtol=1e-4)


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("mode", ["dygraph", "static"])
@pytest.mark.parametrize("name", ["lenet", "resnet18", "lstm"])
def test_one_train_step_lowers_the_loss(name, mode):
    model = models.build_model(name, 0)
    batch = synthetic_batch(name, 4, 32, 6, "float32", 1)
    step = TrainStep(model, mode)
    before = float(step(batch.inputs, batch.labels))
    after = float(step(batch.inputs, batch.labels))  # the loss after the first update
    assert np.isfinite(before) and after < before


def test_static_and_dygraph_steps_compute_the_same_losses():
    losses = {}
    for mode in ("dygraph", "static"):
        step = TrainStep(models.build_model("resnet18", 0), mode)
        batch = synthetic_batch("resnet18", 2, 32, 0, "float32", 1)
        losses[mode] = [float(step(batch.inputs, batch.labels)) for _ in range(3)]
    np.testing.assert_allclose(losses["static"], losses["dygraph"], rtol=1e-4)


def test_the_lstms_second_bias_stays_zero_and_untrained():
    model = models.build_model("lstm", 0)
    trained = {id(p) for p in models.trainable_parameters(model)}
    assert id(model.lstm.bias_hh_l0) not in trained and id(model.lstm.bias_ih_l0) in trained
    step = TrainStep(model, "dygraph")
    batch = synthetic_batch("lstm", 2, 0, 5, "float32", 0)
    for _ in range(2):
        step(batch.inputs, batch.labels)
    np.testing.assert_array_equal(model.lstm.bias_hh_l0.numpy(), np.zeros(4 * LSTM_HIDDEN_SIZE))
    assert np.abs(model.lstm.bias_ih_l0.numpy()).max() > 0


def test_momentum_is_classical_without_weight_decay_or_nesterov():
    layer = paddle.nn.Linear(3, 2)
    start = layer.weight.numpy().copy()
    optimizer = momentum(layer, learning_rate=0.01, mu=0.9)
    grads = [np.full((3, 2), 1.0, np.float32), np.full((3, 2), 2.0, np.float32)]
    for grad in grads:
        layer.weight.grad = paddle.to_tensor(grad)  # set by hand, as backward would
        layer.bias.grad = paddle.zeros([2])
        optimizer.step()
        optimizer.clear_grad()
    velocity = 0.9 * grads[0] + grads[1]  # v1 = g1; v2 = 0.9 v1 + g2
    np.testing.assert_allclose(
        layer.weight.numpy(), start - 0.01 * grads[0] - 0.01 * velocity, rtol=1e-6
    )
