"""The same transformer in every framework: bert and gpt built by the torch, TensorFlow, JAX,
Paddle, ONNX Runtime and OpenVINO plugins, by Keras on each of its backends (one definition,
three backends' ops) and gpt by llama.cpp, each in its own agent environment and process, from
the same canonical weights.

1. Architecture: each framework's canonical weight names and shapes for a fresh model equal
   PyTorch's (Hugging Face's checkpoint names), at the shape below.
2. Numerics: weights exported once from PyTorch, made far from a fresh model's (dense weights
   x4, embeddings N(0, 1), LayerNorm scale 1 + N(0, 0.1) and shift N(0, 0.1), so that a wrong
   epsilon, a swapped GELU or a transposed kernel shows), are loaded by every framework; the
   logits of every position must agree within LOGIT_RTOL of their scale, the language-model
   loss within LOSS_RTOL, and one SGD-momentum step must move it by the same amount within
   DELTA_RTOL of the move (the tolerances of tests/equivalence/test_equivalence.py); an
   inference-only framework (ONNX Runtime, OpenVINO, llama.cpp) has no step to compare.
3. Generation: greedy decoding of NEW_TOKENS tokens from the same prompt and weights, through
   each plugin's own KV-cache path (the generate workload's), must give the same tokens at
   every step. A step whose top two logits (in PyTorch) lie within the logit tolerance of
   each other is a near-tie no test can hold a framework to: the comparison stops there and
   says so (too early a stop fails the test), never passes it silently.
4. llama.cpp (llamacpp-cpu) builds gpt only. Its float32 logits miss LOGIT_RTOL by one op,
   ggml's CPU GELU, which reads a float16 table (GGML_GELU_FP16, compiled in: no build option
   or context setting turns it off); that test is expected to fail (strict xfail, the reason
   named) and a second one holds the logits to LLAMACPP_LOGIT_RTOL, the measured error with a
   margin (tests/llamacpp_plugin shows that the GELU is the whole difference). Its Q8_0
   variant (llamacpp-q8) is another computation: its agreement with PyTorch is printed and
   recorded, never held equal.
Small shapes keep it quick (CI). FLOPs need no test here: the catalogue charges every framework
the same formula, which tests/torch_plugin checks against PyTorch's own counter."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.runtime.architectures import IGNORED_LABEL, mlm_positions
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec
from fwbench.runtime.reference_cli import model_params, read_result, write_case

MODELS = ("bert", "gpt")
SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "context": 128, "seq_len": 16}
BATCH, NEW_TOKENS, MIN_STEPS = 3, 40, 32
OPTIMIZER = OptimizerSpec(learning_rate=0.01, momentum=0.9)
LOGIT_RTOL, LOSS_RTOL, DELTA_RTOL = 1e-5, 1e-4, 2e-2
MANIFESTS = discover_manifests(manifest_dirs())
PLUGINS = ("torch", "tensorflow", "jax", "keras", "paddle", "onnxruntime", "openvino", "llamacpp")
# Plugins whose equivalence builds gpt alone (reference.equivalence_models), and those whose
# equivalence runs inference only (equivalence_trains False).
GPT_ONLY = ("llamacpp",)
INFERENCE_ONLY = ("onnxruntime", "openvino", "llamacpp")
# llama.cpp's float32 logits: ggml's float16-table GELU (GGML_GELU_FP16) puts them 3.8e-4 of
# their scale from PyTorch's on this test's case (measured, llama-cpp-python 0.3.36 built for
# an AMD EPYC with AVX2); about twice that.
LLAMACPP_LOGIT_RTOL = 8e-4
LLAMACPP_GELU = (
    "ggml's CPU GELU rounds its input to float16 and reads a float16 table (GGML_GELU_FP16, "
    "defined in ggml-cpu/vec.h: no build option or context setting turns it off)"
)


def _compared() -> tuple[str, ...]:
    """The agents compared, by name: one representative per plugin, but Keras one per backend
    (its manifest's KERAS_BACKEND), as each runs the same Keras code on different ops."""
    found: dict[tuple[str, str], str] = {}
    for m in MANIFESTS.values():
        if m.representative and not m.requires_gpu and m.plugin in PLUGINS:
            found[m.plugin, m.env.get("KERAS_BACKEND", "")] = m.name
    return tuple(found.values())


COMPARED = _compared()
REFERENCE = next(agent for agent in COMPARED if MANIFESTS[agent].plugin == "torch")
OTHERS = tuple(agent for agent in COMPARED if agent != REFERENCE)
TRAINED = tuple(a for a in OTHERS if MANIFESTS[a].plugin not in INFERENCE_ONLY)
LLAMACPP = tuple(a for a in OTHERS if MANIFESTS[a].plugin == "llamacpp")
# Agents whose results are reported beside PyTorch's, never held equal (quantised weights).
REPORTED = tuple(name for name in ("llamacpp-q8",) if name in MANIFESTS)


def _models(agent: str) -> tuple[str, ...]:
    return ("gpt",) if MANIFESTS[agent].plugin in GPT_ONLY else MODELS


def _python(agent: str) -> Path:
    environment = environment_for(MANIFESTS[agent])
    environment.ensure()
    return environment.python


def _reference(agent: str, *args: str) -> None:
    """The agent's plugin's reference CLI with the agent's switches ([env]: Keras' backend)."""
    plugin = MANIFESTS[agent].plugin
    command = [str(_python(agent)), "-m", "fwbench.runtime.reference_cli", "--plugin", plugin]
    env = {**os.environ, **MANIFESTS[agent].env}
    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


def _shape_options() -> list[str]:
    return [f"--param={name}={value}" for name, value in SHAPE.items()]


def _far_from_fresh(weights: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    for name, array in weights.items():
        if "LayerNorm" in name or ".ln_" in name:  # LayerNorm scale and shift
            center = 1.0 if name.endswith("weight") else 0.0
            weights[name] = (center + rng.normal(0.0, 0.1, array.shape)).astype(np.float32)
        elif "embeddings" in name or name.endswith(("wte.weight", "wpe.weight")):
            weights[name] = rng.standard_normal(array.shape).astype(np.float32)
        elif array.ndim == 2:
            weights[name] = array * 4


def _case(model: str, weights: dict[str, np.ndarray], rng: np.random.Generator) -> EquivalenceCase:
    seq = SHAPE["seq_len"]
    tokens = rng.integers(0, SHAPE["vocab"], (BATCH, seq))
    labels = rng.integers(0, SHAPE["vocab"], (BATCH, seq))
    if model == "bert":  # the masked-LM positions only
        keep = np.zeros(seq, dtype=bool)
        keep[list(mlm_positions(seq))] = True
        labels = np.where(keep, labels, IGNORED_LABEL)
    params = model_params(model, SHAPE)
    new_tokens = NEW_TOKENS if model == "gpt" else 0
    return EquivalenceCase(model, weights, tokens, labels, OPTIMIZER, params, new_tokens)


@dataclass(frozen=True)
class Outcome:
    """What one agent's `fwbench-reference all` found."""

    shapes: dict[str, dict[str, list[int]]]  # a fresh model's weight shapes, by model
    results: dict[str, EquivalenceResult]  # by model


# Each agent's process imports its framework and builds its models once, for the shapes and the
# cases together; two at once keep both CPUs of a small CI host busy.
PARALLEL_AGENTS = 2


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """{agent: Outcome}: PyTorch's weights exported once and moved far from fresh, then one
    process per agent, two at a time."""
    root = tmp_path_factory.mktemp("transformers")
    exported = root / "w"
    _reference(
        REFERENCE,
        "export",
        "--models",
        ",".join(MODELS),
        *_shape_options(),
        "--out-dir",
        str(exported),
    )
    rng = np.random.default_rng(2026)
    cases = []
    for model in MODELS:
        with np.load(exported / f"{model}.npz") as data:
            weights = {k: data[k] for k in data.files}
        _far_from_fresh(weights, rng)
        write_case(root / f"{model}.npz", _case(model, weights, rng))
        cases.append(str(root / f"{model}.npz"))

    def run(agent: str) -> Outcome:
        out, models = root / agent, _models(agent)
        mine = [case for case in cases if Path(case).stem in models]
        shapes = ",".join(models)
        _reference(
            agent, "all", *mine, "--shapes-models", shapes, *_shape_options(), "--out-dir", str(out)
        )
        found = json.loads((out / "shapes.json").read_text())
        return Outcome(found, {m: read_result(out / f"{m}.npz") for m in models})

    agents = (*COMPARED, *REPORTED)
    with ThreadPoolExecutor(PARALLEL_AGENTS) as pool:
        return dict(zip(agents, pool.map(run, agents), strict=True))


@pytest.fixture(scope="module")
def shapes(outcomes: dict[str, Outcome]) -> dict[str, dict[str, dict[str, list[int]]]]:
    return {agent: outcome.shapes for agent, outcome in outcomes.items()}


@pytest.fixture(scope="module")
def results(outcomes: dict[str, Outcome]) -> dict[str, dict[str, EquivalenceResult]]:
    return {agent: outcome.results for agent, outcome in outcomes.items()}


@pytest.mark.parametrize("agent", OTHERS)
def test_the_same_weight_names_and_shapes(shapes, agent):
    assert shapes[agent] == {m: shapes[REFERENCE][m] for m in _models(agent)}


def _logit_error(results, agent: str, model: str) -> tuple[float, float]:
    """The largest |difference| from PyTorch's logits, and their scale."""
    expected, actual = results[REFERENCE][model], results[agent][model]
    assert actual.param_count == expected.param_count
    assert actual.eval_logits.shape == expected.eval_logits.shape == (BATCH, 16, 500)
    scale = float(np.abs(expected.eval_logits).max())
    return float(np.abs(actual.eval_logits - expected.eval_logits).max()), scale


def _logit_cells() -> list[object]:
    cells: list[object] = []
    for agent in OTHERS:
        for model in _models(agent):
            marks = ()
            if agent in LLAMACPP:  # the next test holds it to its measured error
                marks = (pytest.mark.xfail(reason=LLAMACPP_GELU, strict=True),)
            cells.append(pytest.param(agent, model, marks=marks, id=f"{model}-{agent}"))
    return cells


@pytest.mark.parametrize(("agent", "model"), _logit_cells())
def test_the_same_logits_at_every_position(results, agent, model):
    error, scale = _logit_error(results, agent, model)
    assert error <= LOGIT_RTOL * scale, f"max |diff| {error:.3g} vs logit scale {scale:.3g}"


@pytest.mark.parametrize("agent", LLAMACPP)
def test_llamacpp_logits_are_off_by_its_float16_gelu_only(results, agent):
    error, scale = _logit_error(results, agent, "gpt")
    print(f"{agent}: max |diff| {error:.3g} = {error / scale:.3g} of the logit scale")
    assert error <= LLAMACPP_LOGIT_RTOL * scale, f"{error / scale:.3g} of the scale"


@pytest.mark.parametrize("agent", REPORTED)
def test_a_quantized_variant_is_reported_not_held_equal(results, agent, record_property):
    """Q8_0 weights: the share of positions whose top logit is PyTorch's (teacher-forced, every
    position of the batch), the greedy tokens' share equal at the same step, and the largest
    logit error; recorded (junit properties) and printed. It must have run and mostly agree."""
    error, scale = _logit_error(results, agent, "gpt")
    expected, actual = results[REFERENCE]["gpt"], results[agent]["gpt"]
    top1 = float((expected.eval_logits.argmax(-1) == actual.eval_logits.argmax(-1)).mean())
    assert expected.generated is not None and actual.generated is not None
    tokens = float((expected.generated == actual.generated).mean())
    figures = {"top1_agreement": top1, "greedy_token_agreement": tokens}
    figures |= {"max_logit_error_of_scale": error / scale}
    for name, value in figures.items():
        record_property(f"{agent}.{name}", f"{value:.4g}")
    print(f"{agent}: " + ", ".join(f"{name} {value:.4g}" for name, value in figures.items()))
    assert top1 >= 0.5, f"{agent} agrees with PyTorch's top token at {top1:.0%} of positions"


@pytest.mark.parametrize("agent", TRAINED)
@pytest.mark.parametrize("model", MODELS)
def test_one_training_step_moves_the_loss_the_same_way(results, agent, model):
    expected, actual = results[REFERENCE][model], results[agent][model]
    assert actual.loss_before == pytest.approx(expected.loss_before, rel=LOSS_RTOL)
    expected_delta = expected.loss_after - expected.loss_before
    assert expected_delta < 0, "one SGD step on the batch should lower its loss"
    actual_delta = actual.loss_after - actual.loss_before
    assert actual_delta == pytest.approx(expected_delta, rel=DELTA_RTOL, abs=1e-6)


def agreeing_steps(reference: EquivalenceResult, other: EquivalenceResult, tolerance: float) -> int:
    """Steps from the first at which every sequence's token agrees, up to the first near-tie
    (a step whose top two logits lie within `tolerance` in the reference)."""
    assert reference.generated is not None and reference.generated_gaps is not None
    assert other.generated is not None
    for step in range(reference.generated.shape[1]):
        if (reference.generated_gaps[:, step] <= tolerance).any():
            return step  # a near-tie: tokens from here on are the framework's to choose
        if not np.array_equal(reference.generated[:, step], other.generated[:, step]):
            chosen, gaps = reference.generated[:, step], reference.generated_gaps[:, step]
            pytest.fail(
                f"step {step}: tokens {other.generated[:, step]} where torch chose {chosen} "
                f"(its top-two gaps {gaps})"
            )
    return reference.generated.shape[1]


@pytest.mark.parametrize("agent", OTHERS)
def test_greedy_generation_gives_the_same_tokens(results, agent):
    expected, actual = results[REFERENCE]["gpt"], results[agent]["gpt"]
    assert actual.generated is not None and actual.generated.shape == (BATCH, NEW_TOKENS)
    assert len(set(expected.generated.ravel().tolist())) > 5, "a varied sequence, not one token"
    tolerance = LOGIT_RTOL * float(np.abs(expected.eval_logits).max())
    steps = agreeing_steps(expected, actual, tolerance)
    assert steps >= MIN_STEPS, f"a near-tie at step {steps} stopped the comparison early"


def test_a_near_tie_stops_the_comparison_and_a_difference_fails_it():
    tokens = np.array([[1, 2, 3, 4]])
    reference = EquivalenceResult(
        0, np.zeros(1), 0.0, 0.0, tokens, np.array([[1.0, 1.0, 1e-9, 1.0]])
    )
    other = EquivalenceResult(0, np.zeros(1), 0.0, 0.0, np.array([[1, 2, 9, 9]]), None)
    assert agreeing_steps(reference, other, tolerance=1e-6) == 2
    with pytest.raises(pytest.fail.Exception, match="step 1: tokens"):
        agreeing_steps(
            reference,
            EquivalenceResult(0, np.zeros(1), 0.0, 0.0, np.array([[1, 5, 3, 4]]), None),
            1e-6,
        )
