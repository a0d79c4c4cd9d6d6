"""Which catalogue models the tests build and step (forward, and backward to train), and how
XLA compiles their steps there, in one place.

Every model's architecture is checked in `make test` (Keras' on one backend, below), and the
numerics of one model of each kind of building block, by the cross-framework equivalence test
(tests/equivalence): `stepped` models load PyTorch's weights and compare logits and a training
step in every framework: LeNet's plain conv and dense layers, ResNet-18's basic blocks (3x3 and
1x1 convolutions, BatchNorm, residual sums), MobileNetV2's depthwise ones, EfficientNet-B0's
squeeze-and-excitation and SiLU, the LSTM. ResNet-50 (ResNet-18's convolutions in bottleneck
blocks), VGG-16 (LeNet's layers, larger) and ResNet-152 are built there, not stepped: stepping
them is the same code as their smaller twins' at several times the cost (ResNet-50's step was
8-14 CPU-s in each of the JAX, Keras, Paddle and TensorFlow processes on an AMD EPYC family 25,
2026-12-07; XLA compiled ResNet-152's training step for 38-51 s). The two largest (`built`:
VGG-16's 138M parameters, ResNet-152) are built in PyTorch only, checked against
tests/equivalence/canonical_shapes.json: a fresh VGG-16 cost 4-9 CPU-s of initialisation in
each other framework, for names and shapes that repeat LeNet's and ResNet-50's pattern.

The plugins' own tests and the plugin contract suite sweep models over each framework's modes,
phases and dtypes; in `make test` they sweep one model of each kind of block (`swept`): LeNet
(convolution, pooling, dense), ResNet-18 (BatchNorm and residual blocks), MobileNetV2
(depthwise convolutions, inverted residuals) and the LSTM. ResNet-50, EfficientNet-B0, VGG-16
and ResNet-152 repeat those blocks at several times the cost; the equivalence test builds them
in every framework. Sweeping all eight took 640 s of the plugin stage's 1330 s of test time on
an AMD EPYC (family 25, 2 vCPUs, 2026-12-06): the contract suite's EfficientNet-B0 training cell
alone 25-46 s in each of four environments.

`make test-full` (FWBENCH_FULL=1) steps, sweeps and builds every model in every framework, in
the plugins' tests, the contract suite and the equivalence numerics; a change to a model's
definition or to weight loading runs it.

XLA (JAX's, Keras on JAX's and TensorFlow's jit_compile) compiles the tests' steps without
LLVM's expensive passes (fast_xla_compile): most of a big model's compile time is LLVM
optimising the generated CPU code, about half of it goes, and the results are the same. These
tests check semantics, not speed; benchmarks never see the flag (it lives only in the test
process and the subprocesses it starts).

Used by the plugin tests (in the agents' environments: nothing here imports the collector) and
by tests/equivalence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FULL = os.environ.get("FWBENCH_FULL") == "1"
_FAST_COMPILE = "--xla_llvm_disable_expensive_passes=true"
# A larger model -> the smaller catalogue model whose building blocks it repeats.
LARGER_TWINS = {"resnet50": "resnet18", "vgg16": "lenet", "resnet152": "resnet18"}
# The largest models -> their parameters: fresh weights that outweigh what names and shapes prove.
LARGEST = {"vgg16": "138M", "resnet152": "60M"}


def stepped(model: str) -> bool:
    """Whether this run's equivalence test steps `model` in every framework (every model with
    FWBENCH_FULL=1)."""
    return FULL or model not in LARGER_TWINS


def built(model: str) -> bool:
    """Whether this run builds `model` in every framework for its architecture (PyTorch's is
    checked either way; every model with FWBENCH_FULL=1)."""
    return FULL or model not in LARGEST


def built_params(names: list[str] | tuple[str, ...]) -> list[object]:
    """`names` for a parametrized architecture check, those this run does not build skipped."""
    return [pytest.param(name, marks=_built_marks(name)) for name in names]


def _built_marks(model: str) -> tuple[pytest.MarkDecorator, ...]:
    if built(model):
        return ()
    why = (
        f"{model} repeats {LARGER_TWINS[model]}'s blocks with {LARGEST[model]} fresh parameters; "
        "the equivalence test checks PyTorch's architecture, `make test-full` (FWBENCH_FULL=1) "
        "this framework's"
    )
    return (pytest.mark.skip(reason=why),)


# A model the plugins' sweeps leave to `make test-full` -> the swept model with its blocks.
SWEPT_TWINS = {**LARGER_TWINS, "efficientnet_b0": "mobilenet_v2"}


def swept(workload: str) -> bool:
    """Whether this run's plugin tests and contract suite build and step `workload` (every
    workload that is not a catalogue model repeating another's blocks)."""
    return FULL or workload not in SWEPT_TWINS


