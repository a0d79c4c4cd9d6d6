"""PyTorch's own engine through `collector run --world-sizes`: DistributedDataParallel over
gloo and gloo's allreduce, in worlds of 1 and 2 rank processes pinned to their own CPUs; the
same initial weights and data shard give the same first-step loss in every world size; and a
rank killed mid-step fails its cell cleanly (the other rank, blocked in a collective, is
stopped; nothing hangs; a fresh world measures the rest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fwbench.collector.analysis.scaling import scaling_table

COLLECTOR = Path(sys.executable).with_name("collector")
pytestmark = pytest.mark.agent


def _command(tmp_path: Path, *extra: str) -> list[str]:
    return [
        str(COLLECTOR),
        "run",
        "--agents",
        "torch-cpu",
        "--phases",
        "train",
        "--world-sizes",
        "1,2",
        "--warmup",
        "1",
        "--scrape-interval",
        "0.5",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
        *extra,
    ]


def test_ddp_and_allreduce_in_worlds_of_one_and_two_ranks(tmp_path: Path) -> None:
    command = _command(
        tmp_path, "--workloads", "allreduce,lenet", "--batch-sizes", "64", "--iterations", "5"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"}
    by = rows.set_index(["agent", "workload"])
    pair = by.loc[("torch-cpu~w2", "allreduce")]
    assert (pair["world_size"], pair["dist_backend"], pair["strategy"]) == (2, "gloo", "collective")
    assert pair["collective_bytes"] == 64 * 1024 * 4
    assert pair["busbw_bytes_per_second"] == pytest.approx(pair["algbw_bytes_per_second"])  # n=2
    ddp = by.loc[("torch-cpu~w2", "lenet")]
    assert ddp["strategy"] == "ddp" and ddp["items_per_sample"] == 128
    assert 0 < ddp["communication_seconds"] < ddp["median_seconds"]
    # Rank 0 holds the same weights and data shard in both worlds: the same loss.
    alone = by.loc[("torch-cpu~w1", "lenet")]
    assert ddp["first_step_loss"] == pytest.approx(alone["first_step_loss"], rel=1e-6)
    settings = json.loads(ddp["settings"])
    assert settings["backend"] == "gloo" and ddp["intra_op_threads"] >= 1
    table = scaling_table(rows).set_index(["workload", "ranks"])
    assert table.loc[("lenet", 1), "scaling_efficiency"] == 1.0
    assert table.loc[("lenet", 2), "scaling_efficiency"] > 0


def test_a_rank_killed_mid_step_fails_the_cell_and_the_sweep_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # ResNet-18's cell is killed 8 s into its 400 steps (each allreduces 47 MB of gradients:
    # about 0.3 s on a loaded 2-CPU host); LeNet's, next, takes seconds in the fresh world.
    command = _command(
        tmp_path,
        "--workloads",
        "resnet18,lenet",
        "--batch-sizes",
        "2",
        "--param",
        "image_size=64",
        "--iterations",
        "400",
        "--world-sizes",
        "2",
        "--hang-timeout",
        "20",
    )
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    ranks: list[dict] = []
    while not ranks:
        assert process.poll() is None and time.monotonic() < deadline
        if (out / "run.json").exists():
            agents = json.loads((out / "run.json").read_text())["agents"]
            ranks = agents["torch-cpu~w2"]["ranks"]
        time.sleep(0.2)
    time.sleep(8)  # into the first cell's timed loop
    os.kill(ranks[1]["pid"], signal.SIGKILL)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 1, stderr.decode()
    rows = pd.read_parquet(out / "results.parquet").sort_values("cell")
    assert list(zip(rows["workload"], rows["status"], strict=True)) == [
        ("resnet18", "failed"),
        ("lenet", "ok"),
    ]
    assert "rank 1" in rows["error"].iloc[0]
    assert time.monotonic() - started < 400  # not the 1800 s cell timeout
    for rank in ranks:  # the killed rank and its peer, blocked in a collective: both gone
        assert not Path(f"/proc/{rank['pid']}").exists()


def test_a_resnet_split_into_pipeline_stages_and_by_tensor(tmp_path: Path) -> None:
    """pipeline: one stage per rank; tensor: the fully connected layers sharded over the ranks
    (torch.distributed.tensor.parallel), the same batch on both: the same first-step loss as
    one rank's."""
    command = _command(
        tmp_path,
        "--workloads",
        "resnet18,lenet",
        "--param",
        "image_size=64",
        "--batch-sizes",
        "4",
        "--iterations",
        "3",
        "--strategies",
        "pipeline,tensor",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    everything = pd.read_parquet(tmp_path / "run" / "results.parquet")
    tensor = everything[everything["strategy"] == "tensor"].set_index(["workload", "agent"])
    assert set(tensor["status"]) == {"ok"} and set(tensor["items_per_sample"]) == {4}
    for workload in ("lenet", "resnet18"):
        alone, pair = tensor.loc[(workload, "torch-cpu~w1")], tensor.loc[(workload, "torch-cpu~w2")]
        assert pair["first_step_loss"] == pytest.approx(alone["first_step_loss"], rel=1e-5)
    # LeNet has no pipeline stages: its pipeline cells are rows that say so, never dropped.
    lenet = everything[(everything["workload"] == "lenet") & (everything["strategy"] == "pipeline")]
    assert len(lenet) == 2 and set(lenet["status"]) == {"unsupported"}
    assert all("offers pipeline for other workloads, not for lenet" in e for e in lenet["error"])
    rows = everything[everything["strategy"] == "pipeline"].set_index("agent")
    rows = rows[rows["workload"] == "resnet18"]
    assert set(rows["status"]) == {"ok"}
    # One batch goes through both stages: the world's batch, not 4 per rank.
    assert list(rows["items_per_sample"]) == [4, 4]
    assert rows["first_step_loss"].notna().all()  # the last stage's
    assert len(json.loads(rows.loc["torch-cpu~w2", "rank_samples_ns"])) == 2
