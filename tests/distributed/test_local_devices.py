"""One process of several devices through `collector run --world-sizes 1x2`: TensorFlow's
MirroredStrategy over two logical CPUs and a JAX mesh over two host devices, each device a
replica with its own batch, the process given both replicas' CPUs; the rows say so
(local_devices, items per step, the strategy and its in-process reduction)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fwbench.collector.analysis.scaling import scaling_table

COLLECTOR = Path(sys.executable).with_name("collector")
pytestmark = pytest.mark.agent


def test_tensorflow_and_jax_spread_one_process_over_two_devices(tmp_path: Path) -> None:
    command = [
        str(COLLECTOR), "run", "--agents", "tf-eigen,jax-cpu", "--phases", "train",
        "--world-sizes", "1x2", "--workloads", "allreduce,lenet", "--batch-sizes", "8",
        "--iterations", "3", "--warmup", "1",
        "--store", str(tmp_path / "store.sqlite"), "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and len(rows) == 4
    assert set(rows["world_size"]) == {1} and set(rows["local_devices"]) == {2}
    by = rows.set_index(["agent", "workload"])
    expected = {"tf-eigen~w1x2": ("mirrored", "reduction_to_one_device"),
                "jax-cpu~w1x2": ("jax_sharded", "xla-local")}  # fmt: skip
    cpus = len(os.sched_getaffinity(0))
    for agent, (strategy, backend) in expected.items():
        train = by.loc[(agent, "lenet")]
        assert (train["strategy"], train["dist_backend"]) == (strategy, backend)
        assert train["items_per_sample"] == 16  # 8 on each device
        assert len(train["rank_cpus"].split(",")) == (2 if cpus >= 2 else 1)
        assert by.loc[(agent, "allreduce"), "collective_bytes"] == 8 * 1024 * 4
    settings = json.loads(by.loc[("tf-eigen~w1x2", "lenet"), "settings"])
    assert settings["replicas"].startswith("2 logical CPU")
    assert settings["transport"] == "in process"
    table = scaling_table(rows)
    assert set(table["replicas"]) == {2} and "1x2" in done.stdout
