"""The same model is the same in every framework: every catalogue model is built by each
plugin that declares "equivalence", in the environment of every agent that represents it (Keras
on one backend in `make test`, on each in `make test-full`), one process per agent, and
compared with PyTorch's.

1. Architecture: the canonical weight names and shapes of each framework's model equal
   PyTorch's (so parameter counts agree too), and PyTorch's match the checked-in
   tests/equivalence/canonical_shapes.json. A stepped model (below) proves it by loading
   PyTorch's weights: every plugin refuses a missing, unused or misshapen weight; the others
   by the names and shapes a fresh model exports (ResNet-50 in `make test`; VGG-16 and
   ResNet-152, the largest, in PyTorch only there, in every framework in `make test-full`).
2. Numerics (the models STEPPED names, one of each kind of building block: LeNet, ResNet-18,
   MobileNetV2, EfficientNet-B0 and the LSTM; all 8 with FWBENCH_FULL=1): weights exported
   once from PyTorch (BatchNorm statistics perturbed, so that they
   matter) are loaded by every framework; inference logits must agree within `LOGIT_RTOL` of
   the logits' scale, the training-mode loss within `LOSS_RTOL`, and one SGD-momentum step must
   move the loss by the same amount within `DELTA_RTOL` of the move (see docs/equivalence.md).
   Images are full size (224) at batch 4: at 64 pixels the last stages' BatchNorm normalises
   over 2x2 maps of 2 images, and one step's effect became chaotic (5-40% apart between
   frameworks whose logits agreed to 1e-6).
Each agent's process (`fwbench-reference all`) says what its plugin declares and covers, and
builds each model once: imported frameworks and built models are most of this test's time.
FLOPs need no test here: every framework is charged by the one catalogue formula, which
tests/torch_plugin checks against PyTorch's FlopCounterMode.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from stepped_models import JAX_CACHE, KERAS_MODELS_BACKEND, built, keras_models_on, stepped

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec
from fwbench.runtime.reference_cli import read_result, write_case

HERE = Path(__file__).parent
MODELS = (
    "lenet",
    "resnet18",
    "resnet50",
    "resnet152",
    "vgg16",
    "mobilenet_v2",
    "efficientnet_b0",
    "lstm",
)
# The numerics on every model cost most of `make test`'s equivalence time (weights of 138M and
# 60M parameters written, loaded and stepped by every framework, XLA compiling 152 layers):
# CI steps the models whose building blocks differ and checks the architecture of the others;
# `make test-full` steps all 8 (tests/stepped_models.py).
STEPPED = tuple(m for m in MODELS if stepped(m))
UNSTEPPED = tuple(m for m in MODELS if m not in STEPPED)
# Every agent that represents its plugin in the tests ([tests] in the manifests), by name;
# those whose plugin declares the "equivalence" capability are compared, on the models it
# covers (its `fwbench-reference all` says). torch-cpu is the reference the others must match.
MANIFESTS = discover_manifests(manifest_dirs())
AGENTS = tuple(m.name for m in MANIFESTS.values() if m.representative and not m.requires_gpu)
REFERENCE = "torch-cpu"
OTHERS = tuple(agent for agent in AGENTS if agent != REFERENCE)


# Keras builds its models by the same code on every backend: `make test` proves them on one
# (tests/stepped_models.py: torch, the quickest here, 21 s against keras-jax's 131 s and
# keras-tf's 74 s on an AMD EPYC family 25); `make test-full` (FWBENCH_FULL=1) on each, as the
# JAX and TensorFlow agents prove those backends.
def _runs(agent: str) -> bool:
    return keras_models_on(MANIFESTS[agent].env.get("KERAS_BACKEND"))


RUN = tuple(agent for agent in AGENTS if _runs(agent))


def _agent_param(agent: str) -> object:
    if _runs(agent):
        return agent
    why = (
        f"Keras' models are proven on keras-{KERAS_MODELS_BACKEND} in this run; `make test-full` "
        f"(FWBENCH_FULL=1) proves them on {agent}'s backend too"
    )
    return pytest.param(agent, marks=pytest.mark.skip(reason=why))


OTHER_PARAMS = [_agent_param(agent) for agent in OTHERS]
BATCH, IMAGE_SIZE, SEQ_LEN = 4, 224, 8
OPTIMIZER = OptimizerSpec(learning_rate=0.01, momentum=0.9)
LOGIT_RTOL = 1e-5  # of max |logit|; measured: at most 7e-7
LOSS_RTOL = 1e-4  # measured: at most 2e-5
DELTA_RTOL = 2e-2  # of the loss change one step makes; measured: at most 5e-3 ...
# ... except the deep ResNets, whose one step at lr 0.01 is far outside the linear regime
# (ResNet-152's loss 7.4 -> about 2.4, ResNet-50's 6.8 -> 1.9) after 50 or 152 layers of float32
# summed in each library's own order: ResNet-152's frameworks land 3-7% apart; ResNet-50's
# within 1% on Intel Xeons, but keras-tf 2.4% on an AMD EPYC (family 25, 2026-12-02, CI).
DELTA_RTOL_BY_MODEL = {"resnet50": 0.05, "resnet152": 0.1}


def _python(agent: str) -> Path:
    env = environment_for(MANIFESTS[agent])
    env.ensure()
    return env.python


# Each agent's process builds and compiles its models (XLA's compilation, single-threaded,
# is most of JAX's and Keras-on-JAX's time): two at once keep both CPUs of a small CI host
# busy. Every agent is its own process, so they share nothing but the CPUs.
PARALLEL_AGENTS = 2


@dataclass(frozen=True)
class Outcome:
    """What one agent's `fwbench-reference all` found."""

    declares: bool  # its plugin declares the equivalence capability
    covers: frozenset[str]  # the models it builds for equivalence
    trains: bool
    shapes: dict[str, dict[str, list[int]]]  # fresh models' weight shapes, the unstepped ones
    results: dict[str, EquivalenceResult]  # by stepped model


