"""Declared optional capabilities work, minimally, on LeNet (docs/plugins.md, "Optional
capabilities"): "equivalence" exports seeded canonical weights and runs one equivalence case;
"accuracy" trains one step and predicts, for every accuracy workload the runtime would offer."""

from __future__ import annotations

import numpy as np
import pytest

from fwbench.runtime import digits
from fwbench.runtime.accuracy import OPTIMIZER
from fwbench.runtime.architectures import NUM_CLASSES
from fwbench.runtime.plugin import ACCURACY, EQUIVALENCE
from fwbench.runtime.reference import (
    EquivalenceCase,
    equivalence_models,
    equivalence_trains,
    param_count,
)

MODEL = "lenet"  # the smallest model, and the one the catalogue's accuracy workload trains
BATCH = 4


def _declared(plugin, capability: str) -> None:
    if capability not in plugin.optional_capabilities:
        pytest.skip(f"the plugin does not declare {capability!r}")
    if MODEL not in plugin.describe().capabilities:
        pytest.skip(f"the plugin offers no {MODEL}")


def _images(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Canonical LeNet inputs: (batch, 1, 28, 28) float32 in [0, 1], int64 labels."""
    rng = np.random.default_rng(seed)
    images = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
    return images, rng.integers(0, NUM_CLASSES[MODEL], BATCH).astype(np.int64)


def _check_canonical(weights: object) -> None:
    assert isinstance(weights, dict) and weights
    for name, array in weights.items():
        assert isinstance(name, str) and isinstance(array, np.ndarray)
        assert array.dtype == np.float32 and np.isfinite(array).all()


def test_equivalence_declares_the_models_it_covers(plugin):
    _declared(plugin, EQUIVALENCE)
    assert MODEL in equivalence_models(plugin), "equivalence covers at least LeNet"
    assert isinstance(getattr(plugin, "equivalence_trains", True), bool)


def test_equivalence_exports_seeded_canonical_weights(plugin):
    _declared(plugin, EQUIVALENCE)
    weights = plugin.canonical_weights(MODEL, 0)
    _check_canonical(weights)
    again = plugin.canonical_weights(MODEL, 0)
    assert weights.keys() == again.keys()
    assert all(np.array_equal(weights[k], again[k]) for k in weights)


def test_equivalence_runs_one_case(plugin):
    _declared(plugin, EQUIVALENCE)
    weights = plugin.canonical_weights(MODEL, 1)
    images, labels = _images(0)
    result = plugin.equivalence(EquivalenceCase(MODEL, weights, images, labels, OPTIMIZER))
    assert result.param_count == param_count(weights)
    assert result.eval_logits.shape == (BATCH, NUM_CLASSES[MODEL])
    assert result.eval_logits.dtype == np.float32 and np.isfinite(result.eval_logits).all()
    if equivalence_trains(plugin):
        assert np.isfinite([result.loss_before, result.loss_after]).all()
    else:
        assert result.loss_before is None and result.loss_after is None


def _accuracy_workloads(plugin, catalogue) -> list[str]:
    capabilities = plugin.describe().capabilities
    return [
        name
        for name, w in catalogue.workloads.items()
        if w.kind == "accuracy" and "train" in getattr(capabilities.get(w.model), "phases", ())
    ]


def test_accuracy_trains_a_step_and_predicts_classes(plugin, catalogue, smallest):
    _declared(plugin, ACCURACY)
    names = _accuracy_workloads(plugin, catalogue)
    assert names, "declares 'accuracy' but trains no model an accuracy workload uses"
    for name in names:
        workload = catalogue.get(name)
        capability = plugin.describe().capabilities[workload.model]
        spec = smallest(workload, "train", "float32", capability.modes[0])
        shapes = {k: v.shape for k, v in plugin.canonical_weights(workload.model, 0).items()}
        weights = digits.initial_weights(shapes, 0)
        trainer = plugin.trainer(workload.model, weights, OPTIMIZER, spec)
        assert (trainer.settings.dtype, trainer.settings.mode) == (spec.dtype, spec.mode)
        images, labels = _images(1)
        assert plugin.synchronize(trainer.train_step(images, labels)) is None
        predicted = np.asarray(trainer.predict(images))
        assert predicted.dtype == np.int64 and predicted.shape == (BATCH,)
        assert ((predicted >= 0) & (predicted < NUM_CLASSES[workload.model])).all()
