"""The transformers in Keras (attention op, bert, gpt, generate) on the agent's backend: canonical
weight names and shapes as Hugging Face's (tests/equivalence/transformer_shapes.json), logits
equal to a NumPy float64 reference of BertForMaskedLM and GPT2LMHeadModel written from the same
canonical weights, attention equal to softmax(Q K^T / sqrt(d)) V in both its kernels, and greedy
generation on the KV cache giving the tokens of greedy decoding by whole forward passes, in
every mode. Tiny shapes: nothing here depends on the host's speed."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import keras
import numpy as np
import pytest
from stepped_models import FULL, keras_models_here, why_not_keras_models

from fwbench.keras_plugin import attention, generation, transformers, weights
from fwbench.keras_plugin.backend import make_backend
from fwbench.runtime.architectures import transformer_parameters
from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec

SHAPES = json.loads(
    (Path(__file__).parents[1] / "equivalence" / "transformer_shapes.json").read_text()
)
PARAMS = {"layers": 2, "hidden": 8, "heads": 2, "vocab": 11, "context": 12, "seq_len": 5}
RTOL = 1e-5  # of the logits' scale, as the equivalence test
# Building the "compile" mode calls torch.compile, which imports modules that still use
# torch.jit.script_method.
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
    # One Keras code on three backends' ops: `make test` runs this module on the backend it
    # builds the models on, the equivalence test compares every backend's transformers with
    # PyTorch's (logits, one training step, greedy tokens) and the contract suite builds them
    # on each; `make test-full` runs this module on each backend.
    pytest.mark.skipif(not keras_models_here(), reason=why_not_keras_models()),
]


def _net(model: str, params: dict[str, int] = PARAMS, seed: int = 0):  # type: ignore[no-untyped-def]
    keras.utils.set_random_seed(seed)
    return transformers.build_transformer(transformers.config_for(model, params))


def _random_weights(net) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """Far from Keras' initial values, so that a transposed kernel or a wrong epsilon shows."""
    rng = np.random.default_rng(7)
    found = {}
    for name, array in weights.export(net).items():
        norm = ("LayerNorm" in name or ".ln_" in name) and name.endswith("weight")
        found[name] = ((1.0 if norm else 0.0) + rng.normal(0, 0.5, array.shape)).astype(np.float32)
    return found


# --------------------------------------------------------------------------- NumPy reference


def _norm(x: np.ndarray, w: dict, name: str, eps: float) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _dense(x: np.ndarray, w: dict, name: str) -> np.ndarray:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _gelu(x: np.ndarray, tanh: bool) -> np.ndarray:
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """(batch, seq, heads, head_dim) each."""
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", scores / scores.sum(-1, keepdims=True), v)


