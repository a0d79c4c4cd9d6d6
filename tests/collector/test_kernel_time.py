"""What the agent processes' kernel time says about a comparison (verdicts/kernel_time.py): a
lead for one left open, and a note on any comparison of `compare`."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fwbench.collector.analysis.compare import compare_runs, compare_to_baseline
from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.verdicts.kernel_time import by_cell, compared, kernel_lead, kernel_share


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


def test_a_side_heavy_in_the_kernel_or_whose_processes_differed_is_named() -> None:
    heavy = compared("torch-cpu", [0.31], "tf-mkl", [0.01])
    assert heavy.startswith("CPU in the kernel: torch-cpu 31%, tf-mkl 1% (pages faulted in every")
    assert compared("tf-mkl", [0.01, 0.02], "torch-cpu", [0.30, 0.33]).startswith(
        "CPU in the kernel: tf-mkl 1% to 2%, torch-cpu 30% to 33%"
    )
    spread = compared("tf-eigen#2", [0.04, 0.05], "tf-eigen", [0.02, 0.19])
    assert "tf-eigen 2% to 19%" in spread and "some processes and not others" in spread
    # Both alike, however high; a light side; or a side whose share is unknown: nothing.
    assert compared("jax-cpu", [0.35], "torch-cpu", [0.31]) == ""
    assert compared("a", [0.12], "b", [0.01]) == ""  # under KERNEL_HEAVY
    assert compared("a", [0.9], "b", []) == ""
    assert compared("a", [], "b", []) == ""


def _rows(make_run: Callable[..., RunData], run_id: str, kernel: dict[str, float]) -> RunData:
    """Two agents, one cell, 3 processes each; agent -> its kernel share in every process."""
    rng = np.random.default_rng(len(run_id))
    cell = ("conv2d", "infer", 8)
    run = make_run(
        run_id, {a: {cell: [0.01 * rng.lognormal(0, 0.02, 30) for _ in range(3)]} for a in kernel}
    )
    results = run.results.copy()
    results["cpu_system_percent"] = [200.0 * kernel[a] for a in results["agent"]]
    results["cpu_user_percent"] = 200.0 - results["cpu_system_percent"]
    return RunData(run.run_id, results, run.samples, run.metadata)


def test_compare_notes_the_side_that_spent_its_cpu_in_the_kernel(
    make_run: Callable[..., RunData],
) -> None:
    run = _rows(make_run, "run-k", {"tf-mkl": 0.01, "torch-cpu": 0.31})
    assert set(by_cell(run.results).values()) == {0.01, 0.31}
    (torch,) = compare_to_baseline(run, "tf-mkl").comparisons
    assert "CPU in the kernel: torch-cpu 31%, tf-mkl 1%" in torch.notes
    quiet = _rows(make_run, "run-q", {"tf-mkl": 0.01, "torch-cpu": 0.02})
    assert "kernel" not in compare_to_baseline(quiet, "tf-mkl").comparisons[0].notes
    # Between runs: the same agent faulting pages in before and not after.
    before = _rows(make_run, "run-b", {"torch-cpu": 0.31})
    after = _rows(make_run, "run-after", {"torch-cpu": 0.02})
    (change,) = compare_runs(before, after, 0.03).comparisons
    assert "CPU in the kernel: run run-after 2%, run run-b 31%" in change.notes
