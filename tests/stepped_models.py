"""Which catalogue models the tests step (forward, and backward to train), and how XLA
compiles their steps there, in one place.

`make test` steps the models whose building blocks differ: LeNet's plain conv and dense layers,
ResNet's basic and bottleneck blocks, MobileNet's and EfficientNet's depthwise ones, the LSTM.
VGG-16 (LeNet's layers, larger) and ResNet-152 (ResNet-50's block, more of it) are built there
and their architecture checked (parameter names, shapes and counts), but stepping them is the
same code as their smaller twins' at a few times the cost: XLA compiled ResNet-152's training
step for 38-51 s, in each of the contract suites of six frameworks' agents and again in their
own tests. Stepping the two took 403 s of `make test-plugins`' 2144 s of job time on a 2-vCPU
Intel Xeon (a cold CI run, 2026-11-30).
`make test-full` (FWBENCH_FULL=1) steps every model, in the plugins' tests, the contract suite
and the equivalence numerics; a change to a model's definition or to weight loading runs it.

XLA (JAX's, Keras on JAX's and TensorFlow's jit_compile) compiles the tests' steps without
LLVM's expensive passes (fast_xla_compile): most of a big model's compile time is LLVM
optimising the generated CPU code, about half of it goes, and the results are the same. These
tests check semantics, not speed; benchmarks never see the flag (it lives only in the test
process and the subprocesses it starts).

Used by the plugin tests (in the agents' environments: nothing here imports the collector) and
by tests/equivalence."""

from __future__ import annotations

import os

import pytest

FULL = os.environ.get("FWBENCH_FULL") == "1"
_FAST_COMPILE = "--xla_llvm_disable_expensive_passes=true"
# A larger model -> the smaller catalogue model whose building blocks it repeats.
LARGER_TWINS = {"vgg16": "lenet", "resnet152": "resnet50"}


def stepped(model: str) -> bool:
    """Whether this run steps `model` (every model with FWBENCH_FULL=1)."""
    return FULL or model not in LARGER_TWINS


def why_not(model: str) -> str:
    """The reason a test that would step `model` gives for not stepping it."""
    return (
        f"{model} repeats {LARGER_TWINS[model]}'s building blocks, which this run steps; "
        "`make test-full` (FWBENCH_FULL=1) steps it"
    )


def params(names: list[str] | tuple[str, ...]) -> list[object]:
    """`names` for a parametrized test that steps each, those this run does not step skipped
    with the reason."""
    return [
        pytest.param(name, marks=() if stepped(name) else pytest.mark.skip(reason=why_not(name)))
        for name in names
    ]


def fast_xla_compile() -> None:
    """XLA_FLAGS without LLVM's expensive passes, for this process and its children: call it
    before anything compiles (a conftest's import)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _FAST_COMPILE.split("=")[0] not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FAST_COMPILE}".strip()
