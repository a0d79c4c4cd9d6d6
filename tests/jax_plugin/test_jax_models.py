"""Tests for the JAX plugin: architectures against PyTorch's names, shapes and counts, layers
against numpy references, every workload built and run, reference methods, thread limiting.
Runs inside the jax-cpu agent environment (no torch there: PyTorch's facts come from
tests/equivalence/canonical_shapes.json and the parameter counts below)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stepped_models

from fwbench.jax_plugin import layers, models
from fwbench.jax_plugin.plugin import JaxPlugin, is_out_of_memory, select_device
from fwbench.jax_plugin.threads import limit_cpu_threads
from fwbench.runtime import digits
from fwbench.runtime.plugin import (
    FrameworkPlugin,
    OutOfMemory,
    PluginContext,
    UnsupportedWorkload,
    WorkloadSpec,
)
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec, param_count
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
SHAPES = json.loads(
    (Path(__file__).parents[1] / "equivalence" / "canonical_shapes.json").read_text()
)
# torchvision's counts; lstm has one bias vector (as Keras and Flax).
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
OPS_PARAMS = {
    "gemm": {"m": 64, "n": 32, "k": 48},
    "conv2d": {"channels_in": 4, "channels_out": 8, "height": 10, "width": 9, "kernel": 3},
}
# Small enough for 2 CPU cores; XLA compilation of the big training steps dominates anyway.
SMALL_IMAGE, TINY_IMAGE, SHORT_SEQ = 64, 32, 8
TINY_TRAIN = ("resnet152", "vgg16")


@pytest.fixture(scope="module")
def plugin() -> JaxPlugin:
    return JaxPlugin(PluginContext(device="cpu"))


def spec(
    workload: str,
    phase: str,
    batch: int = 2,
    *,
    dtype: str = "float32",
    threads: int = 0,
    mode: str = "jit",
    **params: int,
) -> WorkloadSpec:
    w = CATALOGUE.workloads[workload]
    return WorkloadSpec(w, phase, batch, dtype, w.resolve_params(params), threads, 0, mode)


def model_params(name: str, phase: str) -> dict[str, int]:
    if name == "lstm":
        return {"seq_len": SHORT_SEQ}
    if "image_size" not in CATALOGUE.workloads[name].params:
        return {}
    small = phase == "infer" or name not in TINY_TRAIN
    return {"image_size": SMALL_IMAGE if small else TINY_IMAGE}


# ------------------------------------------------------------------------- numpy references


def np_conv2d(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
    """PyTorch's conv2d on NCHW input and an OIHW kernel, written out in numpy."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    oh = (x.shape[2] - kh) // stride + 1
    ow = (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def np_lenet(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """LeNet from canonical (PyTorch-layout) weights on NCHW input, flattening (C, H, W)."""

    def conv_relu_pool(x: np.ndarray, name: str, padding: int) -> np.ndarray:
        y = np_conv2d(x, weights[f"{name}.weight"], padding=padding)
        y = np.maximum(y + weights[f"{name}.bias"][None, :, None, None], 0)
        n, c, h, w = y.shape
        return y.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))

    x = conv_relu_pool(conv_relu_pool(x, "features.0", 2), "features.3", 0).reshape(len(x), -1)
    for name in ("classifier.0", "classifier.2"):
        x = np.maximum(x @ weights[f"{name}.weight"].T + weights[f"{name}.bias"], 0)
    return x @ weights["classifier.4.weight"].T + weights["classifier.4.bias"]


