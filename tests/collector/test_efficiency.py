"""Scaling efficiency's interval and verdict (analysis/efficiency.py), on worlds whose step
times the test sets: a world three times as slow per step is sub-linear, one as fast is
linear, a pipeline twice as fast over two stages is linear, and one process a side is never
called, whatever its samples say."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fwbench.collector.analysis.efficiency import (
    LINEAR,
    SUB_LINEAR,
    SUPER_LINEAR,
    efficiencies,
    efficiency_text,
)
from fwbench.collector.analysis.scaling import HEADERS, scaling_rows, scaling_table
from fwbench.collector.stats.significance import UNDECIDED

STEPS = 20


def _run(
    worlds: dict[tuple[int, int], float],
    repeat: int,
    strategy: str = "ddp",
    batch: int = 4,
    world_batch: bool = False,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows and samples of a run of agent `fake` in worlds {(ranks, devices): step seconds},
    each measured in `repeat` processes whose medians differ by 1% (log-normal), steps by 2%.
    `world_batch`: the batch is the world's (a pipeline), else each replica's."""
    rng = np.random.default_rng(seed)
    rows, samples, cell = [], [], 0
    for _ in range(repeat):
        for (ranks, devices), step in worlds.items():
            process = step * float(np.exp(rng.normal(0, 0.01)))
            seconds = process * np.exp(rng.normal(0, 0.02, STEPS))
            items = batch if world_batch else batch * ranks * devices
            median = float(np.median(seconds))
            rows.append(
                {
                    "cell": cell,
                    "agent": f"fake~w{ranks}" + (f"x{devices}" if devices > 1 else ""),
                    "status": "ok",
                    "workload": "lenet",
                    "phase": "train",
                    "batch_size": batch,
                    "dtype": "float32",
                    "mode": "eager",
                    "params": "{}",
                    "strategy": strategy,
                    "world_size": ranks,
                    "local_devices": devices,
                    "items_per_sample": items,
                    "median_seconds": median,
                    "items_per_second": items / median,
                    "communication_share": 0.1,
                    "algbw_bytes_per_second": np.nan,
                    "busbw_bytes_per_second": np.nan,
                    "collective_bytes": np.nan,
                    "interfered": False,
                }
            )
            samples += [{"cell": cell, "iteration": i, "seconds": s} for i, s in enumerate(seconds)]
            cell += 1
    return pd.DataFrame(rows), pd.DataFrame(samples)


def _world(table: pd.DataFrame, ranks: int, devices: int = 1) -> pd.Series:
    found = table[(table["ranks"] == ranks) & (table["devices"] == devices)]
    assert len(found) == 1
    return found.iloc[0]


def test_a_world_three_times_as_slow_per_step_is_sub_linear() -> None:
    table = scaling_table(*_run({(1, 1): 0.010, (2, 1): 0.030}, repeat=3))
    two = _world(table, 2)
    assert two["scaling_efficiency"] == pytest.approx(1 / 3, rel=0.05)
    assert two["efficiency_ci_low"] < two["scaling_efficiency"] < two["efficiency_ci_high"]
    assert two["efficiency_ci_high"] < 0.5
    assert two["scaling_verdict"] == SUB_LINEAR and two["efficiency_repetitions"] == "3/3"
    assert pd.isna(_world(table, 1).get("scaling_verdict"))  # the baseline itself: no verdict
    shown = dict(zip(HEADERS, scaling_rows(table)[1], strict=True))
    assert shown["scaling"] == SUB_LINEAR and shown["efficiency"].startswith("33% [")


def test_as_fast_per_step_is_linear_and_faster_is_super_linear() -> None:
    table = scaling_table(*_run({(1, 1): 0.010, (2, 1): 0.010, (1, 2): 0.007}, repeat=4))
    assert _world(table, 2)["scaling_verdict"] == LINEAR
    assert _world(table, 1, 2)["scaling_verdict"] == SUPER_LINEAR  # each replica 1.4x as fast


def test_a_pipeline_twice_as_fast_over_two_stages_is_linear() -> None:
    """The batch is the world's: efficiency is the speed-up over one stage, over two."""
    worlds = {(1, 1): 0.020, (2, 1): 0.010}
    table = scaling_table(*_run(worlds, repeat=3, strategy="pipeline", world_batch=True))
    two = _world(table, 2)
    assert two["scaling_efficiency"] == pytest.approx(1.0, rel=0.03)
    assert two["scaling_verdict"] == LINEAR


def test_one_process_a_side_describes_and_is_never_called() -> None:
    table = scaling_table(*_run({(1, 1): 0.010, (2, 1): 0.030}, repeat=1))
    two = _world(table, 2)
    assert two["efficiency_ci_high"] < 0.5  # the samples' interval: those processes only
    assert two["scaling_verdict"] == UNDECIDED and two["efficiency_repetitions"] == "1/1"


def test_interfered_processes_are_left_out_and_without_samples_no_interval() -> None:
    results, samples = _run({(1, 1): 0.010, (2, 1): 0.030}, repeat=3)
    results.loc[results["agent"] == "fake~w2", "interfered"] = [True, False, False]
    two = _world(scaling_table(results, samples), 2)
    assert two["efficiency_repetitions"] == "2/3"
    plain = _world(scaling_table(results), 2)
    assert "scaling_verdict" not in plain and plain["scaling_efficiency"] > 0
    assert efficiency_text(plain.to_dict()) == f"{plain['scaling_efficiency']:.0%}"


def test_the_verdicts_are_adjusted_together() -> None:
    """Holm over every efficiency shown: the smallest p is doubled for two worlds."""
    results, samples = _run({(1, 1): 0.010, (2, 1): 0.011, (1, 2): 0.0105}, repeat=3, seed=3)
    rows = results.assign(
        family="fake", ranks=results["world_size"], devices=results["local_devices"]
    )
    rows["replicas"] = rows["ranks"] * rows["devices"]
    same = ["family", "workload", "phase", "batch_size", "dtype", "mode", "params", "strategy"]
    found = efficiencies(rows, samples, same)
    worlds = {(e.estimate.p_value, e.p_adjusted) for e in found.values()}
    assert len(worlds) == 2  # one test per world, whatever its rows
    smallest = min(worlds)
    assert smallest[1] == pytest.approx(min(1.0, 2 * smallest[0]))
