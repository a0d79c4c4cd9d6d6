"""Worlds across nodes, on a real two-node Slurm cluster whose nodes are network namespaces with
addresses of their own on a private bridge (multinode.py): a 2-rank world's job gets one task on
each node, its ranks rendezvous over that network by the nodes' names, the collector reaches
each rank at its node's address, the figures agree with the same world on one host (the
first step's loss, which every rank's gradients reach through the allreduce), and the world's
job ends COMPLETED."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from multinode import NODES, MultiNodeCluster

COLLECTOR = Path(sys.executable).with_name("collector")
CELLS = [
    "--workloads",
    "allreduce,lenet",
    "--phases",
    "train",
    "--batch-sizes",
    "8",
    "--world-sizes",
    "2",
    "--iterations",
    "3",
    "--min-seconds",
    "0",
]


def _fwbench_jobs(cluster: MultiNodeCluster) -> list[str]:
    done = subprocess.run(
        ["squeue", "-h", "-o", "%i|%k"], capture_output=True, text=True, env=cluster.env()
    )
    return [line.split("|")[0] for line in done.stdout.splitlines() if "|fwbench:" in line]


# TensorFlow's world takes the same Slurm path as torch's: `make test-full` runs it.
@pytest.mark.parametrize("agent", ["torch-cpu", pytest.param("tf-eigen", marks=pytest.mark.full)])
def test_a_world_spans_two_nodes_and_agrees_with_one_host(
    slurm_nodes: MultiNodeCluster, tmp_path: Path, agent: str
) -> None:
    out = tmp_path / "nodes"
    command = [
        str(COLLECTOR),
        "run",
        "--launcher",
        "slurm",
        "--agents",
        agent,
        *CELLS,
        "--store",
        str(tmp_path / "db"),
        "--out",
        str(out),
    ]
    done = subprocess.run(
        slurm_nodes.resolving(command),
        capture_output=True,
        text=True,
        timeout=900,
        env=slurm_nodes.env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet").sort_values("workload")
    assert set(rows["status"]) == {"ok"} and set(rows["agent"]) == {f"{agent}~w2"}
    assert set(rows["node"]) == {",".join(NODES)}  # rank 0 on the first node, rank 1 on the next
    ranks = json.loads((out / "run.json").read_text())["agents"][f"{agent}~w2"]["ranks"]
    assert [rank["node"] for rank in ranks] == list(NODES)
    addresses = [rank["address"].rsplit(":", 1)[0] for rank in ranks]
    assert addresses == list(NODES)  # reached by each node's name, at its own address
    assert _fwbench_jobs(slurm_nodes) == []
    for job in set(rows["scheduler_job"]):  # the world's job ended as finished work does
        show = ["scontrol", "-o", "show", "job", job.removeprefix("slurm:")]
        shown = subprocess.run(show, capture_output=True, text=True, env=slurm_nodes.env()).stdout
        assert "JobState=COMPLETED" in shown, shown

    # The same world as two processes on this host: the same first-step loss.
    local = tmp_path / "local"
    command = [
        str(COLLECTOR),
        "run",
        "--agents",
        agent,
        *CELLS,
        "--store",
        str(tmp_path / "db"),
        "--out",
        str(local),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    here = pd.read_parquet(local / "results.parquet").sort_values("workload")
    trained = rows[rows["workload"] == "lenet"]["first_step_loss"].iloc[0]
    assert trained == pytest.approx(
        here[here["workload"] == "lenet"]["first_step_loss"].iloc[0], rel=1e-5
    )
