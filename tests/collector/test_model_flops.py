"""A model row's FLOPs (run/model_prepared.py, flops_columns): the reference agent's count at
the cell's batch size, per item, a training step charged the catalogue's factor, the counter
named with the agent that counted; the arithmetic intensity of the minimum-traffic model
(weights once, inputs and outputs); and, where nothing was counted, the reason instead of a
number. Ceilings are raised by the catalogue's rows only (calibration/ceiling.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.calibration.ceiling import observe
from fwbench.collector.run.model_file import ModelAsked
from fwbench.collector.run.model_prepared import PreparedModel
from fwbench.collector.run.plan import Cell
from fwbench.spec.model_files import TensorInfo

BATCH = 4


def _prepared(parameters: int = 100, output_shape: tuple[int, ...] = (-1, 10)) -> PreparedModel:
    signature = agent_pb2.ModelSignature(
        inputs=[agent_pb2.TensorSpec(name="x", shape=[-1, 8], dtype="float32")],
        outputs=[agent_pb2.TensorSpec(name="y", shape=output_shape, dtype="float32")],
        parameters=parameters,
    )
    asked = ModelAsked(Path("/m/net.onnx"), "onnx", "ab" * 32, "model:net@abababab")
    shapes = {BATCH: (TensorInfo("x", (BATCH, 8), "float32"),)}
    return PreparedModel(asked, "ref", signature, shapes)


def _cell(phase: str = "infer") -> Cell:
    return Cell("other", "model:net@abababab", phase, BATCH, "float32", 0, {})


def test_every_row_is_charged_the_references_count_per_item() -> None:
    prepared = _prepared()
    prepared.flops[BATCH] = agent_pb2.FlopCount(forward_flops=8000.0, counter="XLA (jax 1)")
    columns = prepared.flops_columns(_cell(), train_factor=3.0)
    assert columns["flops_per_item"] == 2000.0
    assert columns["flops_counter"] == "ref: XLA (jax 1)"
    moved = 4 * 100 + 4 * BATCH * 8 + 4 * BATCH * 10  # weights, inputs, outputs (float32)
    assert columns["arithmetic_intensity"] == pytest.approx(8000.0 / moved)
    train = prepared.flops_columns(_cell("train"), train_factor=3.0)
    assert train["flops_per_item"] == 6000.0
    assert train["arithmetic_intensity"] == pytest.approx(columns["arithmetic_intensity"])


@pytest.mark.parametrize(
    ("count", "said"),
    [
        (None, "not counted: no reference step at this batch"),
        (
            agent_pb2.FlopCount(counter="XLA", not_counted="the computation has a loop"),
            "not counted: the computation has a loop",
        ),
    ],
)
def test_without_a_count_the_row_says_why_and_has_no_flops(count, said) -> None:
    prepared = _prepared()
    if count is not None:
        prepared.flops[BATCH] = count
    columns = prepared.flops_columns(_cell(), train_factor=3.0)
    assert columns == {"flops_per_item": None, "flops_counter": said}


def test_no_intensity_where_the_weights_or_an_output_size_are_unknown() -> None:
    count = agent_pb2.FlopCount(forward_flops=8000.0, counter="c")
    for prepared in (_prepared(parameters=0), _prepared(output_shape=(-1, -1))):
        prepared.flops[BATCH] = count
        columns = prepared.flops_columns(_cell(), train_factor=3.0)
        assert columns["flops_per_item"] == 2000.0 and "arithmetic_intensity" not in columns


def test_a_model_row_never_raises_the_hosts_ceiling() -> None:
    """A counter's FLOPs (XLA's count elementwise arithmetic too) are not the catalogue's: a
    model row above the calibrated peak leaves it, where a catalogue row raises it."""
    calibration = {
        "id": "c1",
        "method": {"thread_counts": [2]},
        "peak_flops": {"float32": {"2": {"flops_per_second": 1e9}}},
    }
    row = {"status": "ok", "phase": "infer", "dtype": "float32", "usable_cores": 2}
    row["gflops_per_second"] = 5.0
    assert not observe(calibration, {**row, "flops_counter": "ref: XLA (jax 1)"}, "r1")
    assert observe(calibration, {**row, "flops_counter": "catalogue"}, "r1")