def _self_attention(x: np.ndarray, q, k, v, heads: int, causal: bool) -> np.ndarray:  # type: ignore[no-untyped-def]
    b, s, h = x.shape
    split = [t.reshape(b, s, heads, h // heads) for t in (q, k, v)]
    return _attention(*split, causal).reshape(b, s, h)


def numpy_bert(w: dict, tokens: np.ndarray, heads: int, layers: int) -> np.ndarray:
    eps, p = 1e-12, "bert.embeddings"
    x = (
        w[f"{p}.word_embeddings.weight"][tokens]
        + w[f"{p}.position_embeddings.weight"][: tokens.shape[1]]
    )
    x = _norm(x + w[f"{p}.token_type_embeddings.weight"][0], w, f"{p}.LayerNorm", eps)
    for i in range(layers):
        n = f"bert.encoder.layer.{i}"
        qkv = (_dense(x, w, f"{n}.attention.self.{part}") for part in ("query", "key", "value"))
        a = _dense(_self_attention(x, *qkv, heads, False), w, f"{n}.attention.output.dense")
        x = _norm(a + x, w, f"{n}.attention.output.LayerNorm", eps)
        inner = _gelu(_dense(x, w, f"{n}.intermediate.dense"), tanh=False)
        x = _norm(_dense(inner, w, f"{n}.output.dense") + x, w, f"{n}.output.LayerNorm", eps)
    x = _gelu(_dense(x, w, "cls.predictions.transform.dense"), tanh=False)
    x = _norm(x, w, "cls.predictions.transform.LayerNorm", eps)
    return x @ w[f"{p}.word_embeddings.weight"].T + w["cls.predictions.bias"]


def numpy_gpt(w: dict, tokens: np.ndarray, heads: int, layers: int) -> np.ndarray:
    eps = 1e-5
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][: tokens.shape[1]]
    for i in range(layers):
        n = f"transformer.h.{i}"
        q, k, v = np.split(_dense(_norm(x, w, f"{n}.ln_1", eps), w, f"{n}.attn.c_attn"), 3, -1)
        x = x + _dense(_self_attention(x, q, k, v, heads, True), w, f"{n}.attn.c_proj")
        inner = _gelu(_dense(_norm(x, w, f"{n}.ln_2", eps), w, f"{n}.mlp.c_fc"), tanh=True)
        x = x + _dense(inner, w, f"{n}.mlp.c_proj")
    return _norm(x, w, "transformer.ln_f", eps) @ w["transformer.wte.weight"].T


# ----------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_canonical_weights_are_hugging_faces_names_and_shapes(backend, model):
    net = _net(model, SHAPES["params"])
    exported = weights.export(net)
    assert {k: list(v.shape) for k, v in exported.items()} == SHAPES[model]
    config = transformers.config_for(model, SHAPES["params"])
    assert net.trainable_parameters() == transformer_parameters(config)
    assert sum(v.size for v in exported.values()) == transformer_parameters(config)


@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_logits_equal_numpys_from_the_same_canonical_weights(backend, model):
    net = _net(model)
    canonical = _random_weights(net)
    weights.load(net, canonical)
    tokens = np.random.default_rng(3).integers(0, PARAMS["vocab"], (2, PARAMS["seq_len"]))
    actual = keras.ops.convert_to_numpy(net.model(keras.ops.convert_to_tensor(tokens, "int32")))
    w64 = {k: v.astype(np.float64) for k, v in canonical.items()}
    reference = (numpy_bert if model == "bert" else numpy_gpt)(w64, tokens, 2, PARAMS["layers"])
    scale = float(np.abs(reference).max())
    assert float(np.abs(actual - reference).max()) <= RTOL * scale


def _spec(catalogue, name: str, phase: str, mode: str, **params: int) -> WorkloadSpec:  # type: ignore[no-untyped-def]
    workload = catalogue.get(name)
    return WorkloadSpec(workload, phase, 2, "float32", workload.resolve_params(params), 0, 0, mode)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_in_every_mode_is_softmax_attention(plugin, catalogue, causal):
    shape = {"heads": 2, "seq_len": 6, "head_dim": 4, "causal": causal}
    generator = keras.random.SeedGenerator(0)
    q, k, v = (keras.random.normal((2, 6, 2, 4), seed=generator) for _ in range(3))
    expected = _attention(*(keras.ops.convert_to_numpy(t) for t in (q, k, v)), bool(causal))
    for forward in (attention.attend, attention.plain_attention):
        got = keras.ops.convert_to_numpy(forward(q, k, v, causal=bool(causal)))
        assert np.allclose(got, expected, atol=1e-5)
    for mode in plugin.describe().capabilities["attention"].modes:
        for phase in ("infer", "train"):
            built = plugin.build(_spec(catalogue, "attention", phase, mode, **shape))
            kernel = built.settings.extra["attention_kernel"]
            assert kernel.startswith("plain" if mode == "plain" else "keras.ops.dot_product")
            if mode == "compile":
                continue  # torch.compile takes minutes on a small host; the code is eager's
            output = built.step()
            if isinstance(output, tuple | list):  # jax, tensorflow: with the gradients
                output, grads = output
                assert len(grads) == 3 and all(tuple(g.shape) == (2, 6, 2, 4) for g in grads)
            assert tuple(output.shape) == (2, 6, 2, 4)


@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_a_model_trains_and_infers_through_keras(plugin, catalogue, backend, model):
    small = {k: v for k, v in PARAMS.items() if k != "context" or model == "gpt"}
    mode = plugin.describe().capabilities[model].modes[0]
    logits = plugin.build(_spec(catalogue, model, "infer", mode, **small)).step()
    assert np.shape(logits) == (2, PARAMS["seq_len"], PARAMS["vocab"])
    built = plugin.build(_spec(catalogue, model, "train", mode, **small))
    first, second = float(built.step()), float(built.step())
    assert second < first  # the same batch: one SGD step lowers its loss
    assert built.settings.extra["attention_kernel"].startswith("keras.ops.dot_product_attention")


def _greedy_by_forward_passes(model, prompt: np.ndarray, new_tokens: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    tokens, chosen = prompt, []
    for _ in range(new_tokens):
        logits = keras.ops.convert_to_numpy(model(keras.ops.convert_to_tensor(tokens, "int32")))
        chosen.append(logits[:, -1].argmax(-1))
        tokens = np.concatenate([tokens, chosen[-1][:, None]], axis=1)
    return np.stack(chosen, axis=1)


def test_generation_on_the_kv_cache_gives_greedy_decodings_tokens(plugin, backend):
    """In the backend's default mode; in each of its modes with FWBENCH_FULL=1 (`make
    test-full`): torch.compile's traces of the cache's steps took 50 of this test's 55 s of CPU
    on an AMD EPYC (family 25), and every mode's attention kernel is checked above."""
    net = _net("gpt")
    weights.load(net, _random_weights(net))
    prompt = np.random.default_rng(5).integers(0, PARAMS["vocab"], (2, 4))
    expected = _greedy_by_forward_passes(net.model, prompt, 6)
    params = {**PARAMS, "prompt_len": 4, "new_tokens": 6}
    on_cpu = make_backend(backend, "cpu", 1)
    modes = plugin.describe().capabilities["generate"].modes
    for mode in modes if FULL else modes[:1]:
        steps, run = generation.build_generation(
            params, 2, 0, on_cpu, mode, net.model, prompt, keep_gaps=True
        )
        steps.generate()
        steps.generate()  # a second generation starts over
        assert np.array_equal(np.stack(run.tokens, axis=1), expected), mode
        assert np.all(np.stack(run.gaps, axis=1) >= 0)


def test_generate_is_offered_for_inference_with_its_cache_settings(plugin, catalogue, backend):
    capability = plugin.describe().capabilities["generate"]
    assert capability.phases == ("infer",)
    assert capability.modes == plugin.describe().capabilities["gpt"].modes
    small = {"layers": 1, "hidden": 8, "heads": 2, "vocab": 11, "prompt_len": 3, "new_tokens": 4}
    built = plugin.build(_spec(catalogue, "generate", "infer", capability.modes[0], **small))
    assert built.generation is not None and built.generation.decode_steps == 3
    assert tuple(np.shape(built.step())) == (2,)
    extra = built.settings.extra
    assert extra["kv_cache_allocated_bytes"] == str(2 * 1 * 2 * 7 * 8 * 4)
    assert "preallocated for 7 positions" in extra["kv_cache"]
    assert extra["attention_kernel"].startswith("keras.ops.dot_product_attention")
    with pytest.raises(UnsupportedWorkload, match="no phase 'train'"):
        plugin.build(_spec(catalogue, "generate", "train", capability.modes[0], **small))
    plain = dataclasses.replace(
        _spec(catalogue, "generate", "infer", capability.modes[0], **small), mode="plain"
    )
    with pytest.raises(UnsupportedWorkload, match="no mode 'plain'"):
        plugin.build(plain)


def test_equivalence_runs_a_transformer_case_with_generation(plugin):
    from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec

    weights_ = plugin.canonical_weights("gpt", 0, PARAMS)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, PARAMS["vocab"], (2, PARAMS["seq_len"]))
    labels = rng.integers(0, PARAMS["vocab"], (2, PARAMS["seq_len"]))
    case = EquivalenceCase(
        "gpt", weights_, tokens, labels, OptimizerSpec(0.01, 0.9), PARAMS, new_tokens=4
    )
    result = plugin.equivalence(case)
    assert result.param_count == sum(v.size for v in weights_.values())
    assert result.eval_logits.shape == (2, PARAMS["seq_len"], PARAMS["vocab"])
    assert result.loss_after < result.loss_before
    assert result.generated is not None and result.generated.shape == (2, 4)
    assert result.generated.dtype == np.int64
    assert result.generated_gaps is not None and (result.generated_gaps >= 0).all()
