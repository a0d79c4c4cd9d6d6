"""The openvino plugin's transformers, in the openvino-cpu environment: the onnxruntime
plugin's graphs compiled by OpenVINO give bert's and gpt's logits as NumPy computes them
(tests/numpy_transformers.py, float64) in float32 (INFERENCE_PRECISION_HINT f32: on this
host's AVX-512 BF16 OpenVINO's default, bf16, put them 3% of their scale from torch's), greedy
generation on the explicit KV cache gives a cache-free recomputation's tokens, and the cells
carry the settings their rows need. Small graphs compile on one thread a stream (OpenVINO
2026.4.1 crashed there before transformer_graphs.residual_linear)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from fwbench.onnxruntime_plugin import greedy_loop
from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.openvino_plugin import generation
from fwbench.openvino_plugin.plugin import OpenVinoPlugin
from fwbench.runtime.architectures import transformer_config
from fwbench.runtime.plugin import PluginContext, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec
from fwbench.spec import load_catalogue

sys.path.insert(0, str(Path(__file__).parents[1]))  # numpy_transformers
import numpy_transformers as reference

CATALOGUE = load_catalogue()
SMALL = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 40, "context": 24, "seq_len": 7}
GENERATE = {**SMALL, "prompt_len": 5, "new_tokens": 8}
RTOL = 1e-5


@pytest.fixture(scope="module")
def plugin() -> OpenVinoPlugin:
    return OpenVinoPlugin(PluginContext(device="cpu", threads=1))


def cell(name: str, batch: int = 2, threads: int = 0, **params: int) -> WorkloadSpec:
    workload = CATALOGUE.get(name)
    resolved = workload.resolve_params({k: v for k, v in params.items() if k in workload.params})
    return WorkloadSpec(workload, "infer", batch, "float32", resolved, threads, 0, "latency")


def far_weights(model: str) -> dict[str, np.ndarray]:
    weights = tg.canonical_weights(model, 3, SMALL)
    return {k: v * 4 if v.ndim == 2 and "embeddings" not in k else v for k, v in weights.items()}


@pytest.mark.parametrize("model", ["bert", "gpt"])
def test_equivalence_gives_numpys_logits_in_float32(plugin, model):
    weights, config = far_weights(model), transformer_config(model, SMALL)
    tokens = np.random.default_rng(1).integers(0, SMALL["vocab"], (3, SMALL["seq_len"]))
    params = CATALOGUE.get(model).resolve_params({k: SMALL[k] for k in SMALL if k != "context"})
    if model == "gpt":
        params = {**params, "context": SMALL["context"]}
    case = EquivalenceCase(model, weights, tokens, tokens, OptimizerSpec(0.01, 0.9), params)
    result = plugin.equivalence(case)
    assert (result.loss_before, result.loss_after, result.generated) == (None, None, None)
    compute = reference.bert_logits if model == "bert" else reference.gpt_logits
    expected = compute(weights, tokens, config)
    scale = float(np.abs(expected).max())
    assert float(np.abs(result.eval_logits - expected).max()) <= RTOL * scale


def test_greedy_generation_on_the_cache_gives_the_cache_free_tokens_every_time():
    weights, config = far_weights("gpt"), transformer_config("gpt", GENERATE)
    prompt = np.random.default_rng(2).integers(0, SMALL["vocab"], (3, GENERATE["prompt_len"]))
    run = generation.build(GENERATE, 0, 0, "latency", 1, weights, prompt, keep_gaps=True)
    steps = run.steps(GENERATE["new_tokens"])
    expected, gaps = reference.greedy(weights, prompt, config, GENERATE["new_tokens"])
    for _ in range(2):
        steps.generate()
        tokens, found_gaps = greedy_loop.generated(run.buffers)
        np.testing.assert_array_equal(tokens, expected)
        np.testing.assert_allclose(found_gaps, gaps, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["attention", "bert", "gpt"])
def test_a_transformer_cell_steps_in_float32_and_names_its_attention(plugin, name):
    built = plugin.build(cell(name, **SMALL, head_dim=4, causal=1))
    built.step()
    extra = built.settings.extra
    assert extra["inference_precision_hint"] == "f32"
    assert extra["attention_kernel"].startswith(tg.ATTENTION_KERNEL + "; OpenVINO's CPU layers:")


def test_a_generate_cell_runs_its_parts_and_reports_its_cache(plugin):
    built = plugin.build(cell("generate", **GENERATE))
    assert built.generation is not None
    assert built.generation.decode_steps == GENERATE["new_tokens"] - 1
    first = np.array(built.generation.generate(), copy=True)
    np.testing.assert_array_equal(built.generation.generate(), first)
    extra = built.settings.extra
    length = GENERATE["prompt_len"] + GENERATE["new_tokens"]
    assert int(extra["kv_cache_allocated_bytes"]) == 2 * 2 * 2 * length * 16 * 4
    assert "explicit, preallocated" in extra["kv_cache"]
    assert "not its stateful make_stateful model" in extra["kv_cache"]
    assert extra["inference_precision_hint"] == "f32"


@pytest.mark.parametrize(("threads", "mode"), [(1, "latency"), (0, "throughput")])
def test_small_graphs_compile_on_one_thread_a_stream(plugin, threads, mode):
    """transformer_graphs.residual_linear: a bias in the Gemm made OpenVINO 2026.4.1 crash
    compiling these (one thread; "throughput" on two CPUs runs one a stream)."""
    for name in ("bert", "gpt", "generate"):
        spec = dataclasses.replace(cell(name, batch=1, threads=threads, **GENERATE), mode=mode)
        built = plugin.build(spec)
        if built.generation is not None:
            built.generation.generate()
        else:
            built.step()
