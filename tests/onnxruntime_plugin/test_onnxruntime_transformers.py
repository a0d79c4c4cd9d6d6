"""The onnxruntime plugin's transformers, in the onnxruntime-cpu environment: canonical weight
names and shapes as tests/equivalence/transformer_shapes.json (Hugging Face's), the catalogue's
parameter count, bert's and gpt's logits and the attention op against NumPy
(tests/numpy_transformers.py, float64), greedy generation on the KV cache giving the tokens of
a cache-free recomputation, and the cells the runtime builds with the settings their rows
carry. Equality with torch itself is tests/equivalence/test_transformer_equivalence.py's."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fwbench.onnxruntime_plugin import export, generation, greedy_loop, session
from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.onnxruntime_plugin.plugin import OnnxRuntimePlugin
from fwbench.runtime import onnx_flops
from fwbench.runtime.architectures import transformer_config, transformer_parameters
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec
from fwbench.spec import load_catalogue
from fwbench.spec.model_files import TensorInfo

sys.path.insert(0, str(Path(__file__).parents[1]))  # numpy_transformers
import numpy_transformers as reference

CATALOGUE = load_catalogue()
SHAPES = json.loads((Path(__file__).parents[1] / "equivalence/transformer_shapes.json").read_text())
SMALL = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 40, "context": 24, "seq_len": 7}
GENERATE = {**SMALL, "prompt_len": 5, "new_tokens": 8}
RTOL = 1e-5  # of the logits' scale, as the equivalence tests


@pytest.fixture(scope="module")
def plugin() -> OnnxRuntimePlugin:
    return OnnxRuntimePlugin(PluginContext(device="cpu", threads=1))


def cell(name: str, batch: int = 2, **params: int) -> WorkloadSpec:
    workload = CATALOGUE.get(name)
    resolved = workload.resolve_params({k: v for k, v in params.items() if k in workload.params})
    return WorkloadSpec(workload, "infer", batch, "float32", resolved, 0, 0, "all")


def far_weights(model: str) -> dict[str, np.ndarray]:
    """Seeded weights with dense layers x4 (far from a fresh model's, as the equivalence
    test's), so that a wrong epsilon or GELU shows in the logits."""
    weights = tg.canonical_weights(model, 3, SMALL)
    return {k: v * 4 if v.ndim == 2 and "embeddings" not in k else v for k, v in weights.items()}


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.abs(expected).max())
    assert float(np.abs(actual - expected).max()) <= RTOL * scale


@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_canonical_weights_are_hugging_faces_names_and_shapes(model):
    weights = tg.canonical_weights(model, 0, SHAPES["params"])
    assert {k: list(v.shape) for k, v in weights.items()} == SHAPES[model]
    count = sum(v.size for v in tg.canonical_weights(model, 0, SMALL).values())
    assert count == transformer_parameters(transformer_config(model, SMALL))


@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_the_logits_of_every_position_are_numpys(model):
    weights, config = far_weights(model), transformer_config(model, SMALL)
    tokens = np.random.default_rng(1).integers(0, SMALL["vocab"], (3, SMALL["seq_len"]))
    graph = tg.build_transformer(model, SMALL, weights)
    logits = ort.InferenceSession(graph.serialized).run(None, {"input": tokens})[0]
    expected = (reference.bert_logits if model == "bert" else reference.gpt_logits)(
        weights, tokens, config
    )
    assert_close(logits, expected)


@pytest.mark.parametrize("causal", [0, 1])
def test_the_attention_op_is_numpys_softmax_attention(causal):
    params = {"heads": 2, "seq_len": 6, "head_dim": 4, "causal": causal}
    graph = tg.build_attention(params, 2)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 6, 4), dtype=np.float32) for _ in range(3))
    k_t = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
    out = ort.InferenceSession(graph.serialized).run(None, {"q": q, "k_t": k_t, "v": v})[0]

    def heads_last(x: np.ndarray) -> np.ndarray:  # (batch, heads, seq, d) -> (batch, seq, hidden)
        return x.transpose(0, 2, 1, 3).reshape(2, 6, 8).astype(np.float64)

    expected = reference.attention(*map(heads_last, (q, k, v)), heads=2, causal=bool(causal))
    assert_close(out, expected.reshape(2, 6, 2, 4).transpose(0, 2, 1, 3))


