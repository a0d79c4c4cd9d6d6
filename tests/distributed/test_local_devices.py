"""One process of several devices through `collector run --world-sizes 1,1x2`: TensorFlow's
MirroredStrategy over two logical CPUs and a JAX mesh over two host devices, each device a
replica with its own batch, the process given both replicas' CPUs; the rows say so
(local_devices, items per step, the strategy and its in-process reduction). JAX's "tensor"
shards the weights over the same devices instead: one batch, the same first-step loss as on
one device."""

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
        str(COLLECTOR),
        "run",
        "--agents",
        "tf-eigen,jax-cpu,torch-cpu",
        "--phases",
        "train",
        "--world-sizes",
        "1,1x2",
        "--strategies",
        "all",
        "--workloads",
        "allreduce,lenet",
        "--batch-sizes",
        "8",
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    torch = rows[rows["agent"].str.startswith("torch-cpu")]
    torch = torch.set_index(["agent", "workload", "strategy"])
    assert torch.loc[("torch-cpu~w1", "lenet", "ddp"), "status"] == "ok"  # DDP of one rank
    # DataParallel: GPUs of one process
    refused = torch.loc[("torch-cpu~w1x2", "lenet", "data_parallel")]
    assert refused["status"] == "unsupported" and "on a CPU it is unsupported" in refused["error"]
    rows = rows[~rows["agent"].str.startswith("torch-cpu")]
    assert set(rows["status"]) == {"ok"}, rows["error"].dropna().tolist()
    assert set(rows["world_size"]) == {1} and set(rows["local_devices"]) == {1, 2}
    # tf: mwms, mirrored, collective; jax: multiprocess, sharded, tensor, collective (in 1);
    # tf: mirrored, collective; jax: sharded, tensor, collective (in 1x2)
    assert len(rows) == 12
    tensor = rows[rows["strategy"] == "tensor"].set_index("agent")
    assert list(tensor.loc[["jax-cpu~w1", "jax-cpu~w1x2"], "items_per_sample"]) == [8, 8]
    loss = tensor["first_step_loss"]  # the same weights and batch, split by layer
    assert loss["jax-cpu~w1x2"] == pytest.approx(loss["jax-cpu~w1"], rel=1e-5)
    for strategy in ("mirrored", "jax_sharded"):  # device 1 trains on other data than device 0
        losses = rows[(rows["strategy"] == strategy)].set_index("local_devices")["first_step_loss"]
        assert losses[1] != pytest.approx(losses[2], rel=1e-6), strategy
    rows = rows[(rows["local_devices"] == 2) & (rows["strategy"] != "tensor")]
    by = rows.set_index(["agent", "workload"])
    expected = {
        "tf-eigen~w1x2": ("mirrored", "reduction_to_one_device"),
        "jax-cpu~w1x2": ("jax_sharded", "xla-local"),
    }
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
    table = scaling_table(pd.read_parquet(tmp_path / "run" / "results.parquet"))
    assert set(table["replicas"]) == {1, 2} and "1x2" in done.stdout
    two = table[(table["replicas"] == 2) & (table["workload"] == "lenet")]
    assert two["scaling_efficiency"].notna().all() and len(two) == 3
