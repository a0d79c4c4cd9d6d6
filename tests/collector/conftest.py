"""Fixtures shared by the collector's unit tests: synthetic runs written to a real store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwbench.collector.analysis.contenders import RunData, load_run
from fwbench.collector.stats.samples import sample_stats
from fwbench.collector.store.database import ResultStore

# agent -> (workload, phase, batch size) -> one sample array (seconds) per repetition
Measurements = Mapping[str, Mapping[tuple[str, str, int], Sequence[Sequence[float]]]]


def lognormal(median: float, spread: float, n: int, seed: int) -> np.ndarray:
    """Step times around `median` with a lognormal spread (sigma of the log)."""
    return median * np.random.default_rng(seed).lognormal(0.0, spread, n)


def synthetic_row(
    run_id: str, cell: int, agent: str, key: tuple[str, str, int], repetition: int, **extra: Any
) -> dict[str, Any]:
    workload, phase, batch = key
    return {
        "schema_version": 3,
        "run_id": run_id,
        "cell": cell,
        "repetition": repetition,
        "launcher": "local",
        "agent": agent,
        "framework": agent.split("-")[0],
        "framework_version": "1.0",
        "variant": agent.split("-")[-1].split("#")[0],
        "libraries": json.dumps({"onednn": "3.7"}),
        "host": "testhost",
        "cpu_model": "Test CPU",
        "workload": workload,
        "kind": "op",
        "phase": phase,
        "batch_size": batch,
        "dtype": "float32",
        "mode": "function",
        "threads_requested": 0,
        "params": json.dumps({"m": 8}),
        "items_per_sample": batch,
        "status": "ok",
        "interfered": False,  # judged, and not (test_interference_unknown.py: unjudged rows)
        **extra,
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    db = ResultStore(tmp_path / "store.sqlite")
    yield db
    db.close()


@pytest.fixture
def make_run(store: ResultStore, tmp_path: Path) -> Callable[..., RunData]:
    """make_run(run_id, measurements, extra_columns={agent: {column: value}}) -> RunData,
    rows written in interleaved order (repetition, then agent)."""

    def make(
        run_id: str,
        measurements: Measurements,
        extra_columns: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> RunData:
        store.start_run(run_id, tmp_path / run_id, "2026-01-01T00:00:00+00:00", {"run_id": run_id})
        cell = 0
        keys = list(dict.fromkeys(k for cells in measurements.values() for k in cells))
        for key in keys:
            repetitions = max(len(cells.get(key, [])) for cells in measurements.values())
            for repetition in range(repetitions):
                for agent, cells in measurements.items():
                    if repetition >= len(cells.get(key, [])):
                        continue
                    ns = np.round(np.asarray(cells[key][repetition]) * 1e9).astype(np.int64)
                    extra = dict((extra_columns or {}).get(agent, {}))
                    row = synthetic_row(run_id, cell, agent, key, repetition, **extra)
                    row.update(sample_stats(ns.tolist()))
                    store.add_result(run_id, row, ns.tolist())
                    cell += 1
        return load_run(store, run_id)

    return make
