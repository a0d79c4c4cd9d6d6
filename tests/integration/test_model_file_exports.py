"""Exported programs on the framework agents that read them (`collector run --model`): a
`.pt2` saved by torch.export in the torch-cpu environment (a convolution, BatchNorm in eval, a
dense layer, the batch a torch.export.Dim) and a `.jax` serialized by jax.export in the
jax-cpu environment (a jitted two-layer function, the batch symbolic), each measured on its
agent and that agent's A/A twin at two batch sizes, every inference row's outputs checked
against the reference agent's. The plugins' own tests check the outputs against the
frameworks' (tests/torch_plugin, tests/jax_plugin)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.cli.common import load_manifests

WRITE_PT2 = """
import sys
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.dense = nn.Linear(8, 10)

    def forward(self, image):
        return self.dense(torch.relu(self.norm(self.conv(image))).mean((2, 3)))

torch.manual_seed(0)
batch = torch.export.Dim("batch", min=1, max=1024)
example = (torch.zeros(2, 3, 16, 16),)
program = torch.export.export(Net().eval(), example, dynamic_shapes={"image": {0: batch}})
torch.export.save(program, sys.argv[1])
"""

WRITE_JAX = """
import sys
import jax
import jax.numpy as jnp
import numpy as np
from jax import export

rng = np.random.default_rng(0)
w1 = rng.standard_normal((64, 32)).astype(np.float32) * 0.2
w2 = rng.standard_normal((32, 10)).astype(np.float32) * 0.2

def predict(x):
    return jax.nn.softmax(jnp.tanh(x @ w1) @ w2, axis=-1)

images = jax.ShapeDtypeStruct(export.symbolic_shape("b, 64"), jnp.float32)
open(sys.argv[1], "wb").write(export.export(jax.jit(predict))(images).serialize())
"""


def _write(agent: str, script: str, path: Path) -> Path:
    env = environment_for(load_manifests(None)[agent])
    env.ensure()
    subprocess.run([str(env.python), "-c", script, str(path)], check=True, timeout=300)
    return path


@pytest.mark.parametrize(
    ("agent", "script", "name"),
    [("torch-cpu", WRITE_PT2, "net.pt2"), ("jax-cpu", WRITE_JAX, "net.jax")],
)
def test_an_exported_program_runs_on_its_framework(
    tmp_path: Path, isolated_store, agent: str, script: str, name: str
):
    model = _write(agent, script, tmp_path / name)
    out = tmp_path / "run"
    done = collector(
        "run",
        "--model",
        str(model),
        "--agents",
        agent,
        "--aa",
        agent,
        "--batch-sizes",
        "1,4",
        "--min-seconds",
        "0.1",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]
    assert set(rows["agent"]) == {agent, f"{agent}#2"}
    assert set(rows["batch_size"]) == {1, 4}
    assert rows["outputs_match"].all(), rows[["agent", "outputs_note"]]
    assert rows["output_max_abs_diff"].le(1e-6).all()
    assert set(rows["outputs_reference"]) == {agent}
    assert "net@" in done.stdout
