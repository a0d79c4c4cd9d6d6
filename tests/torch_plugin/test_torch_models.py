"""Tests for fwbench.torch_plugin.models: architecture sizes, shapes, FLOP figures, training."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from stepped_models import swept_params
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fwbench.spec import load_catalogue
from fwbench.torch_plugin import models

IMAGE_MODELS = [n for n in models.MODEL_NAMES if n not in ("lenet", "lstm")]

# torchvision's counts (the TF / JAX ports must hit the same ones); lstm is ours (one bias vector,
# as Keras and Flax).
EXPECTED_PARAMS = {
    "lenet": 61_706,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "lstm": 2_691_842,
}
EXPECTED_CLASSES = dict.fromkeys(models.MODEL_NAMES, 1000) | {"lenet": 10, "lstm": 2}
SMALL_IMAGE = 64  # keeps every forward/backward cheap on 2 CPU cores
SHORT_SEQ = 16


CATALOGUE = load_catalogue()


@functools.cache
def _eval_model(name: str) -> nn.Module:
    # Built once per session: vgg16 alone takes ~2 s to initialise. Only read-only tests use it.
    torch.manual_seed(0)
    return models.build_model(name).eval()


def _meta_model(name: str) -> nn.Module:
    # Meta tensors carry shapes but no data: enough for parameter counts and FLOP counting.
    with torch.device("meta"):
        return models.build_model(name).eval()


def _small_batch(name: str, batch_size: int, device: str = "cpu", image_size: int = SMALL_IMAGE):
    gen = torch.Generator(device=device).manual_seed(0) if device != "meta" else None
    return models.example_batch(
        name, batch_size, image_size=image_size, seq_len=SHORT_SEQ, device=device, generator=gen
    )


def _count_flops(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn(*args)
    return counter.get_total_flops()


def _explicit_lstm_forward(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The lstm model with the recurrence spelled out as plain matmuls FlopCounterMode sees."""
    lstm = model.lstm
    x = model.embedding(tokens)
    h = x.new_zeros(x.shape[0], lstm.hidden_size)
    c = torch.zeros_like(h)
    for t in range(x.shape[1]):
        gates = nn.functional.linear(
            x[:, t], lstm.weight_ih_l0, lstm.bias_l0
        ) + nn.functional.linear(h, lstm.weight_hh_l0)
        i, f, g, o = gates.chunk(4, dim=1)  # PyTorch's gate order
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return model.fc(h)


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_build_model_parameter_count_matches_reference(name):
    model = _meta_model(name)
    assert sum(p.numel() for p in model.parameters()) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_build_model_output_shape_is_batch_by_classes(name):
    inputs, _ = _small_batch(name, 2)
    with torch.no_grad():
        out = _eval_model(name)(inputs)
    assert out.shape == (2, EXPECTED_CLASSES[name])
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["lenet", "resnet18", "mobilenet_v2", "lstm"])
def test_build_model_num_classes_overrides_head(name):
    inputs, _ = _small_batch(name, 2)
    with torch.no_grad():
        assert models.build_model(name, num_classes=7).eval()(inputs).shape == (2, 7)


def test_build_model_is_deterministic_under_manual_seed():
    torch.manual_seed(123)
    first = models.build_model("lenet").state_dict()
    torch.manual_seed(123)
    second = models.build_model("lenet").state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_build_model_unknown_name_raises_value_error_naming_valid_names():
    with pytest.raises(ValueError, match="valid names") as excinfo:
        models.build_model("nope")
    assert "nope" in str(excinfo.value)
    assert all(name in str(excinfo.value) for name in models.MODEL_NAMES)


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        (
            "resnet50",
            [
                "conv1.weight",
                "layer1.0.downsample.1.running_mean",
                "layer4.2.bn3.bias",
                "fc.weight",
            ],
        ),
        ("vgg16", ["features.0.bias", "features.28.weight", "classifier.6.weight"]),
        (
            "mobilenet_v2",
            [
                "features.1.conv.0.0.weight",
                "features.2.conv.1.0.weight",
                "features.2.conv.3.running_var",
                "features.18.0.weight",
                "classifier.1.weight",
            ],
        ),
        (
            "efficientnet_b0",
            [
                "features.0.0.weight",
                "features.1.0.block.1.fc1.weight",
                "features.2.0.block.3.1.weight",
                "features.6.3.block.2.fc2.bias",
                "features.8.1.running_mean",
                "classifier.1.weight",
            ],
        ),
    ],
)
def test_build_model_state_dict_keys_follow_torchvision(name, keys):
    state = _meta_model(name).state_dict()
    assert set(keys) <= state.keys()


