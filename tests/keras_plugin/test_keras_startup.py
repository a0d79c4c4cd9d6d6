"""The start-up check: a Keras agent whose KERAS_BACKEND is missing, names another backend,
names one this environment lacks, or disagrees with the backend Keras runs, refuses to start
with one line (InvalidContext: the agent exits 2)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from fwbench.keras_plugin import environment
from fwbench.runtime.plugin import InvalidContext


def test_an_unset_backend_is_refused():
    with pytest.raises(InvalidContext, match="KERAS_BACKEND is unset"):
        environment.requested_backend({})
    with pytest.raises(InvalidContext, match="KERAS_BACKEND is unset"):
        environment.requested_backend({"KERAS_BACKEND": " "})


@pytest.mark.parametrize("name", ["numpy", "openvino", "Torch", "pytorch"])
def test_a_backend_other_than_torch_jax_tensorflow_is_refused(name):
    with pytest.raises(InvalidContext, match="expected one of torch, jax, tensorflow"):
        environment.requested_backend({"KERAS_BACKEND": name})


@pytest.mark.parametrize("name", ["torch", "jax", "tensorflow"])
def test_the_three_backends_are_accepted(name):
    assert environment.requested_backend({"KERAS_BACKEND": name}) == name


def test_keras_on_another_backend_is_refused():
    environment.check_keras_backend("torch", "torch")
    with pytest.raises(InvalidContext, match="KERAS_BACKEND=jax but Keras runs on torch"):
        environment.check_keras_backend("jax", "torch")


def test_a_backend_this_environment_lacks_is_refused():
    missing = [n for n in ("torch", "jax", "tensorflow") if importlib.util.find_spec(n) is None]
    if not missing:
        pytest.skip("every backend is installed here")
    with pytest.raises(InvalidContext, match="cannot be imported here"):
        environment.import_framework(missing[0])


def _agent(keras_backend: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    if keras_backend is not None:
        env["KERAS_BACKEND"] = keras_backend
    command = [sys.executable, "-m", "fwbench.runtime.cli", "--plugin", "keras", "--port", "0"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("value", "message"),
    [(None, "KERAS_BACKEND is unset"), ("numpy", "KERAS_BACKEND='numpy': expected one of")],
)
def test_the_agent_exits_2_with_one_line(value, message):
    done = _agent(value)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr[-2000:]
