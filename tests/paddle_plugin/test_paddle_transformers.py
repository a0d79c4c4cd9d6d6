"""Tests for the Paddle plugin's transformers: canonical names and shapes against Hugging
Face's (tests/equivalence/transformer_shapes.json), the weight mapping both ways, logits and
the language-model loss against NumPy references written from the canonical weights,
generation on the KV cache against greedy decoding by whole forward passes, the attention
op's modes against NumPy, and what the plugin's rows say. Runs inside the paddle-cpu agent
environment; shapes are tiny, nothing depends on the host's speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import paddle
import pytest

from fwbench.paddle_plugin import language_model, reference, transformers, weights
from fwbench.paddle_plugin.attention import causal_mask, plain_attention, sdpa
from fwbench.paddle_plugin.generation import build_generation
from fwbench.paddle_plugin.plugin import PaddlePlugin
from fwbench.paddle_plugin.training import TrainStep
from fwbench.runtime.architectures import IGNORED_LABEL, transformer_parameters
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import param_count
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import evaluate_expression

CATALOGUE = load_catalogue()
SHAPES = json.loads(
    (Path(__file__).parents[1] / "equivalence" / "transformer_shapes.json").read_text()
)
SMALL = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 30, "context": 16, "seq_len": 8}
MODELS = ("bert", "gpt")


def far_from_fresh(model: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Canonical weights far from Paddle's initialisation (as tests/equivalence makes them),
    so that a wrong epsilon, GELU or transposed kernel shows."""
    rng = np.random.default_rng(seed)
    found = reference.canonical_weights(model, seed, SMALL)
    for name, array in found.items():
        if "LayerNorm" in name or ".ln_" in name:
            center = 1.0 if name.endswith("weight") else 0.0
            found[name] = (center + rng.normal(0.0, 0.1, array.shape)).astype(np.float32)
        elif "embeddings" in name or name.endswith(("wte.weight", "wpe.weight")):
            found[name] = rng.standard_normal(array.shape).astype(np.float32)
        elif array.ndim == 2:
            found[name] = array * 4
        else:
            found[name] = rng.normal(0.0, 0.1, array.shape).astype(np.float32)
    return found


def loaded(model: str, canonical: dict[str, np.ndarray]) -> transformers.Transformer:
    net = transformers.build_transformer(transformers.config_for(model, SMALL))
    weights.load(net, canonical)
    return net


def tokens(model: str, batch: int = 2, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, SMALL["vocab"], (batch, SMALL["seq_len"]))


# ----------------------------------------------------------------------- NumPy references


def _norm(x: np.ndarray, w: dict[str, np.ndarray], name: str, eps: float) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _dense(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]  # canonical (out, in)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, causal: bool):
    def split(t: np.ndarray) -> np.ndarray:
        b, s, h = t.shape
        return t.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)

    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if causal:
        seq = scores.shape[-1]
        scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    out = (p / p.sum(-1, keepdims=True)) @ v
    b, _, s, _ = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, -1)


_erf = np.vectorize(math.erf)


def numpy_bert(w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in w.items()}
    e, eps, heads = "bert.embeddings", 1e-12, SMALL["heads"]
    x = w[f"{e}.word_embeddings.weight"][ids] + w[f"{e}.position_embeddings.weight"][: ids.shape[1]]
    x = _norm(x + w[f"{e}.token_type_embeddings.weight"][0], w, f"{e}.LayerNorm", eps)
    gelu = lambda t: 0.5 * t * (1 + _erf(t / math.sqrt(2)))  # noqa: E731
    for i in range(SMALL["layers"]):
        a = f"bert.encoder.layer.{i}.attention"
        q, k, v = (_dense(x, w, f"{a}.self.{p}") for p in ("query", "key", "value"))
        ctx = _dense(_attend(q, k, v, heads, False), w, f"{a}.output.dense")
        x = _norm(ctx + x, w, f"{a}.output.LayerNorm", eps)
        inner = gelu(_dense(x, w, f"bert.encoder.layer.{i}.intermediate.dense"))
        x = _dense(inner, w, f"bert.encoder.layer.{i}.output.dense") + x
        x = _norm(x, w, f"bert.encoder.layer.{i}.output.LayerNorm", eps)
    t = "cls.predictions.transform"
    x = _norm(gelu(_dense(x, w, f"{t}.dense")), w, f"{t}.LayerNorm", eps)
    return x @ w[f"{e}.word_embeddings.weight"].T + w["cls.predictions.bias"]


