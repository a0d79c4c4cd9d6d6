"""Host facts and environment switches the agent reports in Describe."""

from __future__ import annotations

import pytest

from fwbench.runtime.hostinfo import environment_switches


def test_environment_switches_report_threading_and_allocator_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("FWBENCH_TF32", "on")  # the GPU math switches are in every row too
    monkeypatch.setenv("FWBENCH_UNRELATED_SETTING", "x")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    found = environment_switches()
    assert found["MALLOC_ARENA_MAX"] == "1" and found["OMP_NUM_THREADS"] == "2"
    assert found["FWBENCH_TF32"] == "on"
    assert "FWBENCH_UNRELATED_SETTING" not in found
    assert "LD_PRELOAD" not in found  # only variables that are set