def test_greedy_generation_on_the_cache_gives_the_cache_free_tokens_every_time():
    weights, config = far_weights("gpt"), transformer_config("gpt", GENERATE)
    prompt = np.random.default_rng(2).integers(0, SMALL["vocab"], (3, GENERATE["prompt_len"]))
    run = generation.build(GENERATE, 0, 0, session.CPU, "all", 1, 0, weights, prompt, True)
    steps = run.steps(GENERATE["new_tokens"])
    assert steps.decode_steps == GENERATE["new_tokens"] - 1
    expected, gaps = reference.greedy(weights, prompt, config, GENERATE["new_tokens"])
    assert gaps.min() > 1e-3 * np.abs(gaps).max()  # no near-tie in this case
    for _ in range(2):  # a second generation starts over from the prompt
        steps.generate()
        tokens, found_gaps = greedy_loop.generated(run.buffers)
        np.testing.assert_array_equal(tokens, expected)
        np.testing.assert_allclose(found_gaps, gaps, rtol=1e-3, atol=1e-4)


def test_a_decode_step_past_the_cache_is_refused():
    run = generation.build(GENERATE, 1, 0, session.CPU, "all", 1, 0)
    steps = run.steps(GENERATE["new_tokens"])
    steps.generate()
    steps.decode()  # the cache's last position: prompt + new_tokens - 1 written
    with pytest.raises(RuntimeError, match="all filled"):
        steps.decode()


@pytest.mark.parametrize("name", ["attention", "bert", "gpt"])
def test_a_transformer_cell_steps_and_names_its_attention(plugin, name):
    params = {**SMALL, "head_dim": 4, "causal": 1}
    built = plugin.build(cell(name, **params))
    built.step()
    assert built.settings.extra["attention_kernel"] == tg.ATTENTION_KERNEL
    assert built.settings.layout == ""
    assert ("attention_layout" in built.settings.extra) is (name == "attention")


def test_a_generate_cell_runs_its_parts_and_reports_its_cache(plugin):
    built = plugin.build(cell("generate", batch=2, **GENERATE))
    assert built.generation is not None
    assert built.generation.decode_steps == GENERATE["new_tokens"] - 1
    first = np.array(built.generation.generate(), copy=True)
    np.testing.assert_array_equal(built.generation.generate(), first)
    extra = built.settings.extra
    config = transformer_config("gpt", GENERATE)
    length = GENERATE["prompt_len"] + GENERATE["new_tokens"]
    assert int(extra["kv_cache_allocated_bytes"]) == 2 * config.layers * 2 * length * 16 * 4
    assert "explicit, preallocated for 13 positions" in extra["kv_cache"]
    assert "IO binding" in extra["kv_cache"] and "never the cache" in extra["kv_cache"]
    assert extra["attention_kernel"] == tg.ATTENTION_KERNEL


def test_describe_offers_the_transformers_and_refuses_only_training(plugin):
    description = plugin.describe()
    assert {"attention", "bert", "gpt", "generate"} <= set(description.capabilities)
    assert set(description.unsupported_reasons) == {"*/train"}


def test_on_cuda_generate_is_refused_with_its_reason(plugin):
    on_cuda = dataclasses.replace(plugin.device, ort_device="cuda")
    cuda_plugin = object.__new__(OnnxRuntimePlugin)
    cuda_plugin.__dict__.update(plugin.__dict__, device=on_cuda)
    assert "generate" not in cuda_plugin.describe().capabilities
    with pytest.raises(UnsupportedWorkload, match="host buffers"):
        cuda_plugin.build(cell("generate", **GENERATE))


def test_equivalence_gives_logits_and_generated_tokens(plugin):
    weights = far_weights("gpt")
    prompt = np.random.default_rng(2).integers(0, SMALL["vocab"], (3, GENERATE["prompt_len"]))
    params = CATALOGUE.get("gpt").resolve_params({k: SMALL[k] for k in SMALL})
    case = EquivalenceCase("gpt", weights, prompt, prompt, OptimizerSpec(0.01, 0.9), params, 8)
    result = plugin.equivalence(case)
    assert (result.loss_before, result.loss_after) == (None, None)
    assert result.eval_logits.shape == (3, GENERATE["prompt_len"], SMALL["vocab"])
    config = transformer_config("gpt", SMALL)
    expected, _ = reference.greedy(weights, prompt, config, 8)
    assert result.generated is not None and result.generated_gaps is not None
    np.testing.assert_array_equal(result.generated, expected)
    assert result.generated_gaps.shape == (3, 8)


def test_the_export_script_writes_a_transformer_the_flop_counter_counts(tmp_path):
    out = tmp_path / "gpt.onnx"
    params = "layers=2,hidden=16,heads=4,vocab=40,context=24,seq_len=7"
    assert export.main(["gpt", "--out", str(out), "--params", params]) == 0
    tokens = np.zeros((2, 7), np.int64)
    logits = ort.InferenceSession(str(out)).run(None, {"input": tokens})[0]
    assert logits.shape == (2, 7, 40)
    counted = onnx_flops.count(str(out), [TensorInfo("input", (2, 7), "int64")])
    assert counted.flops > 0 and not counted.not_counted
