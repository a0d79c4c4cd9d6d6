"""Leads for a comparison left open, from the agent processes' telemetry (run/processes.py)."""

from __future__ import annotations

import math

from fwbench.collector.run.processes import kernel_lead, kernel_share


def test_kernel_share_of_a_busy_cpu_process_only() -> None:
    assert kernel_share({"cpu_user_percent": 150.0, "cpu_system_percent": 50.0}) == 0.25
    assert kernel_share({"device": "/CPU:0", "cpu_user_percent": 90, "cpu_system_percent": 10})
    for quiet in (
        {"cpu_user_percent": 20.0, "cpu_system_percent": 10.0},  # waiting, not computing
        {"device": "cuda:0", "cpu_user_percent": 100.0, "cpu_system_percent": 300.0},
        {"cpu_user_percent": None, "cpu_system_percent": 10.0},  # not scraped
        {"cpu_user_percent": math.nan, "cpu_system_percent": 100.0},
        {},
    ):
        assert kernel_share(quiet) is None, quiet


def test_a_lead_names_the_agent_whose_processes_differed_in_kernel_time() -> None:
    said = kernel_lead({"torch-cpu": [0.004, 0.22, 0.01], "jax-cpu": [0.01, 0.02]})
    assert said.startswith("; torch-cpu's processes spent 0% to 22% of their CPU in the kernel")
    assert "jax-cpu" not in said
    # A share high in every process is how that agent runs (JAX waiting on a GPU), no lead.
    assert kernel_lead({"jax-cuda12": [0.58, 0.63], "torch-cu12": [0.03]}) == ""
    assert kernel_lead({"a": [], "b": [0.9]}) == ""