def catalogue_flops(name: str, **params: int) -> float:
    """Forward FLOPs per item from the shared catalogue formula (fwbench.spec)."""
    return CATALOGUE.get(name).forward_flops_per_item(params)


@pytest.mark.parametrize("name", IMAGE_MODELS)
@pytest.mark.parametrize("image_size", [64, 96])
def test_catalogue_flops_match_flop_counter(name, image_size):
    inputs, _ = _small_batch(name, 1, image_size=image_size)
    measured = _count_flops(_eval_model(name), inputs)
    assert measured == pytest.approx(catalogue_flops(name, image_size=image_size), rel=1e-12)


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_catalogue_flops_match_flop_counter_at_224_on_meta(name):
    # At 224 the real forward passes would dominate the run time; counting only needs shapes.
    inputs, _ = _small_batch(name, 1, device="meta", image_size=224)
    measured = _count_flops(_meta_model(name), inputs)
    assert measured == pytest.approx(catalogue_flops(name, image_size=224), rel=1e-12)


def test_catalogue_flops_lenet_match_flop_counter():
    inputs, _ = models.example_batch("lenet", 1, image_size=224)  # image_size is ignored
    assert _count_flops(_eval_model("lenet"), inputs) == catalogue_flops("lenet") == 833_040


def test_explicit_lstm_forward_matches_nn_lstm():
    tokens, _ = _small_batch("lstm", 3)
    with torch.no_grad():
        expected = _eval_model("lstm")(tokens)
        actual = _explicit_lstm_forward(_eval_model("lstm"), tokens)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seq_len", [SHORT_SEQ, 50])
def test_forward_flops_lstm_matches_explicit_matmul_count(seq_len):
    tokens, _ = models.example_batch("lstm", 1, seq_len=seq_len)
    measured = _count_flops(_explicit_lstm_forward, _eval_model("lstm"), tokens)
    assert measured == catalogue_flops("lstm", seq_len=seq_len) == 262_144 * seq_len + 512


@pytest.mark.parametrize("name", swept_params(models.MODEL_NAMES))
def test_build_model_sgd_step_gives_finite_loss_and_updates_weights(name):
    torch.manual_seed(0)
    model = models.build_model(name).train()
    inputs, labels = _small_batch(name, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    last = list(model.parameters())[-1]  # the classifier bias: always receives a gradient
    before = last.detach().clone()
    loss = nn.functional.cross_entropy(model(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    assert not torch.equal(before, last.detach())


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_example_batch_shapes_dtypes_and_ranges(name):
    inputs, labels = models.example_batch(name, 3, image_size=96, seq_len=SHORT_SEQ)
    expected_shape = {"lenet": (3, 1, 28, 28), "lstm": (3, SHORT_SEQ)}.get(name, (3, 3, 96, 96))
    assert inputs.shape == expected_shape
    assert inputs.dtype == (torch.int64 if name == "lstm" else torch.float32)
    if name == "lstm":
        assert inputs.min() >= 0
        assert inputs.max() < models.LSTM_VOCAB_SIZE
    assert labels.shape == (3,)
    assert labels.dtype == torch.int64
    assert labels.min() >= 0
    assert labels.max() < EXPECTED_CLASSES[name]


def test_example_batch_is_reproducible_from_generator():
    first = models.example_batch(
        "resnet18", 2, image_size=32, generator=torch.Generator().manual_seed(5)
    )
    second = models.example_batch(
        "resnet18", 2, image_size=32, generator=torch.Generator().manual_seed(5)
    )
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_example_batch_honours_dtype_but_not_for_lstm_ids():
    images, _ = models.example_batch("mobilenet_v2", 1, image_size=32, dtype=torch.bfloat16)
    tokens, _ = models.example_batch("lstm", 1, seq_len=4, dtype=torch.bfloat16)
    assert images.dtype == torch.bfloat16
    assert tokens.dtype == torch.int64


def test_example_batch_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match="resnet50"):
        models.example_batch("nope", 1)
