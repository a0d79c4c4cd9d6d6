"""A distributed world as Docker containers on a Docker network (docs/distributed.md): each
rank its own container and network namespace, rank 0 reached by its container name, DDP and
allreduce over gloo across containers; nothing of the world (containers, network) outlives
the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import docker
import pandas as pd
import pytest

COLLECTOR = Path(sys.executable).with_name("collector")


@pytest.mark.agent
def test_ranks_in_containers_on_a_docker_network(
    docker_daemon: docker.DockerClient, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    command = [
        str(COLLECTOR),
        "run",
        "--launcher",
        "docker",
        "--agents",
        "torch-cpu",
        "--workloads",
        "allreduce,lenet",
        "--phases",
        "train",
        "--world-sizes",
        "1,2",
        "--batch-sizes",
        "16",
        "--iterations",
        "5",
        "--warmup",
        "1",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}
    assert set(rows["world_placement"]) == {"docker-network"}
    assert set(rows["launcher"]) == {"docker"}
    pair = rows.set_index(["agent", "workload"]).loc[("torch-cpu~w2", "allreduce")]
    assert pair["busbw_bytes_per_second"] > 0 and pair["dist_backend"] == "gloo"
    run_id = rows["run_id"].iloc[0]
    label = {"label": f"fwbench.run_id={run_id}"}
    assert docker_daemon.containers.list(all=True, ignore_removed=True, filters=label) == []
    assert docker_daemon.networks.list(filters=label) == []
