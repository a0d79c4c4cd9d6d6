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


def test_the_variables_the_collector_names_are_reported_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`collector run --agent-env` names what it set in FWBENCH_REPORT_VARIABLES, so the row
    records those variables as the agent's own process saw them."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    monkeypatch.setenv("FWBENCH_REPORT_VARIABLES", " XLA_FLAGS,,NOT_SET_HERE ,MALLOC_ARENA_MAX")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    found = environment_switches()
    assert found["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"
    assert found["MALLOC_ARENA_MAX"] == "2"
    assert "NOT_SET_HERE" not in found and "" not in found
    monkeypatch.delenv("FWBENCH_REPORT_VARIABLES")
    assert "XLA_FLAGS" not in environment_switches()