def why_not_swept(workload: str) -> str:
    where = "in PyTorch" if workload in LARGEST else "in every framework"
    return (
        f"{workload} repeats {SWEPT_TWINS[workload]}'s blocks, which this run sweeps (the "
        f"equivalence test checks its architecture {where}); `make test-full` (FWBENCH_FULL=1) "
        "sweeps it"
    )


def swept_params(names: list[str] | tuple[str, ...]) -> list[object]:
    """`names` for a parametrized sweep, those this run does not sweep skipped, with why."""
    return [pytest.param(name, marks=sweep_marks(name)) for name in names]


def sweep_marks(workload: str) -> tuple[pytest.MarkDecorator, ...]:
    """None for a workload this run sweeps; else a skip saying why."""
    return () if swept(workload) else (pytest.mark.skip(reason=why_not_swept(workload)),)


def full_marks(workload: str) -> tuple[pytest.MarkDecorator, ...]:
    """For the main suite's sweeps, which `make test` and `make test-full` split by mark, not by
    FWBENCH_FULL: the `full` mark on a workload `make test` does not sweep."""
    return (pytest.mark.full,) if workload in SWEPT_TWINS else ()


# Keras builds its models and transformers by the same code on every backend: `make test`
# builds and steps the models in this backend's environment (the Keras plugin's tests, the
# contract suite, the equivalence test) and runs the plugin's transformer tests there, LeNet
# through every Keras agent (tests/integration/test_frameworks.py) and the transformers on
# every backend in the equivalence test and the contract suite; `make test-full` all of them
# on each backend.
KERAS_MODELS_BACKEND = "torch"


def keras_models_on(backend: str | None) -> bool:
    """Whether this run builds catalogue models where KERAS_BACKEND is `backend` (None: no
    Keras environment): anywhere but another Keras backend than KERAS_MODELS_BACKEND, and
    everywhere with FWBENCH_FULL=1."""
    return FULL or backend is None or backend == KERAS_MODELS_BACKEND


def keras_models_here() -> bool:
    """keras_models_on this process's KERAS_BACKEND."""
    return keras_models_on(os.environ.get("KERAS_BACKEND"))


def why_not_keras_models() -> str:
    return (
        f"make test builds the Keras models and tests the transformers on {KERAS_MODELS_BACKEND} "
        "(LeNet through every Keras agent, the transformers in the equivalence test); `make "
        "test-full` (FWBENCH_FULL=1) here too"
    )


# XLA's compiled programs kept between runs (JAX's persistent compilation cache, keyed by the
# program, the compile options and the jax and jaxlib versions): a warm `make test` loads the
# executables a cold one compiled, the same code either way, in the JAX and Keras plugins' tests
# and the equivalence test. Tests only: a benchmark measures compilation, and never sees it.
JAX_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fwbench" / "jax-cache"
# What JAX records when it takes a program from that cache instead of compiling it: a test that
# counts compilations counts these too (tests/jax_plugin).
JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"


def jax_compilation_cache() -> None:
    """JAX_COMPILATION_CACHE_DIR for this process and its children, unless set: call it
    before jax is imported (a conftest's import)."""
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(JAX_CACHE))


def fast_xla_compile() -> None:
    """XLA_FLAGS without LLVM's expensive passes, for this process and its children: call it
    before anything compiles (a conftest's import)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _FAST_COMPILE.split("=")[0] not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FAST_COMPILE}".strip()