def numpy_gpt(w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in w.items()}
    eps, heads = 1e-5, SMALL["heads"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][: ids.shape[1]]

    def gelu(t: np.ndarray) -> np.ndarray:
        return 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t**3)))

    for i in range(SMALL["layers"]):
        b = f"transformer.h.{i}"
        q, k, v = np.split(_dense(_norm(x, w, f"{b}.ln_1", eps), w, f"{b}.attn.c_attn"), 3, -1)
        x = x + _dense(_attend(q, k, v, heads, True), w, f"{b}.attn.c_proj")
        inner = gelu(_dense(_norm(x, w, f"{b}.ln_2", eps), w, f"{b}.mlp.c_fc"))
        x = x + _dense(inner, w, f"{b}.mlp.c_proj")
    return _norm(x, w, "transformer.ln_f", eps) @ w["transformer.wte.weight"].T


NUMPY = {"bert": numpy_bert, "gpt": numpy_gpt}


# ------------------------------------------------------------------------ architecture facts


@pytest.mark.parametrize("model", MODELS)
def test_canonical_weights_have_hugging_face_names_and_shapes(model):
    exported = reference.canonical_weights(model, 0, SHAPES["params"])
    assert list(exported) == list(SHAPES[model])  # same names, in state_dict order
    assert {k: list(v.shape) for k, v in exported.items()} == SHAPES[model]
    assert all(v.dtype == np.float32 for v in exported.values())


@pytest.mark.parametrize("model", MODELS)
def test_parameter_count_equals_the_catalogues(model):
    config = transformers.config_for(model, SMALL)
    workload = CATALOGUE.get(model)
    params = workload.resolve_params({k: v for k, v in SMALL.items() if k in workload.params})
    formula = evaluate_expression(workload.parameters, params)
    exported = reference.canonical_weights(model, 0, SMALL)
    assert param_count(exported) == transformer_parameters(config) == int(formula)


@pytest.mark.parametrize("model", MODELS)
def test_canonical_round_trip_is_exact(model):
    exported = far_from_fresh(model)
    again = weights.export(loaded(model, exported))
    assert list(again) == list(exported)
    for key, value in exported.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)


# -------------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("model", MODELS)
def test_logits_match_numpy_from_canonical_weights(model):
    canonical, ids = far_from_fresh(model), tokens(model)
    net = loaded(model, canonical).eval()
    with paddle.no_grad():
        logits = net(paddle.to_tensor(ids)).numpy()
    expected = NUMPY[model](canonical, ids)
    scale = float(np.abs(expected).max())
    assert float(np.abs(logits - expected).max()) <= 1e-5 * scale


def test_the_loss_is_the_mean_over_labelled_positions_only():
    """Paddle's own mean with ignore_index divides by every position; PyTorch's, by the
    labelled ones."""
    canonical, ids = far_from_fresh("bert"), tokens("bert")
    labels = np.full(ids.shape, IGNORED_LABEL)
    labels[:, [1, 5]] = ids[:, [2, 6]]
    net = loaded("bert", canonical)
    loss = language_model.LanguageModelLoss(net)(paddle.to_tensor(ids), paddle.to_tensor(labels))
    logits = numpy_bert(canonical, ids)
    kept = labels != IGNORED_LABEL
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, np.where(kept, labels, 0)[..., None], -1)[..., 0]
    assert float(loss) == pytest.approx(-picked[kept].mean(), rel=1e-5)


