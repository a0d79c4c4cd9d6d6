"""The plugin contract suite (docs/plugins.md), for any plugin, in the plugin's own environment:

    PYTHON -m pytest -p no:cacheprovider tests/plugin_contract --plugin NAME

NAME is the plugin's `fwbench.plugins` entry-point name (default: $FWBENCH_PLUGIN); without
one the suite skips. The plugin is loaded through its entry point, as an agent loads it, with
a CPU context, and every cell it builds is about the smallest its catalogue workload allows
(the smallest shape parameters, batch 1 to infer and 2 to train), so the suite stays quick."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fwbench.runtime.plugin import BuiltStep, FrameworkPlugin, PluginContext, WorkloadSpec
from fwbench.runtime.registry import load_plugin
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import Catalogue, ParamSpec, WorkloadDef

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models

from stepped_models import keras_models_here, sweep_marks, why_not_keras_models

CONTEXT = PluginContext(device="cpu")
CATALOGUE = load_catalogue()
SEED = 0
_LOADED = pytest.StashKey[FrameworkPlugin | None]()
NO_PLUGIN = "no plugin named: pass --plugin NAME or set FWBENCH_PLUGIN"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--plugin",
        default=os.environ.get("FWBENCH_PLUGIN") or None,
        help="entry-point name of the plugin the contract suite checks (default $FWBENCH_PLUGIN)",
    )


def loaded_plugin(config: pytest.Config) -> FrameworkPlugin | None:
    """The plugin under test, loaded once per session (collection needs its description)."""
    if _LOADED not in config.stash:
        name = config.getoption("--plugin")
        config.stash[_LOADED] = load_plugin(name, CONTEXT) if name else None
    return config.stash[_LOADED]


def _smallest(param: ParamSpec) -> int:
    return -(-param.min // param.multiple_of) * param.multiple_of


def smallest_cell(workload: WorkloadDef, phase: str, dtype: str, mode: str) -> WorkloadSpec:
    """The smallest allowed shape parameters; batch 1 (every workload's minimum) to infer, 2 to
    train: at 32 pixels the last BatchNorm of a training step sees one value per channel from
    one image, and PyTorch refuses to normalise that (a batch statistic needs two)."""
    params = workload.resolve_params({n: _smallest(p) for n, p in workload.params.items()})
    batch = 2 if phase == "train" else 1
    return WorkloadSpec(workload, phase, batch, dtype, params, 0, SEED, mode)


def _claimed_cells(plugin: FrameworkPlugin) -> list[object]:
    """Every claimed workload and phase; the models `make test` does not sweep, or does not
    build here (Keras on a backend other than the one it builds models on), are skipped
    unbuilt (tests/stepped_models.py)."""
    cells: list[object] = []
    for name, capability in plugin.describe().capabilities.items():
        dtype = "float32" if "float32" in capability.dtypes else capability.dtypes[0]
        marks = sweep_marks(name)
        if CATALOGUE.get(name).kind == "model" and not keras_models_here():
            marks = (pytest.mark.skip(reason=why_not_keras_models()),)
        for phase in capability.phases:
            cell = smallest_cell(CATALOGUE.get(name), phase, dtype, capability.modes[0])
            cells.append(pytest.param(cell, id=f"{name}-{phase}", marks=marks))
    return cells


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`cell`: the smallest cell of every claimed workload and phase, in its default mode;
    `workload`: every claimed workload."""
    plugin = loaded_plugin(metafunc.config)
    missing = [pytest.param(None, marks=pytest.mark.skip(reason=NO_PLUGIN))]
    if "cell" in metafunc.fixturenames:
        # Module scope: the tests of one cell run together, on one build (`built`).
        cells = _claimed_cells(plugin) if plugin else missing
        metafunc.parametrize("cell", cells, scope="module")
    if "workload" in metafunc.fixturenames:
        names = sorted(plugin.describe().capabilities) if plugin else []
        metafunc.parametrize("workload", names or missing)


@pytest.fixture(scope="session")
def plugin(request: pytest.FixtureRequest) -> FrameworkPlugin:
    loaded = loaded_plugin(request.config)
    if loaded is None:
        pytest.skip(NO_PLUGIN)
    return loaded


@pytest.fixture(scope="module")
def built(plugin: FrameworkPlugin, cell: WorkloadSpec) -> BuiltStep:
    """The cell built once for the tests that check it (a build is most of their time: a
    model's initialisation, a JIT compilation); released when the next cell's tests begin."""
    return plugin.build(cell)


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return CATALOGUE


@pytest.fixture(scope="session")
def smallest() -> Callable[[WorkloadDef, str, str, str], WorkloadSpec]:
    return smallest_cell


@pytest.fixture
def cell_for(plugin: FrameworkPlugin) -> Callable[..., WorkloadSpec]:
    """The smallest cell of a claimed workload (its first phase, float32 if offered, default
    mode), with any field replaced: cell_for("gemm", dtype="float16")."""

    def make(workload: str, **changes: object) -> WorkloadSpec:
        capability = plugin.describe().capabilities[workload]
        dtype = "float32" if "float32" in capability.dtypes else capability.dtypes[0]
        cell = smallest_cell(
            CATALOGUE.get(workload), capability.phases[0], dtype, capability.modes[0]
        )
        return dataclasses.replace(cell, **changes)  # type: ignore[arg-type]

    return make
