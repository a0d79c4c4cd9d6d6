"""TensorFlow ranks on MultiWorkerMirroredStrategy, two rank processes on this host started as
the collector starts them (torchrun's variables, FWBENCH_PEERS): training keeps every rank's
weights identical although each rank draws its own data shard (the gradients really are
all-reduced), BatchNorm statistics stay per rank and read as the ranks' mean, the allreduce
sums over the ranks; and TF_CONFIG is what the peers say. Runs in the tf-mkl environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fwbench.runtime.plugin import InvalidContext
from fwbench.runtime.world import World
from fwbench.tf_plugin import distributed

RANK_SCRIPT = Path(__file__).with_name("tf_rank.py")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _world(workload: str, dtype: str = "float32", steps: int = 3) -> list[dict[str, Any]]:
    peers = ",".join(f"127.0.0.1:{_free_port()}" for _ in range(2))
    cpus = sorted(os.sched_getaffinity(0))
    processes = []
    for rank in range(2):
        environment = {
            **os.environ,
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
            "FWBENCH_PEERS": peers,
            "FWBENCH_DIST_TIMEOUT_SECONDS": "60",
        }
        command = ["taskset", "-c", str(cpus[rank % len(cpus)]), sys.executable]
        processes.append(
            subprocess.Popen(
                [*command, str(RANK_SCRIPT), workload, dtype, str(steps)],
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=240)
            assert process.returncode == 0, stderr[-3000:]
            results.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return results


def test_tf_config_names_every_rank_as_a_worker_and_backends_are_tensorflows() -> None:
    world = World(2, 1, 1, "127.0.0.1", 29500, peers=("h0:1111", "h1:2222"))
    assert distributed.tf_config(world) == {
        "cluster": {"worker": ["h0:1111", "h1:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    alone = World(1, 0, 0, "127.0.0.1", 29500)
    assert distributed.tf_config(alone)["cluster"] == {"worker": ["127.0.0.1:29500"]}
    with pytest.raises(InvalidContext, match="FWBENCH_PEERS"):
        distributed.tf_config(World(2, 0, 0, "127.0.0.1", 29500))
    gloo = World(1, 0, 0, "127.0.0.1", 29500, backend="gloo")
    with pytest.raises(InvalidContext, match="ring, nccl, auto"):
        distributed.start(gloo, "/CPU:0")  # refused before TensorFlow is touched


def test_training_all_reduces_gradients_and_keeps_statistics_per_rank() -> None:
    first, second = _world("resnet18")
    assert first["weights"] == second["weights"]  # 3 steps on different shards, same weights
    assert first["first_step_loss"] != second["first_step_loss"]  # different shards
    assert first["outputs"][0] == [first["first_step_loss"]]
    assert first["statistic_local"] != second["statistic_local"]
    assert first["statistic_read"] == pytest.approx(second["statistic_read"], rel=1e-6)
    locals_ = zip(first["statistic_local"], second["statistic_local"], strict=True)
    mean = [(a + b) / 2 for a, b in locals_]
    assert first["statistic_read"] == pytest.approx(mean, rel=1e-5, abs=1e-7)
    assert first["backend"] == "ring" and first["settings"]["transport"] == "grpc"
    assert first["settings"]["strategy"] == distributed.MWMS
    assert "bfloat16" not in first["capabilities"]["resnet18"]  # no bfloat16 collectives


def test_allreduce_sums_over_the_ranks() -> None:
    first, second = _world("allreduce", "float64", steps=2)
    assert first["outputs"] == second["outputs"] == [[2.0] * 4, [2.0] * 4]  # ones, two ranks
    assert first["collective_bytes"] == 4 * 1024 * 8
    assert first["settings"]["strategy"] == "collective"


def test_the_lstm_trains_too_with_its_sparse_embedding_gradient_and_keras_seed_state() -> None:
    first, second = _world("lstm", steps=2)  # Keras' LSTM holds an int64 non-trainable variable
    assert first["weights"] == second["weights"]
    assert first["first_step_loss"] != second["first_step_loss"]


def test_a_rank_whose_port_is_taken_says_address_already_in_use() -> None:
    """TensorFlow says only "Could not start gRPC server" when a rank's port is taken; the
    rank says "Address already in use", the words on which the collector places the world on
    other ports (launchers/world.py)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        environment = {
            **os.environ,
            "WORLD_SIZE": "2",
            "RANK": "0",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
            "FWBENCH_PEERS": f"127.0.0.1:{port},127.0.0.1:{_free_port()}",
            "FWBENCH_DIST_TIMEOUT_SECONDS": "30",
        }
        done = subprocess.run(
            [sys.executable, str(RANK_SCRIPT), "allreduce", "float32", "1"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"OSError: [Errno 98] Address already in use: 127.0.0.1:{port}"), last
    assert distributed.port_taken(f"127.0.0.1:{port}") is False  # the holder is gone
