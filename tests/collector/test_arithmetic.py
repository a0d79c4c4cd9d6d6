"""Whether two compared rows ran the same float32 arithmetic (verdicts/arithmetic.py)."""

from __future__ import annotations

import json

import pandas as pd

from fwbench.collector.verdicts.arithmetic import SAME_ARITHMETIC, arithmetic, by_cell, difference

TF32 = {"float32_matmul": "tf32", "float32_conv": "tf32"}
TORCH_DEFAULT = {"float32_matmul": "float32", "float32_conv": "tf32"}


def test_a_rows_settings_give_its_arithmetic_keys_only() -> None:
    text = json.dumps({**TF32, "cudnn_benchmark": "True"})
    assert arithmetic(text) == TF32
    assert arithmetic({**TF32, "fake": "yes"}) == TF32
    for nothing in ("", "{not json", None, "[1, 2]", {"float32_matmul": ""}):
        assert arithmetic(nothing) == {}


def test_a_difference_names_each_kind_that_differs_and_the_way_out() -> None:
    said = difference("jax-cuda12", TF32, "torch-cu12", TORCH_DEFAULT)
    assert said == (
        "not the same arithmetic: float32 matmul tf32 in jax-cuda12, float32 in torch-cu12 "
        f"({SAME_ARITHMETIC})"
    )
    both = difference("a", TF32, "b", {"float32_matmul": "float32", "float32_conv": "float32"})
    assert "float32 matmul tf32 in a, float32 in b; float32 convolution tf32 in a" in both


def test_the_same_arithmetic_or_an_unsaid_one_is_not_judged() -> None:
    assert difference("a", TF32, "b", dict(TF32)) == ""
    assert difference("a", TF32, "b", {}) == ""  # a CPU row, or an agent that does not say
    assert difference("a", {"float32_matmul": "tf32"}, "b", {"float32_conv": "float32"}) == ""


def test_rows_by_cell() -> None:
    results = pd.DataFrame({"cell": [0, 1], "settings": [json.dumps(TF32), "{}"]})
    assert by_cell(results) == {0: TF32, 1: {}}
    assert by_cell(pd.DataFrame({"cell": [0]})) == {}
