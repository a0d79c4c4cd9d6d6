"""Equivalence holds for distributed training too: the same canonical weights and a batch split
into equal shards, one optimizer step on the framework's own distributed engine in a world of
two rank processes, give the same loss after the step as one process training on the whole
batch (gradient averaging over equal shards is the whole batch's mean gradient), and the same
as PyTorch's single-process step. LeNet: no BatchNorm, whose per-shard statistics would make
the shards' gradients differ by design. Each rank runs `fwbench-reference check` in its agent
environment with torchrun's variables (docs/distributed.md)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec
from fwbench.runtime.reference_cli import read_result, write_case

pytestmark = pytest.mark.agent
MANIFESTS = discover_manifests(manifest_dirs())
# Plugins whose equivalence() runs as a rank of a world, by the agent that represents them.
DISTRIBUTED = {"torch": "torch-cpu", "tensorflow": "tf-eigen", "jax": "jax-cpu"}
# Of the loss, against torch's single process. Measured: torch, TensorFlow and JAX worlds of
# two ranks all equal it to float32's last bit (docs/distributed.md).
LOSS_RTOL = 1e-4


def _python(agent: str) -> Path:
    env = environment_for(MANIFESTS[agent])
    env.ensure()
    return env.python


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _check(plugin: str, case: Path, out: Path, world: int, devices: int = 1) -> list[Path]:
    """Runs the case on `world` ranks (1: a plain process; with `devices`, a world of one
    process spreading the step over its own devices); returns each rank's result."""
    command = [str(_python(DISTRIBUTED[plugin])), "-m", "fwbench.runtime.reference_cli"]
    command += ["--plugin", plugin, "check", str(case)]
    port, processes, results = _free_port(), [], []
    peers = ",".join(f"127.0.0.1:{_free_port()}" for _ in range(world))  # TensorFlow's workers
    for rank in range(world):
        env = {**os.environ, "FWBENCH_DEVICE": "cpu", "FWBENCH_THREADS": "1"}
        if world > 1 or devices > 1:
            env.update(FWBENCH_LOCAL_DEVICES=str(devices), FWBENCH_THREADS=str(devices))
            env.update(
                WORLD_SIZE=str(world),
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                FWBENCH_PEERS=peers,
            )
        folder = out / f"w{world}x{devices}-rank{rank}"
        results.append(folder / case.name)
        processes.append(
            subprocess.Popen([*command, "--out-dir", str(folder)], env=env, stderr=subprocess.PIPE)
        )
    for process in processes:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr.decode()[-3000:]
    return results


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("case")
    export = [str(_python("torch-cpu")), "-m", "fwbench.runtime.reference_cli", "--plugin"]
    done = subprocess.run(
        [*export, "torch", "export", "--models", "lenet", "--out-dir", str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(folder / "lenet.npz") as weights:
        canonical = {name: weights[name] for name in weights.files}
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 8)
    path = folder / "lenet-case.npz"
    write_case(path, EquivalenceCase("lenet", canonical, inputs, labels, OptimizerSpec(0.05, 0.9)))
    return path


@pytest.mark.parametrize("plugin", sorted(DISTRIBUTED))
def test_a_step_over_two_ranks_equals_one_step_on_the_whole_batch(
    plugin: str, case: Path, tmp_path: Path
) -> None:
    (alone,) = [read_result(path) for path in _check("torch", case, tmp_path, 1)]
    ranks = [read_result(path) for path in _check(plugin, case, tmp_path, 2)]
    assert alone.loss_after < alone.loss_before  # the step moved the loss: a real test
    for rank in ranks:  # every rank ends with the same weights: the same full-batch loss
        assert rank.loss_before == pytest.approx(alone.loss_before, rel=LOSS_RTOL)
        assert rank.loss_after == pytest.approx(alone.loss_after, rel=LOSS_RTOL)


# Plugins that spread one process's step over devices of its own (--world-sizes 1xD).
LOCAL_DEVICES = ("jax", "tensorflow")


@pytest.mark.parametrize("plugin", LOCAL_DEVICES)
def test_a_step_over_two_devices_of_one_process_equals_one_step_on_the_whole_batch(
    plugin: str, case: Path, tmp_path: Path
) -> None:
    """TensorFlow's MirroredStrategy over two logical CPUs, a JAX mesh over two host devices:
    each device trains on half the batch, the mean gradient is the whole batch's."""
    (alone,) = [read_result(path) for path in _check("torch", case, tmp_path, 1)]
    (result,) = [read_result(path) for path in _check(plugin, case, tmp_path, 1, devices=2)]
    assert result.loss_before == pytest.approx(alone.loss_before, rel=LOSS_RTOL)
    assert result.loss_after == pytest.approx(alone.loss_after, rel=LOSS_RTOL)
