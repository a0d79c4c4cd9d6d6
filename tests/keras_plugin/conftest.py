"""The Keras plugin's tests, run in each Keras agent's environment (keras-torch, keras-jax,
keras-tf: one representative per backend).

Keras reads KERAS_BACKEND at its first import, and the plugin refuses to start without it:
`make test-plugins` runs this folder and the contract suite with the agent's manifest [env]
(`tests/plugin_matrix.py --env AGENT`), as the agent itself runs.

XLA's expensive LLVM passes are skipped, as in tests/jax_plugin (tests/stepped_models.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models

from stepped_models import (
    fast_xla_compile,
    jax_compilation_cache,
    keras_models_here,
    why_not_keras_models,
)

fast_xla_compile()
jax_compilation_cache()


def pytest_configure(config: pytest.Config) -> None:
    # Keras' torch backend turns every tensor it hands back (predict_on_batch's logits,
    # train_on_batch's loss, a variable's value) into numpy with np.array(tensor), which
    # numpy 2.4 warns about for torch's __array__; the project's tests make warnings errors.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning",
    )


@pytest.fixture(scope="session")
def backend() -> str:
    name = os.environ.get("KERAS_BACKEND", "")
    if name not in ("torch", "jax", "tensorflow"):
        pytest.skip("not in a Keras agent's environment (KERAS_BACKEND unset)")
    return name


@pytest.fixture(scope="session")
def plugin(backend: str):  # type: ignore[no-untyped-def]
    from fwbench.runtime.plugin import PluginContext
    from fwbench.runtime.registry import load_plugin

    return load_plugin("keras", PluginContext(device="cpu"))


@pytest.fixture(scope="session")
def catalogue():  # type: ignore[no-untyped-def]
    from fwbench.spec import load_catalogue

    return load_catalogue()


@pytest.fixture
def models_backend(backend: str) -> str:
    """The backend, where this run builds the models in it (KERAS_MODELS_BACKEND, the
    equivalence test's Keras environment too); else a skip."""
    if not keras_models_here():
        pytest.skip(why_not_keras_models())
    return backend
