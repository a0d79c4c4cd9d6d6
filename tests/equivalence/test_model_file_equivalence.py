"""A user's .keras file is the same model on every Keras backend: saved once on the first
Keras agent's backend (torch, whose files name its own optimizer subclasses), then read by each
Keras agent that represents its backend in the tests, one process each, as the agent reads it
(InspectModel, then an inference and a training cell through the runtime's request handling:
keras_model_file.py). Their signatures must be equal, their outputs within
`compare_outputs`' float32 tolerance of the first's, and a training step of the file's own
loss and optimizer (Adam) on the same seeded targets must start from the same loss and move
it alike.

Measured (AMD EPYC, 2 vCPUs, keras 3.15.1, 2026-12-06): logits of scale 1.2 at most 3.0e-7
apart (relative 8.1e-7), the first losses 8e-8 apart relative, the losses after one Adam step
equal in float32; the whole test 31 s."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.spec.model_files import compare_outputs

HELPER = Path(__file__).with_name("keras_model_file.py")
ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = discover_manifests(manifest_dirs())
# Every Keras agent that represents its backend in the tests, torch's first.
KERAS_AGENTS = tuple(
    sorted(
        (
            m.name
            for m in MANIFESTS.values()
            if m.representative and not m.requires_gpu and "KERAS_BACKEND" in m.env
        ),
        key=lambda name: MANIFESTS[name].env["KERAS_BACKEND"] != "torch",
    )
)
LOSS_RTOL = 1e-4  # measured: 8e-8
DELTA_RTOL = 2e-2  # of the loss change one step makes; measured: below float32's resolution

pytestmark = pytest.mark.skipif(
    len(KERAS_AGENTS) < 2, reason="fewer than two Keras agents represent their backend here"
)


def _helper(agent: str, *args: str) -> None:
    manifest = MANIFESTS[agent]
    environment = environment_for(manifest)
    environment.ensure()
    completed = subprocess.run(
        [str(environment.python), str(HELPER), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, **manifest.env},
    )
    assert completed.returncode == 0, f"{agent}: {completed.stderr[-3000:]}"


Reading = tuple[dict[str, Any], dict[str, np.ndarray]]


@pytest.fixture(scope="module")
def readings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Reading]:
    """{agent: (summary, outputs)}: the file saved by the first agent, read by each, two
    processes at a time."""
    root = tmp_path_factory.mktemp("keras-file")
    path = root / "varied.keras"
    _helper(KERAS_AGENTS[0], "save", str(path))

    def read(agent: str) -> Reading:
        out = root / agent
        _helper(agent, "run", str(path), str(out))
        with np.load(out.with_suffix(".npz")) as data:
            outputs = {k: data[k] for k in data.files}
        return json.loads(out.with_suffix(".json").read_text()), outputs

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(KERAS_AGENTS, pool.map(read, KERAS_AGENTS), strict=True))


def test_every_backend_reads_the_same_signature(readings):
    first = readings[KERAS_AGENTS[0]][0]
    assert first["inputs"] == [["image", [-1, 16, 16, 3], "float32"]]
    assert first["outputs"] == [["logits", [-1, 10], "float32"]]
    for agent in KERAS_AGENTS[1:]:
        summary = readings[agent][0]
        for key in ("inputs", "outputs", "parameters", "phases"):
            assert summary[key] == first[key], f"{agent} {key}"


@pytest.mark.parametrize("agent", KERAS_AGENTS[1:])
def test_outputs_agree_with_the_first_backends(readings, agent):
    difference = compare_outputs(readings[agent][1], readings[KERAS_AGENTS[0]][1])
    assert difference.within, f"{agent}: {difference.why}"


@pytest.mark.parametrize("agent", KERAS_AGENTS[1:])
def test_the_files_optimizer_steps_alike(readings, agent):
    first = readings[KERAS_AGENTS[0]][0]["losses"]
    losses = readings[agent][0]["losses"]
    assert losses[0] == pytest.approx(first[0], rel=LOSS_RTOL)
    move, first_move = losses[1] - losses[0], first[1] - first[0]
    assert first_move < 0  # one Adam step on the same batch lowers its loss
    assert move == pytest.approx(first_move, rel=DELTA_RTOL)
