"""The TensorFlow transformers: attention, bert, gpt and generate. Parameter counts against
the architecture's and the catalogue's formulas, Hugging Face names and layouts, every
workload x phase x mode at small shapes, the attention op and the masked loss against numpy,
and greedy generation: the same tokens in every mode, equal to the argmax of a full forward
pass over the prompt and the generated tokens. Runs inside the tf-mkl / tf-eigen agent
environment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

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
from fwbench.tf_plugin import generation, transformers
from fwbench.tf_plugin.plugin import TensorFlowPlugin
from fwbench.tf_plugin.training import MODES
from fwbench.tf_plugin.transformer_layers import (
    ATTENTION_KERNEL,
    attend,
    causal_mask,
    example_batch,
    language_model_loss,
)

CATALOGUE = load_catalogue()
GPT = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 37, "context": 24, "seq_len": 8}
BERT = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 37, "seq_len": 8}
GENERATE = {**{k: v for k, v in GPT.items() if k != "seq_len"}, "prompt_len": 5, "new_tokens": 6}
# PyTorch's state_dict at a tiny shape, checked in (tests/equivalence/transformer_shapes.json:
# the torch plugin's tests hold it to torch's own modules).
SHAPES_FILE = Path(__file__).parents[1] / "equivalence" / "transformer_shapes.json"
_LISTED = json.loads(SHAPES_FILE.read_text())
TINY = _LISTED["params"]
TORCH_NAMES = {
    model: {name: tuple(shape) for name, shape in _LISTED[model].items()}
    for model in ("bert", "gpt")
}
SMALL = {
    "attention": {"heads": 2, "seq_len": 6, "head_dim": 4, "causal": 1},
    "bert": BERT,
    "gpt": GPT,
    "generate": GENERATE,
}


@pytest.fixture(scope="module")
def plugin() -> TensorFlowPlugin:
    return TensorFlowPlugin(PluginContext(device="cpu"))


def spec(
    workload: str, phase: str = "infer", mode: str = "function", dtype: str = "float32"
) -> WorkloadSpec:
    w = CATALOGUE.get(workload)
    return WorkloadSpec(w, phase, 2, dtype, w.resolve_params(SMALL[workload]), 0, 0, mode)


def _cells() -> list[tuple[str, str, str]]:
    plugin_modes = {"generate": generation.GENERATE_MODES}
    return [
        (name, phase, mode)
        for name in SMALL
        for phase in CATALOGUE.get(name).phases
        for mode in plugin_modes.get(name, MODES)
    ]


def _scaled_weights(model: transformers.Transformer, seed: int) -> dict[str, np.ndarray]:
    """Canonical weights drawn large enough that greedy decoding has no near-ties: N(0, 1)
    embeddings, dense weights of unit gain, LayerNorm weights near 1 and small biases."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, array in model.store.export().items():
        shape = array.shape
        norm = "LayerNorm" in name or ".ln_" in name
        if norm and name.endswith("weight"):
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif "embeddings" in name or name.endswith(("wte.weight", "wpe.weight")):
            value = rng.standard_normal(shape)
        elif array.ndim == 2:
            value = 2 * rng.standard_normal(shape) / np.sqrt(shape[1])
        else:
            value = 0.1 * rng.standard_normal(shape)
        out[name] = value.astype(np.float32)
    return out


# ----------------------------------------------------------------------- names, shapes, counts


@pytest.mark.parametrize("model", ["bert", "gpt"])
@pytest.mark.parametrize(
    "shape",
    [
        {"layers": 1, "hidden": 8, "heads": 2, "vocab": 11, "context": 6, "seq_len": 4},
        {"layers": 3, "hidden": 48, "heads": 6, "vocab": 301, "context": 64, "seq_len": 16},
    ],
)
def test_parameter_counts_equal_the_architecture_and_the_catalogue(model, shape):
    workload = CATALOGUE.get(model)
    params = workload.resolve_params({k: v for k, v in shape.items() if k in workload.params})
    config = transformer_config(model, params)
    built = transformers.build_transformer(config)
    expected = transformer_parameters(config)
    assert built.store.param_count() == expected == param_count(built.store.export())
    assert evaluate_expression(workload.parameters, params) == expected


