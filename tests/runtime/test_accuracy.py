"""The train_to_accuracy workload: the digits data, the runtime's training loop, and the whole
path over a real gRPC socket with a framework-free reference plugin (numpy softmax regression)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from fake_reference import FakeReferencePlugin

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime import digits
from fwbench.runtime.server import AgentServer, create_server


@pytest.fixture(scope="module")
def data() -> digits.Digits:
    return digits.load_digits()


@pytest.fixture
def reference_agent() -> Iterator[tuple[AgentServer, FakeReferencePlugin]]:
    plugin = FakeReferencePlugin()
    server = create_server(plugin, name="numpy-ref", variant="cpu")
    yield server, plugin
    server.stop(0)


@pytest.fixture
def ref_stub(reference_agent) -> Iterator[agent_pb2_grpc.AgentServiceStub]:
    server, _ = reference_agent
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)


def accuracy_request(batch_size=32, **params) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        workload="train_to_accuracy",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=batch_size,
        params=params,
        seed=3,
    )


def test_digits_split_is_fixed_lenet_shaped_and_in_unit_range(data):
    assert data.train.images.shape == (1438, 1, 28, 28)
    assert data.validation.images.shape == (359, 1, 28, 28)
    assert data.train.images.dtype == np.float32 and data.train.labels.dtype == np.int64
    assert data.train.images.min() == 0.0 and data.train.images.max() == 1.0
    assert set(np.unique(data.validation.labels)) == set(range(10))
    again = digits.load_digits()
    np.testing.assert_array_equal(again.validation.labels, data.validation.labels)


def test_to_lenet_images_repeats_pixels_three_times_inside_a_two_pixel_border():
    pixels = np.arange(64, dtype=np.float64).reshape(1, 8, 8) % 17
    image = digits.to_lenet_images(pixels)[0, 0]
    assert image.shape == (28, 28)
    assert not image[:2].any() and not image[:, :2].any() and not image[26:].any()
    assert image[2 + 3 * 5 + 1, 2 + 3 * 7 + 2] == pytest.approx(pixels[0, 5, 7] / 16)


def test_epoch_batches_drop_the_remainder_and_reshuffle_each_epoch():
    first = digits.epoch_batches(100, 32, seed=1, epoch=1)
    assert [len(b) for b in first] == [32, 32, 32]
    assert len(set(np.concatenate(first))) == 96
    np.testing.assert_array_equal(
        np.concatenate(first), np.concatenate(digits.epoch_batches(100, 32, seed=1, epoch=1))
    )
    second = digits.epoch_batches(100, 32, seed=1, epoch=2)
    assert not np.array_equal(np.concatenate(first), np.concatenate(second))
    with pytest.raises(ValueError, match="between 1 and 100"):
        digits.epoch_batches(100, 101, seed=1, epoch=1)


def test_initial_weights_follow_torch_default_bounds_and_are_seeded():
    shapes = {"conv.weight": (6, 1, 5, 5), "conv.bias": (6,), "fc.weight": (10, 400)}
    weights = digits.initial_weights(shapes, seed=7)
    assert {k: v.shape for k, v in weights.items()} == shapes
    assert np.abs(weights["conv.weight"]).max() <= 1 / 5  # fan_in 25
    assert np.abs(weights["conv.bias"]).max() <= 1 / 5  # the bias uses its weight's fan_in
    assert np.abs(weights["fc.weight"]).max() <= 1 / 20
    assert np.abs(weights["fc.weight"]).max() > 1 / 25  # really uses the whole range
    again = digits.initial_weights(shapes, seed=7)
    np.testing.assert_array_equal(weights["fc.weight"], again["fc.weight"])
    other = digits.initial_weights(shapes, seed=8)
    assert not np.array_equal(weights["fc.weight"], other["fc.weight"])


def test_describe_offers_train_to_accuracy_only_to_reference_plugins(ref_stub, stub):
    reply = ref_stub.Describe(agent_pb2.DescribeRequest(), timeout=5)
    accuracy = next(w for w in reply.workloads if w.name == "train_to_accuracy")
    assert list(accuracy.phases) == [agent_pb2.PHASE_TRAIN]
    assert list(accuracy.modes) == ["eager"]
    assert {p.name for p in accuracy.params} == {"target_accuracy_permille", "max_epochs"}
    plain = stub.Describe(agent_pb2.DescribeRequest(), timeout=5)  # FakePlugin: no reference
    assert "train_to_accuracy" not in {w.name for w in plain.workloads}


def test_train_to_accuracy_reaches_target_and_reports_epochs(ref_stub, reference_agent):
    events = list(ref_stub.Run(accuracy_request(target_accuracy_permille=900), timeout=120))
    result = events[-1].result
    acc = result.accuracy
    assert acc.reached and acc.target_accuracy == pytest.approx(0.9)
    assert acc.dataset == "sklearn-digits"
    assert (acc.train_examples, acc.validation_examples) == (1438, 359)
    assert (acc.learning_rate, acc.momentum) == (0.01, 0.9)
    history = list(acc.history)
    assert [h.epoch for h in history] == list(range(1, acc.epochs + 1))
    assert acc.epochs_to_target == acc.epochs  # stops at the target
    assert history[-1].validation_accuracy >= 0.9
    assert all(h.validation_accuracy < 0.9 for h in history[:-1])
    assert acc.final_accuracy == history[-1].validation_accuracy
    assert acc.time_to_target_nanoseconds == sum(h.train_nanoseconds for h in history)
    assert result.first_iteration_nanoseconds == history[0].train_nanoseconds
    assert list(result.sample_nanoseconds) == [h.train_nanoseconds for h in history[1:]]
    assert result.items_per_sample == (1438 // 32) * 32
    # Identical batches: 44 steps per epoch reached the trainer, no more, no less.
    _, plugin = reference_agent
    assert plugin.trainers[-1].steps == 44 * acc.epochs


def test_train_to_accuracy_unreachable_target_stops_at_max_epochs(ref_stub):
    events = list(
        ref_stub.Run(
            accuracy_request(batch_size=256, target_accuracy_permille=1000, max_epochs=3),
            timeout=60,
        )
    )
    acc = events[-1].result.accuracy
    assert not acc.reached and acc.epochs == 3 and acc.epochs_to_target == 0
    assert acc.time_to_target_nanoseconds == 0
    assert 0.0 < acc.final_accuracy < 1.0


def test_train_to_accuracy_same_seed_same_curve(ref_stub):
    def curve() -> list[float]:
        events = list(ref_stub.Run(accuracy_request(64, max_epochs=2), timeout=60))
        return [h.validation_accuracy for h in events[-1].result.accuracy.history]

    assert curve() == curve()


def test_train_to_accuracy_cancel_stops_between_steps(ref_stub):
    request = accuracy_request(1, target_accuracy_permille=1000, max_epochs=10000)
    request.run_id = "long-accuracy"
    stream = ref_stub.Run(request, timeout=60)
    next(stream)  # started
    ref_stub.Cancel(agent_pb2.CancelRequest(run_id="long-accuracy"), timeout=5)
    with pytest.raises(grpc.RpcError) as caught:
        list(stream)
    assert caught.value.code() == grpc.StatusCode.CANCELLED


def test_train_to_accuracy_batch_above_training_set_is_invalid(ref_stub):
    with pytest.raises(grpc.RpcError) as caught:
        list(ref_stub.Run(accuracy_request(batch_size=5000), timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