def _reference(agent: str, *args: str) -> subprocess.CompletedProcess[str]:
    plugin = MANIFESTS[agent].plugin
    command = [str(_python(agent)), "-m", "fwbench.runtime.reference_cli", "--plugin", plugin]
    completed = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=1200, env=_env(agent)
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def _env(agent: str) -> dict[str, str]:
    """The agent's switches ([env] of its manifest: Keras' backend), as its agent runs, and
    XLA's compilation cache (tests/stepped_models.py)."""
    return {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE), **MANIFESTS[agent].env}


def _inputs(model: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if model == "lstm":
        return rng.integers(0, 20_000, (BATCH, SEQ_LEN)), rng.integers(0, 2, BATCH)
    channels, size, classes = (1, 28, 10) if model == "lenet" else (3, IMAGE_SIZE, 1000)
    images = rng.standard_normal((BATCH, channels, size, size)).astype(np.float32)
    return images, rng.integers(0, classes, BATCH)


def _perturb_batch_norm(weights: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """Fresh BatchNorm is the identity (mean 0, var 1, gamma 1, beta 0), which would hide
    a wrong epsilon or a swapped statistic: give every BN layer non-trivial values."""
    for key in [k for k in weights if k.endswith(".running_mean")]:
        prefix = key.removesuffix(".running_mean")
        n = weights[key].shape[0]
        weights[key] = rng.normal(0.0, 0.1, n).astype(np.float32)
        weights[f"{prefix}.running_var"] = rng.uniform(0.5, 1.5, n).astype(np.float32)
        weights[f"{prefix}.weight"] = (1 + rng.normal(0.0, 0.1, n)).astype(np.float32)
        weights[f"{prefix}.bias"] = rng.normal(0.0, 0.1, n).astype(np.float32)


@dataclass(frozen=True)
class Cases:
    paths: list[str]  # a case file per stepped model
    shapes: dict[str, dict[str, list[int]]]  # PyTorch's exported weights' shapes, by model


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Cases:
    """PyTorch's weights exported once (BatchNorm perturbed), a case per stepped model."""
    root = tmp_path_factory.mktemp("cases")
    _reference(REFERENCE, "export", "--models", ",".join(STEPPED), "--out-dir", str(root / "w"))
    rng = np.random.default_rng(2024)
    paths, shapes = [], {}
    for model in STEPPED:
        with np.load(root / "w" / f"{model}.npz") as data:
            weights = {k: data[k] for k in data.files}
        shapes[model] = {k: list(v.shape) for k, v in weights.items()}
        _perturb_batch_norm(weights, rng)
        inputs, labels = _inputs(model, rng)
        case = root / f"{model}.npz"
        write_case(case, EquivalenceCase(model, weights, inputs, labels, OPTIMIZER))
        paths.append(str(case))
        (root / "w" / f"{model}.npz").unlink()
    return Cases(paths, shapes)


@pytest.fixture(scope="module")
def outcomes(cases: Cases, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """{agent: Outcome}: one process per agent, two at a time."""
    root = tmp_path_factory.mktemp("equivalence")

    def run(agent: str) -> Outcome:
        out = root / agent
        shaped = ",".join(m for m in UNSTEPPED if agent == REFERENCE or built(m))
        _reference(agent, "all", *cases.paths, "--shapes-models", shaped, "--out-dir", str(out))
        covers = json.loads((out / "covers.json").read_text())
        if not covers["equivalence"]:
            return Outcome(False, frozenset(), False, {}, {})
        covered = frozenset(covers["models"]) & set(MODELS)
        results = {m: read_result(out / f"{m}.npz") for m in STEPPED if m in covered}
        shapes = json.loads((out / "shapes.json").read_text())
        return Outcome(True, covered, bool(covers["trains"]), shapes, results)

    with ThreadPoolExecutor(PARALLEL_AGENTS) as pool:
        return dict(zip(RUN, pool.map(run, RUN), strict=True))


def _require(outcome: Outcome, agent: str, model: str | None = None, trains: bool = False) -> None:
    if not outcome.declares:
        pytest.skip(f"{agent}'s plugin does not declare the equivalence capability")
    if model is not None and model not in outcome.covers:
        pytest.skip(f"{agent}'s plugin declares no {model} for equivalence (equivalence_models)")
    if trains and not outcome.trains:
        pytest.skip(f"{agent}'s plugin runs inference only (equivalence_trains = False)")


REFERENCE_SHAPES = json.loads((HERE / "canonical_shapes.json").read_text())


def test_the_reference_covers_every_model_and_trains(outcomes):
    reference = outcomes[REFERENCE]
    assert (reference.declares, reference.covers, reference.trains) == (True, set(MODELS), True)


def test_pytorchs_architecture_is_the_checked_in_reference(cases, outcomes):
    for model in STEPPED:
        assert cases.shapes[model] == REFERENCE_SHAPES[model], model
    for model in UNSTEPPED:
        assert outcomes[REFERENCE].shapes[model] == REFERENCE_SHAPES[model], model


@pytest.mark.parametrize("agent", OTHER_PARAMS)
def test_every_covered_model_has_pytorchs_architecture(outcomes, agent):
    """A stepped model loaded PyTorch's weights (a plugin refuses a missing, unused or
    misshapen one); the others this run builds exported a fresh model's names and shapes."""
    outcome = outcomes[agent]
    _require(outcome, agent)
    for model in sorted(outcome.covers):
        if model in STEPPED:
            assert model in outcome.results, f"{agent} {model}"
        elif built(model):
            assert outcome.shapes[model] == REFERENCE_SHAPES[model], f"{agent} {model}"


@pytest.mark.parametrize("agent", OTHER_PARAMS)
@pytest.mark.parametrize("model", STEPPED)
def test_same_parameter_count_and_output_shape(outcomes, agent, model):
    _require(outcomes[agent], agent, model)
    torch_result, other = outcomes[REFERENCE].results[model], outcomes[agent].results[model]
    assert other.param_count == torch_result.param_count
    assert other.eval_logits.shape == torch_result.eval_logits.shape


@pytest.mark.parametrize("agent", OTHER_PARAMS)
@pytest.mark.parametrize("model", STEPPED)
def test_same_weights_give_the_same_inference_logits(outcomes, agent, model):
    _require(outcomes[agent], agent, model)
    expected = outcomes[REFERENCE].results[model].eval_logits
    actual = outcomes[agent].results[model].eval_logits
    scale = float(np.abs(expected).max())
    error = float(np.abs(actual - expected).max())
    assert error <= LOGIT_RTOL * scale, f"max |diff| {error:.3g} vs logit scale {scale:.3g}"


@pytest.mark.parametrize("agent", OTHER_PARAMS)
@pytest.mark.parametrize("model", STEPPED)
def test_one_training_step_moves_the_loss_the_same_way(outcomes, agent, model):
    _require(outcomes[agent], agent, model, trains=True)
    expected, actual = outcomes[REFERENCE].results[model], outcomes[agent].results[model]
    assert actual.loss_before == pytest.approx(expected.loss_before, rel=LOSS_RTOL)
    expected_delta = expected.loss_after - expected.loss_before
    actual_delta = actual.loss_after - actual.loss_before
    assert expected_delta < 0, "one SGD step on the batch should lower its loss"
    tolerance = DELTA_RTOL_BY_MODEL.get(model, DELTA_RTOL)
    assert actual_delta == pytest.approx(expected_delta, rel=tolerance, abs=1e-6)