def test_canonical_weights_are_pytorchs_state_dict_names_shapes_and_order(plugin):
    for model, expected in TORCH_NAMES.items():
        workload = CATALOGUE.get(model)
        params = workload.resolve_params({k: v for k, v in TINY.items() if k in workload.params})
        weights = plugin.canonical_weights(model, 0, params)
        assert list(weights) == list(expected)  # no tied decoder or lm_head entry
        assert {k: v.shape for k, v in weights.items()} == expected
        assert all(v.dtype == np.float32 for v in weights.values())


def test_canonical_weights_round_trip_and_follow_the_seed(plugin):
    first = plugin.canonical_weights("gpt", 3, GPT)
    assert all(
        np.array_equal(v, plugin.canonical_weights("gpt", 3, GPT)[k]) for k, v in first.items()
    )
    model = transformers.build_transformer(transformer_config("gpt", GPT), seed=4)
    model.store.load(first)
    exported = model.store.export()
    assert all(np.array_equal(exported[k], v) for k, v in first.items())


# ------------------------------------------------------------------------ workloads and modes


@pytest.mark.parametrize(("workload", "phase", "mode"), _cells())
def test_every_transformer_workload_builds_and_steps_in_each_mode(plugin, workload, phase, mode):
    built = plugin.build(spec(workload, phase, mode))
    for _ in range(2):
        output = built.step()
        plugin.synchronize(output)
    arrays = [np.asarray(tf.cast(t, tf.float32)) for t in tf.nest.flatten(output)]
    assert arrays and all(np.isfinite(a).all() for a in arrays)
    extra = built.settings.extra
    assert built.settings.mode == mode and extra["jit_compile"] == str(mode == "xla").lower()
    assert extra["attention_kernel"] == ATTENTION_KERNEL
    if workload == "generate":
        assert built.generation is not None and built.generation.decode_steps == 5
        assert arrays[0].shape == (2,)


def test_capabilities_generate_infers_only_and_the_rest_train_too(plugin):
    capabilities = plugin.describe().capabilities
    assert capabilities["generate"].phases == ("infer",)
    assert capabilities["generate"].modes == generation.GENERATE_MODES
    for name in ("attention", "bert", "gpt"):
        assert capabilities[name].phases == ("train", "infer") and capabilities[name].modes == MODES


@pytest.mark.parametrize("workload", list(SMALL))
def test_an_unknown_mode_is_refused(plugin, workload):
    with pytest.raises(UnsupportedWorkload, match="mode"):
        plugin.build(spec(workload, mode="graph"))