def np_lstm(weights: dict[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    x = weights["embedding.weight"][tokens]
    h = c = np.zeros((len(tokens), models.LSTM_HIDDEN_SIZE))
    for t in range(tokens.shape[1]):
        gates = (
            x[:, t] @ weights["lstm.weight_ih_l0"].T
            + h @ weights["lstm.weight_hh_l0"].T
            + weights["lstm.bias_l0"]
        )
        i, f, g, o = np.split(gates, 4, axis=1)  # PyTorch's gate order
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h @ weights["fc.weight"].T + weights["fc.bias"]


def run_layer(forward, params, x, *, train=False, state=None, rng=None):
    """Runs a one-layer forward function through the same Scope machinery as the models."""
    return layers.run_forward(forward, params, state or {}, x, train=train, rng=rng)


# ------------------------------------------------------------------------ architecture facts


@pytest.mark.parametrize("name", stepped_models.built_params(models.MODEL_NAMES))
def test_canonical_weights_have_pytorch_names_and_shapes(plugin, name):
    weights = plugin.canonical_weights(name, seed=0)
    assert list(weights) == list(SHAPES[name])  # same names, in state_dict order
    assert {k: list(v.shape) for k, v in weights.items()} == SHAPES[name]
    assert all(v.dtype == np.float32 for v in weights.values())
    assert param_count(weights) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_trainable_parameter_count_equals_torchvision(name):
    assert models.Model(name).trainable_count() == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", ["lenet", "resnet18", "mobilenet_v2", "efficientnet_b0", "lstm"])
def test_canonical_round_trip_is_identity(plugin, name):
    weights = plugin.canonical_weights(name, seed=3)
    model = models.Model(name)
    again = model.to_canonical(*model.from_canonical(weights))
    assert list(again) == list(weights)
    for key, value in weights.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)


def test_canonical_weights_are_seeded_and_initialised_like_pytorch(plugin):
    first = plugin.canonical_weights("lenet", seed=5)
    np.testing.assert_array_equal(
        first["features.0.weight"], plugin.canonical_weights("lenet", 5)["features.0.weight"]
    )
    other = plugin.canonical_weights("lenet", seed=6)
    assert not np.array_equal(first["features.0.weight"], other["features.0.weight"])
    # PyTorch's default U(+-1/sqrt(fan_in)): fan_in of classifier.0 is 400, of features.0 25.
    assert 0.045 < np.abs(first["classifier.0.weight"]).max() <= 400**-0.5
    assert 0.15 < np.abs(first["features.0.weight"]).max() <= 25**-0.5
    resnet = plugin.canonical_weights("resnet18", seed=0)
    np.testing.assert_array_equal(resnet["bn1.weight"], np.ones(64, np.float32))
    np.testing.assert_array_equal(resnet["bn1.running_var"], np.ones(64, np.float32))


def test_from_canonical_rejects_missing_unknown_or_misshaped_weights(plugin):
    model = models.Model("lenet")
    weights = plugin.canonical_weights("lenet", 0)
    with pytest.raises(ValueError, match=r"missing weights \['features.0.bias'\]"):
        model.from_canonical({k: v for k, v in weights.items() if k != "features.0.bias"})
    with pytest.raises(ValueError, match=r"unknown weights \['extra'\]"):
        model.from_canonical(weights | {"extra": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match=r"classifier\.0\.weight has shape"):
        model.from_canonical(weights | {"classifier.0.weight": np.zeros((400, 120), np.float32)})


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_input_shapes_follow_the_catalogue(name):
    struct = models.input_struct(name, 2, image_size=96, seq_len=7)
    expected = {"lenet": (2, 28, 28, 1), "lstm": (2, 7)}.get(name, (2, 96, 96, 3))
    assert struct.shape == expected
    if name not in ("lenet", "lstm"):
        with pytest.raises(ValueError, match="image_size must be >= 32"):
            models.input_struct(name, 2, image_size=16)


# ---------------------------------------------------------------------- layers against numpy


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 9, 12, 16])
def test_vgg_adaptive_pool_equals_pytorch_bins(size):
    x = np.random.default_rng(size).standard_normal((2, size, size, 3)).astype(np.float32)
    expected = np.zeros((2, 7, 7, 3), np.float32)
    for i in range(7):
        for j in range(7):
            rows = slice(int(np.floor(i * size / 7)), int(np.ceil((i + 1) * size / 7)))
            cols = slice(int(np.floor(j * size / 7)), int(np.ceil((j + 1) * size / 7)))
            expected[:, i, j] = x[:, rows, cols].mean(axis=(1, 2))
    got = np.asarray(layers.adaptive_avg_pool(jnp.asarray(x), 7))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_strided_conv_pads_symmetrically_like_pytorch():
    # An even input with a 3x3/s2/p1 conv: XLA's "SAME" would pad only the far edge here.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    params = {"weight": jnp.asarray(layers.CONV.from_canonical(w))}
    nhwc = jnp.asarray(x.transpose(0, 2, 3, 1))
    out, _ = run_layer(lambda s, v: layers.conv2d(s, v, 5, 3, stride=2, padding=1), params, nhwc)
    expected = np_conv2d(x, w, stride=2, padding=1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-4)


