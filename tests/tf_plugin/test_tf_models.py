"""The TensorFlow models are the PyTorch models: canonical names and shapes, parameter counts,
FLOPs, layouts (checked against NCHW numpy references fed canonical weights), BatchNorm and
pooling semantics. Runs inside the tf-mkl / tf-eigen agent environment."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from stepped_models import built_params

from fwbench.runtime.reference import param_count
from fwbench.spec import load_catalogue
from fwbench.tf_plugin import layers, models
from fwbench.tf_plugin.training import compile_fn

CATALOGUE = load_catalogue()
SHAPES = json.loads(
    (Path(__file__).parents[1] / "equivalence" / "canonical_shapes.json").read_text()
)
# torchvision's counts; lstm has one bias vector (Keras / Flax / the PyTorch plugin).
EXPECTED_PARAMS = {
    "lenet": 61_706,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "lstm": 2_691_842,
}
IMAGE_MODELS = [n for n in models.MODEL_NAMES if n not in ("lenet", "lstm")]


@functools.cache
def _model(name: str) -> models.Model:
    # Built once: vgg16 alone holds 138M parameters. Tests that load weights use small models.
    return models.build_model(name, seed=0)


@functools.cache
def _canonical(name: str) -> dict[str, np.ndarray]:
    return _model(name).store.export()


def _random_canonical(name: str, seed: int) -> dict[str, np.ndarray]:
    """Canonical weights of `name` with random values (BatchNorm variances positive)."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, shape in SHAPES[name].items():
        value = rng.standard_normal(shape).astype(np.float32) * 0.2
        out[key] = np.abs(value) + 0.5 if key.endswith("running_var") else value
    return out


# ----------------------------------------------------------------------- names, shapes, counts


@pytest.mark.parametrize("name", built_params(models.MODEL_NAMES))
def test_canonical_weights_have_torch_names_and_shapes(name):
    exported = _canonical(name)
    assert {k: list(v.shape) for k, v in exported.items()} == SHAPES[name]
    assert all(v.dtype == np.float32 for v in exported.values())


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_trainable_parameter_count_equals_torchs(name):
    assert _model(name).store.param_count() == EXPECTED_PARAMS[name]
    assert param_count(_canonical(name)) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_output_shape_is_batch_by_classes_in_both_modes(name):
    batch = models.example_batch(name, 2, image_size=64, seq_len=8)
    classes = models.NUM_CLASSES[name]
    for training in (False, True):
        out = _model(name)(batch.inputs, training=training)
        assert out.shape == (2, classes)
        assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("name", ["lenet", "resnet18", "mobilenet_v2", "efficientnet_b0", "lstm"])
def test_canonical_round_trip_is_the_identity(name):
    model = models.build_model(name, seed=1)
    weights = _random_canonical(name, seed=7)
    model.store.load(weights)
    exported = model.store.export()
    assert exported.keys() == weights.keys()
    for key, value in weights.items():
        np.testing.assert_array_equal(exported[key], value, err_msg=key)


def test_canonical_weights_are_reproducible_from_the_seed():
    first, again = models.build_model("lenet", seed=3), models.build_model("lenet", seed=3)
    other = models.build_model("lenet", seed=4)
    a, b, c = first.store.export(), again.store.export(), other.store.export()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["features.0.weight"], c["features.0.weight"])


