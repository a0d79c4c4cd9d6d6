"""Tests for the JAX plugin's transformers (attention, bert, gpt, generate): parameter counts
against the catalogue's formula, checkpoint names and shapes, every workload built and stepped
in each of its modes, generation against the full forward pass, the attention op's two modes
against each other, GPT-2 against a numpy reference. Runs inside the jax-cpu agent environment
(no torch there: tests/equivalence and the brief's cross-check compare with PyTorch)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fwbench.jax_plugin import transformer_steps
from fwbench.jax_plugin.plugin import JaxPlugin
from fwbench.jax_plugin.transformers import Transformer, param_specs
from fwbench.runtime.architectures import (
    IGNORED_LABEL,
    mlm_positions,
    transformer_config,
    transformer_parameters,
)
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec, param_count
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import evaluate_expression

CATALOGUE = load_catalogue()
SMALL = {"layers": 2, "hidden": 32, "heads": 4, "vocab": 50, "context": 24, "seq_len": 8}
GENERATE = {**SMALL, "prompt_len": 5, "new_tokens": 6}
ATTENTION = {"heads": 2, "seq_len": 7, "head_dim": 8}
# PyTorch's state_dict at a tiny shape, checked in (tests/equivalence/transformer_shapes.json:
# the torch plugin's tests hold it to torch's own modules).
SHAPES_FILE = Path(__file__).parents[1] / "equivalence" / "transformer_shapes.json"
_LISTED = json.loads(SHAPES_FILE.read_text())
TINY = _LISTED["params"]
TORCH_NAMES = {
    model: {name: tuple(shape) for name, shape in _LISTED[model].items()}
    for model in ("bert", "gpt")
}


@pytest.fixture(scope="module")
def plugin() -> JaxPlugin:
    return JaxPlugin(PluginContext(device="cpu"))


def spec(workload: str, phase: str, mode: str = "jit", dtype: str = "float32", **params: int):
    w = CATALOGUE.get(workload)
    resolved = w.resolve_params({k: v for k, v in params.items() if k in w.params})
    return WorkloadSpec(w, phase, 2, dtype, resolved, 0, 0, mode)


def _stepped(plugin: JaxPlugin, cell: WorkloadSpec) -> tuple[object, object]:
    built = plugin.build(cell)
    first = built.step()
    plugin.synchronize(first)
    second = built.step()
    plugin.synchronize(second)
    return first, second


# ------------------------------------------------------------------------ architecture facts


@pytest.mark.parametrize("given", [{}, SMALL], ids=["default", "small"])
@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_parameter_count_is_the_catalogue_formula(name, given):
    workload = CATALOGUE.get(name)
    params = workload.resolve_params({k: v for k, v in given.items() if k in workload.params})
    config = transformer_config(name, params)
    # Shapes only (jax.eval_shape): nothing of BERT-base is allocated.
    counted = sum(int(np.prod(s.shape)) for s in param_specs(config).values())
    assert counted == Transformer(config).trainable_count() == transformer_parameters(config)
    assert counted == int(evaluate_expression(workload.parameters, params))


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_canonical_weights_have_the_checkpoint_names_and_shapes(plugin, name):
    params = CATALOGUE.get(name).resolve_params(
        {k: v for k, v in TINY.items() if k in CATALOGUE.get(name).params}
    )
    weights = plugin.canonical_weights(name, 0, params)
    assert {k: v.shape for k, v in weights.items()} == TORCH_NAMES[name]
    assert list(weights) == list(TORCH_NAMES[name])  # PyTorch's state_dict order
    assert all(v.dtype == np.float32 for v in weights.values())
    assert param_count(weights) == transformer_parameters(transformer_config(name, params))
    model = Transformer(transformer_config(name, params))
    again = model.to_canonical(model.from_canonical(weights))
    for key, value in weights.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)
    other = plugin.canonical_weights(name, 1, params)
    assert not np.array_equal(next(iter(other.values())), next(iter(weights.values())))


def test_synthetic_bert_labels_are_the_masked_positions_only():
    config = transformer_config("bert", SMALL)
    _, labels = transformer_steps.example_batch(config, 3, 20, jax.random.PRNGKey(0))
    labelled = np.flatnonzero(np.asarray(labels[0]) != IGNORED_LABEL)
    assert tuple(labelled) == mlm_positions(20)


# --------------------------------------------------------------------- workloads, end to end


def test_describe_offers_the_transformers_with_their_modes(plugin):
    capabilities = plugin.describe().capabilities
    assert capabilities["attention"].modes == ("jit", "plain")
    assert capabilities["bert"].modes == capabilities["gpt"].modes == ("jit",)
    assert capabilities["bert"].phases == ("train", "infer")
    assert capabilities["generate"].phases == ("infer",)
    assert capabilities["generate"].dtypes == ("float32", "bfloat16")


@pytest.mark.parametrize("phase", ["infer", "train"])
@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_bert_and_gpt_build_and_step(plugin, name, phase):
    cell = spec(name, phase, **SMALL)
    first, second = _stepped(plugin, cell)
    if phase == "infer":
        assert first.shape == (2, SMALL["seq_len"], SMALL["vocab"])
        assert np.isfinite(np.asarray(first)).all()
        np.testing.assert_array_equal(first, second)
    else:
        assert first.shape == () and first.dtype == jnp.float32 and np.isfinite(float(first))
        assert float(second) < float(first)  # the updated weights stayed in the loop
    extra = plugin.build(cell).settings.extra
    assert extra["attention_kernel"] == "jax.nn.dot_product_attention (xla)"


def test_bfloat16_transformers_keep_the_loss_in_float32(plugin):
    loss, _ = _stepped(plugin, spec("gpt", "train", dtype="bfloat16", **SMALL))
    assert loss.dtype == jnp.float32 and np.isfinite(float(loss))
    logits, _ = _stepped(plugin, spec("bert", "infer", dtype="bfloat16", **SMALL))
    assert logits.dtype == jnp.bfloat16


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("phase", ["infer", "train"])
def test_attention_modes_agree(plugin, phase, causal):
    outputs, kernels = {}, {}
    for mode in ("jit", "plain"):
        built = plugin.build(spec("attention", phase, mode, causal=causal, **ATTENTION))
        outputs[mode] = jax.tree.map(np.asarray, built.step())
        kernels[mode] = built.settings.extra["attention_kernel"]
    assert kernels == {
        "jit": "jax.nn.dot_product_attention (xla)",
        "plain": "plain: einsum, softmax, einsum (jit)",
    }
    for fused, plain in zip(*(jax.tree.leaves(outputs[m]) for m in ("jit", "plain")), strict=True):
        assert fused.shape == (2, ATTENTION["seq_len"], ATTENTION["heads"], ATTENTION["head_dim"])
        np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5)


def test_attention_is_softmax_of_scaled_scores(plugin):
    built = plugin.build(spec("attention", "infer", causal=1, **ATTENTION))
    q, k, v = (np.asarray(a, np.float64) for a in built.step.__wrapped__.args)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(ATTENTION["head_dim"])
    scores = np.where(np.tri(ATTENTION["seq_len"], dtype=bool), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    expected = np.einsum("bhqk,bkhd->bqhd", weights / weights.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(built.step(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("workload", "phase", "mode", "params"),
    [
        ("attention", "infer", "eager", ATTENTION),
        ("bert", "infer", "plain", SMALL),
        ("gpt", "train", "compile", SMALL),
        ("generate", "infer", "plain", GENERATE),
        ("generate", "train", "jit", GENERATE),
    ],
)
def test_an_unknown_mode_or_phase_is_refused(plugin, workload, phase, mode, params):
    with pytest.raises(UnsupportedWorkload):
        plugin.build(spec(workload, phase, mode, **params))


# ------------------------------------------------------------------------------- generation


def test_generation_is_the_argmax_of_the_full_forward_and_compiles_once(plugin):
    built = plugin.build(spec("generate", "infer", **GENERATE))
    steps = built.generation
    assert steps is not None and steps.decode_steps == GENERATE["new_tokens"] - 1
    extra = built.settings.extra
    length = GENERATE["prompt_len"] + GENERATE["new_tokens"]
    assert extra["kv_cache"] == (
        f"preallocated for {length} positions; each step attends over the whole cache, "
        "the unfilled part masked (static shapes)"
    )
    # keys and values, every layer, batch 2, float32
    assert int(extra["kv_cache_allocated_bytes"]) == 2 * 2 * 2 * length * 32 * 4
    runs = []
    for _ in range(2):  # a second generation starts over from the prompt
        tokens = [steps.prefill()] + [steps.decode() for _ in range(steps.decode_steps)]
        runs.append(np.stack([np.asarray(t) for t in tokens], axis=1))
    np.testing.assert_array_equal(runs[0], runs[1])
    run = steps.prefill.__wrapped__.__self__  # the Generator (white-box)
    assert run.compilations() == (1, 1)
    sequence = np.concatenate([np.asarray(run.prompt), runs[0]], axis=1)
    logits = run.model.logits(run.params, jnp.asarray(sequence[:, :-1]))
    greedy = np.argmax(np.asarray(logits), axis=-1)[:, GENERATE["prompt_len"] - 1 :]
    np.testing.assert_array_equal(greedy, runs[0])


# ------------------------------------------------------------------------- reference methods


def np_gpt(w: dict[str, np.ndarray], tokens: np.ndarray, layers: int, heads: int) -> np.ndarray:
    """GPT-2 from canonical (Hugging Face names, (out, in)) weights, in numpy float64."""

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    seq = tokens.shape[1]
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:seq]
    for i in range(layers):
        p = f"transformer.h.{i}"
        q, k, v = np.split(linear(norm(x, f"{p}.ln_1"), f"{p}.attn.c_attn"), 3, axis=-1)
        q, k, v = (a.reshape(*a.shape[:2], heads, -1) for a in (q, k, v))
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        scores = np.where(np.tri(seq, dtype=bool), scores, -np.inf)
        att = np.exp(scores - scores.max(-1, keepdims=True))
        out = np.einsum("bhqk,bkhd->bqhd", att / att.sum(-1, keepdims=True), v)
        x = x + linear(out.reshape(x.shape), f"{p}.attn.c_proj")
        h = linear(norm(x, f"{p}.ln_2"), f"{p}.mlp.c_fc")
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
        x = x + linear(h, f"{p}.mlp.c_proj")
    return norm(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


def test_gpt_equivalence_matches_numpy_and_generates_greedily(plugin):
    params = CATALOGUE.get("gpt").resolve_params(SMALL)
    weights = plugin.canonical_weights("gpt", 2, params)
    weights = {k: v.astype(np.float64) for k, v in weights.items()}
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, SMALL["vocab"], (2, SMALL["seq_len"]))
    labels = rng.integers(0, SMALL["vocab"], tokens.shape)
    case = EquivalenceCase(
        "gpt", weights, tokens, labels, OptimizerSpec(0.01, 0.9), params=params, new_tokens=4
    )
    result = plugin.equivalence(case)
    expected = np_gpt(weights, tokens, SMALL["layers"], SMALL["heads"])
    np.testing.assert_allclose(result.eval_logits, expected, rtol=1e-4, atol=1e-4)
    assert result.param_count == transformer_parameters(transformer_config("gpt", params))
    assert result.loss_after < result.loss_before
    assert result.generated.shape == result.generated_gaps.shape == (2, 4)
    assert result.generated.dtype == np.int64 and (result.generated_gaps >= 0).all()
    np.testing.assert_array_equal(result.generated[:, 0], expected[:, -1].argmax(-1))


def test_bert_loss_averages_the_labelled_positions_only(plugin):
    params = CATALOGUE.get("bert").resolve_params(
        {k: v for k, v in SMALL.items() if k in CATALOGUE.get("bert").params}
    )
    weights = plugin.canonical_weights("bert", 0, params)
    tokens = np.random.default_rng(1).integers(0, SMALL["vocab"], (2, SMALL["seq_len"]))
    labels = np.full(tokens.shape, IGNORED_LABEL)
    labels[:, 3] = [4, 7]
    case = EquivalenceCase("bert", weights, tokens, labels, OptimizerSpec(0.01, 0.9), params)
    result = plugin.equivalence(case)
    logits = result.eval_logits[:, 3].astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(result.loss_before, -log_softmax[[0, 1], [4, 7]].mean(), rtol=1e-5)
    assert result.generated is None and result.loss_after < result.loss_before