def test_depthwise_conv_uses_one_filter_per_channel():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)  # PyTorch (C, 1, kh, kw)
    params = {"weight": jnp.asarray(layers.CONV.from_canonical(w))}
    nhwc = jnp.asarray(x.transpose(0, 2, 3, 1))
    forward = lambda s, v: layers.conv2d(s, v, 4, 3, stride=2, padding=1, groups=4)  # noqa: E731
    out, _ = run_layer(forward, params, nhwc)
    expected = np.concatenate(
        [np_conv2d(x[:, c : c + 1], w[c : c + 1], stride=2, padding=1) for c in range(4)], axis=1
    )
    np.testing.assert_allclose(np.asarray(out), expected.transpose(0, 2, 3, 1), atol=1e-4)


def test_resnet_max_pool_pads_with_minus_infinity():
    x = -1.0 - jnp.arange(16.0).reshape(1, 4, 4, 1)  # all negative: zero padding would win
    out = np.asarray(layers.max_pool(x, 3, 2, padding=1))[0, :, :, 0]
    np.testing.assert_array_equal(out, [[-1.0, -2.0], [-5.0, -6.0]])


def test_batch_norm_trains_on_batch_statistics_and_tracks_unbiased_variance():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 3, 4)).astype(np.float32) * 3 + 1
    params = {"weight": jnp.full(4, 2.0), "bias": jnp.full(4, 0.5)}
    state = {"running_mean": jnp.zeros(4), "running_var": jnp.ones(4)}
    forward = lambda s, v: layers.batch_norm(s, v, eps=1e-5)  # noqa: E731
    out, new_state = run_layer(forward, params, jnp.asarray(x), train=True, state=state)
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    np.testing.assert_allclose(out, 2 * (x - mean) / np.sqrt(var + 1e-5) + 0.5, atol=1e-4)
    np.testing.assert_allclose(new_state["running_mean"], 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(new_state["running_var"], 0.9 + 0.1 * var * 18 / 17, rtol=1e-5)
    evaluated, same = run_layer(forward, params, jnp.asarray(x), state=state)
    np.testing.assert_allclose(evaluated, 2 * x / np.sqrt(1 + 1e-5) + 0.5, rtol=1e-5)
    assert same == state


def test_dropout_only_in_training_with_a_key():
    x = jnp.ones((200, 50))
    forward = lambda s, v: layers.dropout(s, v, 0.5)  # noqa: E731
    key = jax.random.PRNGKey(0)
    dropped, _ = run_layer(forward, {}, x, train=True, rng=key)
    values = np.unique(np.asarray(dropped))
    np.testing.assert_array_equal(values, [0.0, 2.0])  # survivors scaled by 1/(1-p)
    assert 0.45 < float(jnp.mean(dropped == 0)) < 0.55
    np.testing.assert_array_equal(run_layer(forward, {}, x, train=False, rng=key)[0], x)
    np.testing.assert_array_equal(run_layer(forward, {}, x, train=True, rng=None)[0], x)


def test_lenet_equals_a_numpy_pytorch_layout_reference(plugin):
    # Checks every layout conversion end to end: OIHW kernels, (out, in) dense weights and
    # the (C, H, W) flattening in front of classifier.0.
    weights = plugin.canonical_weights("lenet", 1)
    images = np.random.default_rng(3).standard_normal((3, 1, 28, 28)).astype(np.float32)
    case = EquivalenceCase("lenet", weights, images, np.array([1, 2, 3]), OptimizerSpec(0.01, 0.9))
    result = plugin.equivalence(case)
    np.testing.assert_allclose(result.eval_logits, np_lenet(weights, images), atol=1e-4)


def test_lstm_equals_a_numpy_reference(plugin):
    weights = plugin.canonical_weights("lstm", 2)
    tokens = np.random.default_rng(4).integers(0, 20_000, (3, 6))
    case = EquivalenceCase("lstm", weights, tokens, np.array([0, 1, 1]), OptimizerSpec(0.01, 0.9))
    result = plugin.equivalence(case)
    np.testing.assert_allclose(result.eval_logits, np_lstm(weights, tokens), atol=1e-5)
    assert result.loss_after < result.loss_before


# --------------------------------------------------------------------- workloads, end to end


def test_plugin_keeps_the_contract_and_declares_its_optional_capabilities(plugin):
    assert isinstance(plugin, FrameworkPlugin)
    # model_files where jax's serialization loads (flatbuffers, which the agent's lock has)
    assert plugin.optional_capabilities == {"accuracy", "equivalence", "model_files", "profile"}


def test_describe_reports_jax_threads_and_every_op_and_model(plugin):
    description = plugin.describe()
    assert description.framework == "jax"
    assert description.framework_version == jax.__version__
    assert description.threads_fixed_at_startup
    assert description.intra_op_threads == len(os.sched_getaffinity(0))
    kinds = ("op", "model", "generation")
    runnable = {n for n, w in CATALOGUE.workloads.items() if w.kind in kinds}
    assert set(description.capabilities) == runnable
    for name, capability in description.capabilities.items():
        assert capability.dtypes == ("float32", "bfloat16")
        # The attention op adds its plain mode (test_jax_transformers.py).
        assert capability.modes == (("jit", "plain") if name == "attention" else ("jit",))
    assert description.libraries["backend"] == "cpu"
    assert {"jaxlib", "optax", "numpy"} <= set(description.libraries)
    assert description.devices[0].kind == "cpu" and description.devices[0].memory_total_bytes > 0


def _check_model_step(plugin, name: str, phase: str):
    built = plugin.build(spec(name, phase, **model_params(name, phase)))
    first = built.step()
    plugin.synchronize(first)
    second = built.step()
    plugin.synchronize(second)
    if phase == "infer":
        assert first.shape == (2, models.NUM_CLASSES[name]) and first.dtype == jnp.float32
        assert np.isfinite(np.asarray(first)).all()
        np.testing.assert_array_equal(first, second)  # inference mode: no dropout
    else:
        assert first.shape == () and np.isfinite(float(first))
        assert float(second) != float(first)  # the updated weights stayed in the closure
    assert built.settings.layout == ("" if name == "lstm" else "NHWC")


@pytest.mark.parametrize("phase", ["infer", "train"])
@pytest.mark.parametrize("name", stepped_models.swept_params(models.MODEL_NAMES))
def test_every_model_builds_and_runs(plugin, name, phase):
    _check_model_step(plugin, name, phase)


def _inputs(built) -> tuple:
    """The device inputs an op's step is bound to (a partial, under the plugin's out-of-memory
    translation)."""
    return built.step.__wrapped__.args


@pytest.mark.parametrize("batch", [1, 3])
def test_gemm_computes_the_product_and_its_input_gradients(plugin, batch):
    infer = plugin.build(spec("gemm", "infer", batch, **OPS_PARAMS["gemm"]))
    train = plugin.build(spec("gemm", "train", batch, **OPS_PARAMS["gemm"]))
    # White-box: the steps are partials over their device inputs (a, b[, upstream grad]).
    a, b = (np.asarray(v, np.float64) for v in _inputs(infer))
    out = infer.step()
    plugin.synchronize(out)
    lead = (3,) if batch == 3 else ()
    assert out.shape == (*lead, 64, 32)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3)
    train_out, (grad_a, grad_b) = train.step()
    np.testing.assert_allclose(train_out, out, rtol=1e-6)  # same seed, same inputs
    ones = np.ones((*lead, 64, 32))
    np.testing.assert_allclose(grad_a, ones @ np.swapaxes(b, -1, -2), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grad_b, np.swapaxes(a, -1, -2) @ ones, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kernel", [3, 4])
def test_conv2d_matches_pytorch_conv_and_its_gradient_shapes(plugin, kernel):
    params = OPS_PARAMS["conv2d"] | {"kernel": kernel}
    infer = plugin.build(spec("conv2d", "infer", 2, **params))
    x, w = (np.asarray(v, np.float64) for v in _inputs(infer))
    out = infer.step()
    # PyTorch's padding=kernel//2: an even kernel grows the map by one.
    expected = np_conv2d(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), padding=kernel // 2)
    np.testing.assert_allclose(out, expected.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-3)
    _, (grad_x, grad_w) = plugin.build(spec("conv2d", "train", 2, **params)).step()
    assert grad_x.shape == x.shape and grad_w.shape == w.shape
    assert infer.settings.layout == "NHWC"


def test_bfloat16_runs_params_and_activations_in_bfloat16(plugin):
    out = plugin.build(spec("gemm", "infer", dtype="bfloat16", **OPS_PARAMS["gemm"])).step()
    assert out.dtype == jnp.bfloat16
    infer = plugin.build(spec("lenet", "infer", dtype="bfloat16"))
    assert infer.step().dtype == jnp.bfloat16
    assert "bfloat16" in infer.settings.extra["mixed"]
    loss = plugin.build(spec("lenet", "train", dtype="bfloat16")).step()
    assert loss.dtype == jnp.float32 and np.isfinite(float(loss))


@pytest.mark.parametrize(
    ("dtype", "mode"), [("float64", "jit"), ("float16", "jit"), ("float32", "eager")]
)
def test_unsupported_dtype_or_mode_is_rejected(plugin, dtype, mode):
    with pytest.raises(UnsupportedWorkload):
        plugin.build(spec("gemm", "infer", dtype=dtype, mode=mode, **OPS_PARAMS["gemm"]))


def test_a_thread_count_other_than_the_start_up_one_is_rejected(plugin):
    current = plugin.describe().intra_op_threads
    built = plugin.build(spec("gemm", "infer", threads=current, **OPS_PARAMS["gemm"]))
    assert built.settings.intra_op_threads == current
    with pytest.raises(UnsupportedWorkload, match=f"FWBENCH_THREADS={current + 1}"):
        plugin.build(spec("gemm", "infer", threads=current + 1, **OPS_PARAMS["gemm"]))


def test_settings_report_device_precision_and_donation(plugin):
    settings = plugin.build(spec("lenet", "train")).settings
    assert settings.device == "cpu:0" and settings.mode == "jit" and settings.dtype == "float32"
    assert settings.extra["matmul_precision"] == "default"
    assert "params" in settings.extra["donated"]


def test_device_selection_fails_loudly():
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(RuntimeError, match="no GPU"):
            select_device("cuda")


def test_out_of_memory_errors_are_recognised_by_xla_status():
    exhausted = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes."
    assert is_out_of_memory(jax.errors.JaxRuntimeError(exhausted))
    assert not is_out_of_memory(jax.errors.JaxRuntimeError("INVALID_ARGUMENT: bad shapes"))
    assert not is_out_of_memory(ValueError(exhausted))  # not XLA's


def test_out_of_memory_while_building_raises_out_of_memory_chained(plugin, monkeypatch):
    exhausted = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes."

    def allocate(*_args: object, **_kwargs: object) -> None:
        raise jax.errors.JaxRuntimeError(exhausted)

    monkeypatch.setattr(jax.random, "normal", allocate)
    with pytest.raises(OutOfMemory, match="RESOURCE_EXHAUSTED") as caught:
        plugin.build(spec("gemm", "infer", **OPS_PARAMS["gemm"]))
    assert isinstance(caught.value.__cause__, jax.errors.JaxRuntimeError)


# ------------------------------------------------------------------------ reference methods


def test_equivalence_uses_batch_statistics_and_steps_downhill(plugin):
    weights = plugin.canonical_weights("resnet18", 1)
    weights = weights | {k: np.full_like(v, 4.0) for k, v in weights.items() if "running_var" in k}
    rng = np.random.default_rng(0)
    images = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    labels = np.array([3, 7])
    result = plugin.equivalence(
        EquivalenceCase("resnet18", weights, images, labels, OptimizerSpec(0.01, 0.9))
    )
    assert result.param_count == EXPECTED_PARAMS["resnet18"]
    assert result.eval_logits.shape == (2, 1000) and result.eval_logits.dtype == np.float32
    assert np.isfinite(result.eval_logits).all()
    shifted = result.eval_logits.astype(np.float64)
    shifted -= shifted.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    eval_loss = -np.mean(log_probs[np.arange(2), labels])
    assert abs(eval_loss - result.loss_before) > 1e-3  # training mode ignores running stats
    assert np.isfinite(result.loss_before) and result.loss_after < result.loss_before


def test_equivalence_rejects_incomplete_weights(plugin):
    weights = plugin.canonical_weights("lenet", 0)
    del weights["classifier.4.bias"]
    images = np.zeros((1, 1, 28, 28), np.float32)
    with pytest.raises(ValueError, match="missing"):
        plugin.equivalence(
            EquivalenceCase("lenet", weights, images, np.array([0]), OptimizerSpec(0.01, 0.9))
        )


def test_trainer_learns_digits_without_recompiling(plugin):
    data = digits.load_digits()
    shapes = {k: v.shape for k, v in plugin.canonical_weights("lenet", 0).items()}
    trainer = plugin.trainer(
        "lenet",
        digits.initial_weights(shapes, 0),
        OptimizerSpec(0.01, 0.9),
        spec("train_to_accuracy", "train", 32),
    )
    assert trainer.settings.layout == "NHWC" and trainer.settings.mode == "jit"
    compiles: list[str] = []

    def on_compile(event: str, _duration: float, **_kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    def on_event(event: str, **_kwargs: object) -> None:
        if event == stepped_models.JAX_CACHE_HIT:  # a program compiled again, found in the cache
            compiles.append(event)

    n = len(data.train.labels)
    for index in digits.epoch_batches(n, 32, 0, 1):
        trainer.train_step(data.train.images[index], data.train.labels[index])
    jax.monitoring.register_event_duration_secs_listener(on_compile)
    jax.monitoring.register_event_listener(on_event)
    try:
        for epoch in (2, 3, 4, 5):
            for index in digits.epoch_batches(n, 32, 0, epoch):
                loss = trainer.train_step(data.train.images[index], data.train.labels[index])
    finally:
        jax.monitoring.unregister_event_duration_listener(on_compile)
        jax.monitoring.unregister_event_listener(on_event)
    plugin.synchronize(loss)
    assert compiles == []  # every later batch reused epoch 1's program
    predicted = trainer.predict(data.validation.images)
    assert predicted.dtype == np.int64 and predicted.shape == data.validation.labels.shape
    assert np.mean(predicted == data.validation.labels) > 0.8


# ---------------------------------------------------------------------------------- threads


def test_more_threads_than_cpus_is_refused_without_touching_affinity():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="may run on"):
        limit_cpu_threads(len(before) + 1)
    assert os.sched_getaffinity(0) == before
    assert limit_cpu_threads(0) == len(before)


_THREAD_PROBE = textwrap.dedent(
    """
    import json, os, time
    from fwbench.runtime.plugin import WorkloadSpec, context_from_environment
    from fwbench.runtime.registry import load_plugin
    from fwbench.spec import load_catalogue

    def busy_ticks():
        ticks = {}
        for task in os.listdir("/proc/self/task"):
            fields = open(f"/proc/self/task/{task}/stat").read().rsplit(")", 1)[1].split()
            ticks[task] = int(fields[11]) + int(fields[12])  # utime + stime
        return ticks

    plugin = load_plugin("jax", context_from_environment())  # FWBENCH_THREADS, end to end
    gemm = load_catalogue().workloads["gemm"]
    params = {"m": 1024, "n": 1024, "k": 1024}
    built = plugin.build(WorkloadSpec(gemm, "infer", 1, "float32", params, 0, 0, "jit"))
    plugin.synchronize(built.step())
    before, cpu, wall = busy_ticks(), time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < 1.5:
        plugin.synchronize(built.step())
    wall, cpu, after = time.perf_counter() - wall, time.process_time() - cpu, busy_ticks()
    spent = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    print(json.dumps({
        "intra": plugin.describe().intra_op_threads,
        "settings": built.settings.intra_op_threads,
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_per_wall": cpu / wall,
        "spent": spent,
    }))
    """
)


def _probe(threads: str) -> dict:
    env = {**os.environ, "FWBENCH_THREADS": threads, "FWBENCH_DEVICE": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # this test's fwbench
    result = subprocess.run(
        [sys.executable, "-c", _THREAD_PROBE], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_fwbench_threads_1_really_limits_xla_to_one_core():
    one = _probe("1")
    assert one["intra"] == one["settings"] == one["cpus"] == 1
    assert one["cpu_per_wall"] < 1.15  # one core cannot give more than one second per second
    assert sum(one["spent"][1:]) <= 0.1 * one["spent"][0]  # one busy thread does the work
    if len(os.sched_getaffinity(0)) < 2:
        return
    default = _probe("0")  # the same probe must see parallelism, else it proves nothing
    assert default["intra"] == default["cpus"] == len(os.sched_getaffinity(0))
    assert default["spent"][1] > 0.25 * default["spent"][0]
