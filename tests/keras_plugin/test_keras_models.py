"""The models: Keras layers with the catalogue's parameter counts, and the layout maps between
Keras' variables and canonical (PyTorch state_dict) weights: exact both ways, every key used
and every variable assigned."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from stepped_models import built_params

from fwbench.keras_plugin import weights
from fwbench.keras_plugin.models import MODEL_NAMES, build_model

pytestmark = pytest.mark.usefixtures("models_backend")  # conftest.py: one backend in make test


@pytest.mark.parametrize("name", built_params(MODEL_NAMES))
def test_trainable_parameters_equal_the_catalogues(backend, catalogue, name):
    net = build_model(name, image_size=32, seq_len=4)
    assert net.trainable_parameters() == int(catalogue.get(name).parameters)
    exported = weights.export(net)
    bn_statistics = sum(v.size for k, v in exported.items() if k.endswith(("_mean", "_var")))
    assert sum(v.size for v in exported.values()) - bn_statistics == net.trainable_parameters()


def _random_canonical(net) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {k: v.shape for k, v in weights.export(net).items()}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


@pytest.mark.parametrize("name", ["lenet", "resnet18", "mobilenet_v2", "efficientnet_b0", "lstm"])
def test_canonical_weights_round_trip_exactly(backend, name):
    net = build_model(name, image_size=32, seq_len=4)
    canonical = _random_canonical(net)
    weights.load(net, canonical)
    again = weights.export(net)
    assert again.keys() == canonical.keys()
    assert all(np.array_equal(again[k], canonical[k]) for k in canonical)


def test_layouts_are_pytorchs(backend):
    net = build_model("lenet")
    exported = weights.export(net)
    assert exported["features.0.weight"].shape == (6, 1, 5, 5)  # OIHW
    assert exported["classifier.0.weight"].shape == (120, 16 * 5 * 5)  # (out, in)
    mobilenet = weights.export(build_model("mobilenet_v2", image_size=32))
    assert mobilenet["features.1.conv.0.0.weight"].shape == (32, 1, 3, 3)  # depthwise
    lstm = weights.export(build_model("lstm", seq_len=4))
    assert lstm["lstm.weight_ih_l0"].shape == (4 * 128, 128) and lstm["lstm.bias_l0"].shape == (
        512,
    )


def test_the_flattened_classifier_reads_features_in_chw_order(backend):
    """A dense weight that picks one (c, h, w) feature of PyTorch's flattening must pick the
    same feature of Keras' channels-last map."""
    net = build_model("lenet")
    canonical = {k: np.zeros_like(v) for k, v in weights.export(net).items()}
    c, h, w = 3, 1, 4
    canonical["classifier.0.weight"][0, c * 25 + h * 5 + w] = 1.0
    weights.load(net, canonical)
    kernel = keras.ops.convert_to_numpy(net.model.get_layer("classifier_0").kernel)
    assert kernel.reshape(5, 5, 16, 120)[h, w, c, 0] == 1.0
    assert np.count_nonzero(kernel) == 1


def test_loading_refuses_missing_unused_or_misshapen_weights(backend):
    net = build_model("lenet")
    canonical = weights.export(net)
    with pytest.raises(KeyError, match="missing"):
        weights.load(net, {k: v for k, v in canonical.items() if k != "features.0.bias"})
    with pytest.raises(KeyError, match="unused"):
        weights.load(net, {**canonical, "extra.weight": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="shape"):
        weights.load(net, {**canonical, "features.0.bias": np.zeros(7, np.float32)})


def test_canonical_weights_are_seeded(plugin):
    first, again = plugin.canonical_weights("lenet", 3), plugin.canonical_weights("lenet", 3)
    other = plugin.canonical_weights("lenet", 4)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["features.0.weight"], other["features.0.weight"])