@pytest.mark.parametrize("model", MODELS)
def test_static_and_dygraph_training_steps_agree(model):
    canonical, ids = far_from_fresh(model), paddle.to_tensor(tokens(model))
    labels = paddle.to_tensor(tokens(model, seed=2))
    losses = []
    for mode in ("dygraph", "static"):
        step = TrainStep(loaded(model, canonical), mode, with_loss=language_model.LanguageModelLoss)
        losses.append([float(step(ids, labels)) for _ in range(3)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert losses[0][2] < losses[0][0]


# ------------------------------------------------------------------------------ generation


@pytest.mark.parametrize("mode", ["dygraph", "static"])
def test_kv_cache_generation_equals_greedy_decoding_by_whole_forward_passes(mode):
    net = loaded("gpt", far_from_fresh("gpt"))
    assert isinstance(net, transformers.GPT2LMHeadModel)
    prompt = tokens("gpt")[:, :4]
    params = {**SMALL, "prompt_len": 4, "new_tokens": 6}
    steps, run = build_generation(params, 2, "float32", 0, mode, net, prompt, keep_gaps=True)
    assert steps.decode_steps == 5
    steps.generate()
    generated = np.stack(run.tokens, axis=1)
    sequence = prompt
    with paddle.no_grad():
        for _ in range(6):
            logits = net(paddle.to_tensor(sequence)).numpy()[:, -1]
            sequence = np.concatenate([sequence, logits.argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(generated, sequence[:, 4:])
    assert np.stack(run.gaps, axis=1).min() >= 0
    assert run.cache.bytes() == 2 * SMALL["layers"] * 2 * 10 * SMALL["hidden"] * 4
    run.decode()  # the last new token's own position: the cache's last
    with pytest.raises(RuntimeError, match="all filled"):
        run.decode()
    steps.generate()  # again, from the prompt: the same tokens
    np.testing.assert_array_equal(np.stack(run.tokens, axis=1), generated)


# ------------------------------------------------------------------------------- attention


@pytest.mark.parametrize("causal", [False, True])
def test_attention_modes_agree_with_numpy_forward_and_backward(causal):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((2, 5, 3, 4)) for _ in range(3)]  # (batch, seq, heads, dim)
    grads, outs = [], []
    for plain in (False, True):
        layout = (0, 2, 1, 3) if plain else (0, 1, 2, 3)
        q, k, v = (paddle.to_tensor(a.transpose(layout), stop_gradient=False) for a in arrays)
        mask = causal_mask(5, 5, "float64") if causal else None
        out = plain_attention(q, k, v, mask) if plain else sdpa(q, k, v, causal)
        out.backward(paddle.ones_like(out))
        outs.append(out.numpy().transpose(layout))
        grads.append([t.grad.numpy().transpose(layout) for t in (q, k, v)])
    flat = [a.reshape(2, 5, 12) for a in arrays]
    expected = _attend(*flat, 3, causal).reshape(2, 5, 3, 4)
    for out in outs:
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    for fused, plain in zip(*grads, strict=True):
        np.testing.assert_allclose(plain, fused, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------- plugin


@pytest.fixture(scope="module")
def plugin() -> PaddlePlugin:
    return PaddlePlugin(PluginContext(device="cpu"))


def spec(workload: str, phase: str = "infer", mode: str = "dygraph", dtype: str = "float32"):
    w = CATALOGUE.get(workload)
    given = {**SMALL, "prompt_len": 4, "new_tokens": 3, "head_dim": 4, "causal": 1}
    params = w.resolve_params({k: v for k, v in given.items() if k in w.params})
    return WorkloadSpec(w, phase, 2, dtype, params, 0, 0, mode)


@pytest.mark.parametrize("mode", ["dygraph", "static", "plain"])
@pytest.mark.parametrize("phase", ["train", "infer"])
def test_the_attention_op_runs_and_names_its_kernel(plugin, mode, phase):
    built = plugin.build(spec("attention", phase, mode))
    for _ in range(2):
        built.step()
    kernel = built.settings.extra["attention_kernel"]
    assert kernel.startswith("plain:" if mode == "plain" else "sdpa:math")
    assert built.settings.extra["attention_layout"].startswith("batch, ")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["dygraph", "static"])
@pytest.mark.parametrize("phase", ["train", "infer"])
@pytest.mark.parametrize("model", MODELS)
def test_bert_and_gpt_cells_build_and_step(plugin, model, phase, mode, dtype):
    built = plugin.build(spec(model, phase, mode, dtype))
    out = [built.step() for _ in range(2)][-1]
    assert str(out.dtype).endswith("float32" if phase == "train" else dtype)  # float32 loss
    extra = built.settings.extra
    assert extra["attention_kernel"].startswith("sdpa:") and extra["dtype_policy"]
    assert ("optimizer" in extra) == (phase == "train")


@pytest.mark.parametrize("mode", ["dygraph", "static"])
def test_generate_says_what_its_cache_holds(plugin, mode):
    built = plugin.build(spec("generate", mode=mode))
    assert built.generation is not None and built.generation.decode_steps == 2
    token = built.step()
    assert tuple(token.shape) == (2,) and str(token.dtype).endswith("int64")
    extra = built.settings.extra
    assert extra["kv_cache"].startswith("preallocated for 7 positions")
    assert ("whole cache" in extra["kv_cache"]) == (mode == "static")
    assert extra["kv_cache_allocated_bytes"] == str(2 * 2 * 2 * 7 * SMALL["hidden"] * 4)
    assert extra["attention_kernel"].startswith("sdpa:")


def test_generate_has_no_training_phase(plugin):
    with pytest.raises(UnsupportedWorkload, match="valid: infer"):
        plugin.build(spec("generate", phase="train"))
