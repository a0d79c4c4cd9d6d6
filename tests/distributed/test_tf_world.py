"""TensorFlow's own engine through `collector run --world-sizes`: MultiWorkerMirroredStrategy
(RING collectives over gRPC) training and the strategy's allreduce, in worlds of 1 and 2 rank
processes pinned to their own CPUs and told each other's addresses (FWBENCH_PEERS, TF_CONFIG);
the same initial weights and data shard give rank 0 the same first-step loss in every world
size, and every cell of a world runs in the same rank processes (TensorFlow sizes its thread
pools once, at start-up: the collector gives each rank its threads when it starts it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fwbench.collector.analysis.scaling import scaling_table

COLLECTOR = Path(sys.executable).with_name("collector")
pytestmark = pytest.mark.agent


def test_mwms_and_allreduce_in_worlds_of_one_and_two_ranks(tmp_path: Path) -> None:
    command = [
        str(COLLECTOR),
        "run",
        "--agents",
        "tf-mkl",
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
    assert (rows.groupby("agent")["agent_pid"].nunique() == 1).all()  # no restart in a world
    by = rows.set_index(["agent", "workload"])
    pair = by.loc[("tf-mkl~w2", "allreduce")]
    assert (pair["world_size"], pair["dist_backend"], pair["strategy"]) == (2, "ring", "collective")
    assert pair["collective_bytes"] == 16 * 1024 * 4
    assert pair["busbw_bytes_per_second"] == pytest.approx(pair["algbw_bytes_per_second"])  # n=2
    mwms = by.loc[("tf-mkl~w2", "lenet")]
    assert mwms["strategy"] == "multi_worker_mirrored" and mwms["items_per_sample"] == 32
    assert [len(s) for s in json.loads(mwms["rank_samples_ns"])] == [5, 5]
    assert pd.isna(mwms["communication_seconds"])  # TensorFlow reports no per-step split
    # Rank 0 holds the same weights and data shard in both worlds: the same loss.
    alone = by.loc[("tf-mkl~w1", "lenet")]
    assert alone["world_size"] == 1 and alone["strategy"] == "multi_worker_mirrored"
    assert mwms["first_step_loss"] == pytest.approx(alone["first_step_loss"], rel=1e-6)
    settings = json.loads(mwms["settings"])
    assert (settings["backend"], settings["transport"]) == ("ring", "grpc")
    assert mwms["intra_op_threads"] >= 1 and mwms["mode"] == "function"
    table = scaling_table(rows).set_index(["workload", "ranks"])
    assert table.loc[("lenet", 1), "scaling_efficiency"] == 1.0
    assert table.loc[("lenet", 2), "scaling_efficiency"] > 0
