"""JAX's own engine through `collector run --world-sizes`: jax.distributed with one process per
rank, a jit-compiled data-parallel step over a Mesh of every process's device (XLA all-reduces
the gradients over gloo) and a psum under shard_map, in worlds of 1 and 2 rank processes
pinned to their own CPUs; rank 0 holds the same weights and data shard in both worlds, so the
same first-step loss; XLA's thread pool is sized once per process, and a world's cells never
restart its ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

COLLECTOR = Path(sys.executable).with_name("collector")
pytestmark = pytest.mark.agent


def test_data_parallel_and_allreduce_in_worlds_of_one_and_two_ranks(tmp_path: Path) -> None:
    command = [
        str(COLLECTOR),
        "run",
        "--agents",
        "jax-cpu",
        "--phases",
        "train",
        "--world-sizes",
        "1,2",
        "--workloads",
        "allreduce,lenet",
        "--batch-sizes",
        "16",
        "--iterations",
        "5",
        "--warmup",
        "1",
        "--scrape-interval",
        "0.5",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and len(rows) == 4
    assert set(rows["dist_backend"]) == {"gloo"}
    by = rows.set_index(["agent", "workload"])
    pair = by.loc[("jax-cpu~w2", "allreduce")]
    assert (pair["world_size"], pair["strategy"]) == (2, "collective")
    assert pair["collective_bytes"] == 16 * 1024 * 4
    assert pair["busbw_bytes_per_second"] == pytest.approx(pair["algbw_bytes_per_second"])  # n=2
    assert by.loc[("jax-cpu~w1", "allreduce"), "busbw_bytes_per_second"] == 0  # 2(n-1)/n = 0
    parallel = by.loc[("jax-cpu~w2", "lenet")]
    assert parallel["strategy"] == "jax_multiprocess" and parallel["items_per_sample"] == 32
    assert len(json.loads(parallel["rank_step_median_seconds"])) == 2
    assert pd.isna(parallel["communication_seconds"])  # XLA's step has no separate timings
    # Rank 0 holds the same weights and data shard in both worlds: the same loss.
    alone = by.loc[("jax-cpu~w1", "lenet")]
    assert parallel["first_step_loss"] == pytest.approx(alone["first_step_loss"], rel=1e-5)
    assert json.loads(parallel["settings"])["backend"] == "gloo"
    # One process per rank for the whole world: no restart between its cells.
    pids = rows.groupby("agent")["agent_pid"].nunique()
    assert dict(pids) == {"jax-cpu~w1": 1, "jax-cpu~w2": 1}
    assert rows["agent_pid"].nunique() == 2
