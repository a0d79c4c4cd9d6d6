"""The float32_matmul / float32_conv settings a plugin reports on its GPU float32 rows."""

from __future__ import annotations

import pytest

from fwbench.runtime.plugin import FLOAT32_CONV, FLOAT32_MATMUL, float32_arithmetic


def test_a_float32_row_reports_both_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    assert float32_arithmetic("float32", "tf32", "float32") == {
        FLOAT32_MATMUL: "float32",
        FLOAT32_CONV: "tf32",
    }


def test_other_dtypes_report_nothing() -> None:
    assert float32_arithmetic("tf32", "tf32", "bfloat16") == {}


def test_nvidia_tf32_override_turns_tf32_off_whatever_the_framework_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    reported = float32_arithmetic("tf32", "tf32", "float32")
    assert reported == {FLOAT32_MATMUL: "float32", FLOAT32_CONV: "float32"}
    assert float32_arithmetic("bf16", "tf32", "float32")[FLOAT32_MATMUL] == "bf16"