def test_generate_refuses_training(plugin):
    with pytest.raises(UnsupportedWorkload, match="phase"):
        plugin.build(spec("generate", "train"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float64"])
def test_models_run_in_the_dtype_asked_for(plugin, dtype):
    built = plugin.build(spec("gpt", dtype=dtype))
    assert built.step().dtype == tf.as_dtype(dtype)
    assert built.settings.extra["dtype_policy"].startswith(dtype)
    assert float(plugin.build(spec("bert", "train", dtype=dtype)).step()) > 0


def test_training_steps_lower_the_loss(plugin):
    built = plugin.build(spec("gpt", "train"))
    losses = [float(built.step()) for _ in range(5)]
    assert losses[-1] < losses[0]


def test_generate_reports_its_kv_cache(plugin):
    for mode in generation.GENERATE_MODES:
        extra = plugin.build(spec("generate", mode=mode)).settings.extra
        length = GENERATE["prompt_len"] + GENERATE["new_tokens"]
        assert extra["kv_cache"].startswith(f"preallocated for {length} positions")
        assert ("masked" in extra["kv_cache"]) == (mode != "eager")
        elements = 2 * GENERATE["layers"] * 2 * length * GENERATE["hidden"]  # batch 2
        assert extra["kv_cache_allocated_bytes"] == str(4 * elements)


# ------------------------------------------------------------------------- numerics


def test_attention_equals_numpy_softmax_attention_causal_and_not():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    for causal in (False, True):
        scores = q @ k.transpose(0, 1, 3, 2) / 2.0
        if causal:
            scores = np.where(np.tril(np.ones((5, 5), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        expected = weights / weights.sum(-1, keepdims=True) @ v
        seen = causal_mask(5, 5) if causal else None
        np.testing.assert_allclose(attend(*map(tf.constant, (q, k, v)), seen), expected, rtol=1e-10)


def test_the_loss_is_the_mean_over_labelled_positions_only():
    config = transformer_config("bert", BERT)
    batch = example_batch(config, 2, 8, 0, "/CPU:0")
    labels = batch.labels.numpy()
    kept = np.zeros(8, bool)
    kept[list(mlm_positions(8))] = True
    assert (labels[:, ~kept] == IGNORED_LABEL).all() and (labels[:, kept] >= 0).all()
    logits = np.random.default_rng(1).standard_normal((2, 8, BERT["vocab"]))
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    rows, cols = np.nonzero(labels != IGNORED_LABEL)
    expected = -log_softmax[rows, cols, labels[rows, cols]].mean()
    loss = language_model_loss(tf.constant(logits), batch.labels)
    assert loss.dtype == tf.float32 and float(loss) == pytest.approx(expected, rel=1e-6)


def test_generation_agrees_between_modes_and_with_the_full_forward():
    config = transformer_config("gpt", GPT)
    model = transformers.build_transformer(config)
    model.store.load(_scaled_weights(model, 0))
    prompt = np.random.default_rng(2).integers(0, GPT["vocab"], (3, GENERATE["prompt_len"]))
    tokens = {}
    for mode in generation.GENERATE_MODES:
        steps, run = generation.build_generation(
            GENERATE, 3, tf.float32, 0, "/CPU:0", mode, model, prompt, keep_gaps=True
        )
        for _ in range(2):  # the second generation starts over on the same cache
            steps.generate()
        tokens[mode] = np.stack([t.numpy() for t in run.tokens], axis=1)
        assert tokens[mode].shape == (3, GENERATE["new_tokens"])
        assert np.stack([g.numpy() for g in run.gaps]).min() > 1e-3  # no near-tie
        if run.static:  # one trace for every position
            assert run._decode.experimental_get_tracing_count() == 1
    for mode in generation.GENERATE_MODES[1:]:
        np.testing.assert_array_equal(tokens[mode], tokens[generation.GENERATE_MODES[0]])
    generated = tokens[generation.GENERATE_MODES[0]]
    sequence = np.concatenate([prompt, generated[:, :-1]], axis=1)
    logits = model(tf.constant(sequence), training=False).numpy()
    start = GENERATE["prompt_len"] - 1
    np.testing.assert_array_equal(logits[:, start:].argmax(-1), generated)


def test_equivalence_runs_a_gpt_case_with_generation(plugin):
    weights = plugin.canonical_weights("gpt", 0, GPT)
    rng = np.random.default_rng(0)
    inputs = rng.integers(0, GPT["vocab"], (2, GPT["seq_len"]))
    labels = rng.integers(0, GPT["vocab"], (2, GPT["seq_len"]))
    case = EquivalenceCase("gpt", weights, inputs, labels, OptimizerSpec(0.01, 0.9), GPT, 4)
    result = plugin.equivalence(case)
    assert result.param_count == transformer_parameters(transformer_config("gpt", GPT))
    assert result.eval_logits.shape == (2, GPT["seq_len"], GPT["vocab"])
    assert result.generated is not None and result.generated.shape == (2, 4)
    assert result.generated.dtype == np.int64 and result.generated_gaps.shape == (2, 4)
    assert result.loss_after < result.loss_before