def test_load_rejects_missing_unknown_and_misshapen_weights():
    store = models.build_model("lenet").store
    weights = _random_canonical("lenet", 0)
    with pytest.raises(ValueError, match="missing"):
        store.load({k: v for k, v in weights.items() if k != "features.0.bias"})
    with pytest.raises(ValueError, match="unknown"):
        store.load({**weights, "extra.weight": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="does not fit"):
        store.load({**weights, "features.0.bias": np.zeros(7, np.float32)})


def test_unknown_model_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid names") as info:
        models.build_model("nope")
    assert all(name in str(info.value) for name in models.MODEL_NAMES)


# ------------------------------------------------------------------------------------- FLOPs


def _graph_flops(model: models.Model, shape: tuple[int, ...]) -> int:
    """2 x the multiply-accumulates of every Conv2D, depthwise conv and MatMul in the traced
    inference graph (the catalogue's convention; pooling, BN, activations count 0)."""
    fn = tf.function(lambda x: model(x, training=False), autograph=False)
    graph = fn.get_concrete_function(tf.TensorSpec(shape, tf.float32)).graph
    total = 0
    for op in graph.get_operations():
        if op.type in ("Conv2D", "DepthwiseConv2dNative"):
            out = op.outputs[0].shape
            kh, kw, cin, _ = op.inputs[1].shape
            per_output = kh * kw * (cin if op.type == "Conv2D" else 1)
            total += 2 * out[1] * out[2] * out[3] * per_output
        elif op.type == "MatMul":
            assert not op.get_attr("transpose_a") and not op.get_attr("transpose_b")
            (m, k), (_, n) = op.inputs[0].shape, op.inputs[1].shape
            total += 2 * m * k * n
    return total


@pytest.mark.parametrize("name", IMAGE_MODELS)
@pytest.mark.parametrize("image_size", [64, 224])
def test_forward_flops_equal_the_catalogue_formula(name, image_size):
    counted = _graph_flops(_model(name), (1, image_size, image_size, 3))
    expected = CATALOGUE.get(name).forward_flops_per_item({"image_size": image_size})
    assert counted == pytest.approx(expected, rel=1e-12)


def test_lenet_forward_flops_equal_the_catalogue_formula():
    assert _graph_flops(_model("lenet"), (1, 28, 28, 1)) == 833_040


# ------------------------------------------------------------ layouts against numpy (NCHW)


def _conv_nchw(x, w, b=None, stride=1, pad=0, depthwise=False):
    """PyTorch's conv2d in numpy: x (N, C, H, W), w (O, C/groups, k, k), symmetric zero pad."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]  # (N, C, Ho, Wo, k, k)
    if depthwise:
        y = np.einsum("nchwij,cij->nchw", windows, w[:, 0])
    else:
        y = np.einsum("nchwij,ocij->nohw", windows, w)
    return y if b is None else y + b[None, :, None, None]


def _to_nhwc(x: np.ndarray) -> tf.Tensor:
    return tf.constant(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))


@pytest.mark.parametrize(
    ("kernel", "stride", "pad", "depthwise", "size"),
    [
        (7, 2, 3, False, 12),  # resnet stem
        (3, 2, 1, False, 11),  # odd input, stride 2: TensorFlow 'SAME' would pad differently
        (3, 1, 1, False, 9),
        (1, 2, 0, False, 10),  # resnet downsample
        (3, 2, 1, True, 10),  # mobilenet depthwise
        (5, 2, 2, True, 11),  # efficientnet depthwise
        (5, 1, 2, True, 8),
    ],
)
def test_conv2d_layer_equals_torch_conv_with_canonical_weights(
    kernel, stride, pad, depthwise, size
):
    channels = 4
    store = layers.ParamStore(tf.float32, seed=0)
    out_ch = channels if depthwise else 6
    conv = layers.Conv2D(
        store, "c", channels, out_ch, kernel, stride, pad, depthwise=depthwise, bias=True
    )
    rng = np.random.default_rng(0)
    weights = {
        k: rng.standard_normal(v.shape).astype(np.float32) for k, v in store.export().items()
    }
    store.load(weights)
    x = rng.standard_normal((2, channels, size, size)).astype(np.float32)
    expected = _conv_nchw(x, weights["c.weight"], weights["c.bias"], stride, pad, depthwise)
    actual = conv(_to_nhwc(x)).numpy().transpose(0, 3, 1, 2)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


def test_dense_fed_by_a_flattened_nhwc_map_takes_torch_chw_rows():
    store = layers.ParamStore(tf.float32, seed=0)
    dense = layers.Dense(store, "fc", 3 * 2 * 4, 5, flattened_from=(3, 2, 4))
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 24)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    store.load({"fc.weight": w, "fc.bias": b})
    x = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)  # NCHW
    actual = dense(tf.reshape(_to_nhwc(x), (2, -1))).numpy()
    np.testing.assert_allclose(actual, x.reshape(2, -1) @ w.T + b, rtol=1e-5, atol=1e-5)


def _max_pool_2x2_nchw(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def test_lenet_equals_a_numpy_torch_lenet_with_canonical_weights():
    model = models.build_model("lenet")
    w = _random_canonical("lenet", 3)
    model.store.load(w)
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    h = _max_pool_2x2_nchw(
        np.maximum(_conv_nchw(x, w["features.0.weight"], w["features.0.bias"], pad=2), 0)
    )
    h = _max_pool_2x2_nchw(
        np.maximum(_conv_nchw(h, w["features.3.weight"], w["features.3.bias"]), 0)
    )
    h = h.reshape(3, -1)  # torch.flatten: (C, H, W) order
    for index, relu in ((0, True), (2, True), (4, False)):
        h = h @ w[f"classifier.{index}.weight"].T + w[f"classifier.{index}.bias"]
        h = np.maximum(h, 0) if relu else h
    actual = model(_to_nhwc(x), training=False).numpy()
    np.testing.assert_allclose(actual, h, rtol=1e-4, atol=1e-4)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def test_lstm_equals_a_numpy_lstm_with_torch_gate_order():
    model = models.build_model("lstm")
    w = _random_canonical("lstm", 5)
    model.store.load(w)
    tokens = np.random.default_rng(0).integers(0, models.LSTM_VOCAB_SIZE, (2, 6))
    x = w["embedding.weight"][tokens]
    h = np.zeros((2, models.LSTM_HIDDEN_SIZE), np.float32)
    c = np.zeros_like(h)
    for t in range(tokens.shape[1]):
        gates = (
            x[:, t] @ w["lstm.weight_ih_l0"].T + h @ w["lstm.weight_hh_l0"].T + w["lstm.bias_l0"]
        )
        i, f, g, o = np.split(gates, 4, axis=1)  # input, forget, cell, output
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    expected = h @ w["fc.weight"].T + w["fc.bias"]
    actual = model(tf.constant(tokens), training=False).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------- BatchNorm and pooling


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])  # fused and unfused paths
@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_batch_norm_follows_torch_in_training_and_inference(dtype, mode):
    store = layers.ParamStore(dtype, seed=0)
    bn = layers.BatchNorm(store, "bn", 3, eps=1e-3)
    rng = np.random.default_rng(0)
    gamma, beta = rng.uniform(0.5, 1.5, 3), rng.normal(0, 0.5, 3)
    mean0, var0 = rng.normal(0, 0.5, 3), rng.uniform(0.5, 1.5, 3)
    store.load(
        {"bn.weight": gamma, "bn.bias": beta, "bn.running_mean": mean0, "bn.running_var": var0}
    )
    x = rng.normal(2.0, 3.0, (4, 5, 3, 3))
    run = compile_fn(lambda t, training: bn(t, training), mode)
    tolerance = {"rtol": 1e-4, "atol": 1e-4}

    y = run(tf.constant(x, dtype), True).numpy()
    mean, var, n = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2)), 4 * 5 * 3
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3) * gamma + beta, **tolerance)
    # torch: momentum 0.1, running variance updated with the unbiased batch variance
    np.testing.assert_allclose(bn.mean.numpy(), 0.9 * mean0 + 0.1 * mean, **tolerance)
    np.testing.assert_allclose(bn.var.numpy(), 0.9 * var0 + 0.1 * var * n / (n - 1), **tolerance)

    mean1, var1 = bn.mean.numpy(), bn.var.numpy()
    y = run(tf.constant(x, dtype), False).numpy()
    np.testing.assert_allclose(y, (x - mean1) / np.sqrt(var1 + 1e-3) * gamma + beta, **tolerance)
    np.testing.assert_array_equal(bn.mean.numpy(), mean1)  # inference leaves statistics alone


def _adaptive_avg_pool_reference(x: np.ndarray, out: int) -> np.ndarray:
    """nn.AdaptiveAvgPool2d on NHWC, bin by bin."""
    n, h, w, c = x.shape
    y = np.zeros((n, out, out, c))
    for i in range(out):
        h0, h1 = (i * h) // out, -(-((i + 1) * h) // out)
        for j in range(out):
            w0, w1 = (j * w) // out, -(-((j + 1) * w) // out)
            y[:, i, j] = x[:, h0:h1, w0:w1].mean(axis=(1, 2))
    return y


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 10, 14, 16])
def test_vgg_adaptive_pool_equals_torchs_bins(size):
    x = np.random.default_rng(size).standard_normal((2, size, size, 4))
    actual = layers.adaptive_avg_pool(tf.constant(x), 7).numpy()
    np.testing.assert_allclose(actual, _adaptive_avg_pool_reference(x, 7), rtol=1e-12, atol=1e-12)


def test_resnet_max_pool_pads_symmetrically_like_torch():
    x = np.random.default_rng(0).uniform(0, 1, (1, 8, 8, 2))  # post-ReLU: non-negative
    actual = layers.max_pool_3x3_s2_p1(tf.constant(x)).numpy()
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
    expected = windows[:, ::2, ::2].max(axis=(-2, -1))
    assert actual.shape == (1, 4, 4, 2)
    np.testing.assert_array_equal(actual, expected)


def test_dropout_is_active_only_in_training():
    x = tf.ones((64, 64))
    assert np.array_equal(layers.dropout(x, 0.5, training=False).numpy(), x.numpy())
    dropped = layers.dropout(x, 0.5, training=True).numpy()
    assert 0.3 < np.mean(dropped == 0) < 0.7
    assert set(np.unique(dropped)) <= {0.0, 2.0}  # inverted dropout, as torch
