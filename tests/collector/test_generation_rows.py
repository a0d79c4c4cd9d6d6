"""Generation rows in the collector: a GenerationResult is checked against its request and the
catalogue before anything is stored (run/validate.py), and the row's time to first token,
inter-token latency, tokens per second and decode bandwidth are computed from its parts and
the catalogue's decode model (run/generation.py), never taken from the agent."""

from __future__ import annotations

import json

import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.generation import generation_columns
from fwbench.collector.run.normalize import ceilings
from fwbench.collector.run.validate import ProtocolViolation, check_result
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
PARAMS = {
    "layers": 2,
    "hidden": 64,
    "heads": 4,
    "vocab": 500,
    "context": 64,
    "prompt_len": 8,
    "new_tokens": 4,
}
STEPS = 3  # new_tokens - 1


def _request(workload: str = "generate") -> agent_pb2.RunRequest:
    params = PARAMS if workload == "generate" else {"m": 8}
    return agent_pb2.RunRequest(
        run_id="r",
        workload=workload,
        batch_size=2,
        params=params,
        min_iterations=2,
        max_iterations=10,
    )


def _result(
    prefill: list[int], decode: list[int], steps: int = STEPS, samples: list[int] | None = None
) -> agent_pb2.RunResult:
    if samples is None:  # each sample its parts and a little more
        samples = [20_000, 20_000]
    result = agent_pb2.RunResult(
        run_id="r",
        sample_nanoseconds=samples,
        measure_started_unix_nanoseconds=1,
        measure_ended_unix_nanoseconds=1 + sum(samples),
    )
    result.generation.prefill_nanoseconds.extend(prefill)
    result.generation.decode_step_nanoseconds.extend(decode)
    result.generation.decode_steps_per_sample = steps
    return result


GOOD = ([4000, 5000], [1000, 1100, 1200, 900, 1000, 1100])


def test_a_generation_that_keeps_the_protocol_passes() -> None:
    check_result(_request(), _result(*GOOD), CATALOGUE)


@pytest.mark.parametrize(
    ("result", "field", "says"),
    [
        (_result(*GOOD, steps=4), "generation.decode_steps_per_sample", "decodes 3 per"),
        (_result([4000], GOOD[1]), "generation", "1 prefills and 6 decode steps for 2"),
        (_result(GOOD[0], GOOD[1][:5]), "generation", "5 decode steps"),
        (_result(GOOD[0], [0, *GOOD[1][1:]]), "generation.decode_step_nanoseconds", "1 not"),
        (_result([-1, 5000], GOOD[1]), "generation.prefill_nanoseconds", "not positive"),
        (_result(*GOOD, samples=[6000, 8200]), "generation", "sample 0: its prefill and"),
    ],
)
def test_a_generation_that_lies_is_a_protocol_violation(
    result: agent_pb2.RunResult, field: str, says: str
) -> None:
    with pytest.raises(ProtocolViolation, match=says) as caught:
        check_result(_request(), result, CATALOGUE)
    assert caught.value.field == field


@pytest.mark.parametrize("given", ["", "four", "nan", "0", "-1", "17", "inf"])
def test_a_weight_size_that_is_not_a_size_is_a_protocol_violation(given: str) -> None:
    result = _result(*GOOD)
    result.settings.extra["weight_bytes_per_parameter"] = given
    with pytest.raises(ProtocolViolation) as caught:
        check_result(_request(), result, CATALOGUE)
    assert caught.value.field == "settings.extra.weight_bytes_per_parameter"


def test_quantised_weights_are_counted_at_the_size_the_agent_holds_them() -> None:
    result = _result(*GOOD)
    result.settings.extra["weight_bytes_per_parameter"] = "1.0625"
    check_result(_request(), result, CATALOGUE)
    columns = generation_columns(result, CATALOGUE, "generate", PARAMS, 2, "float32")
    moved = CATALOGUE.get("generate").decode_bytes(PARAMS, 2, "float32", 1.0625)
    assert columns["decode_bytes_per_step"] == pytest.approx(moved / 3)
    as_float32 = CATALOGUE.get("generate").decode_bytes(PARAMS, 2, "float32")
    assert moved is not None and as_float32 is not None and moved < as_float32


def test_a_generation_without_its_parts_or_parts_elsewhere_is_refused() -> None:
    bare = _result(*GOOD)
    bare.ClearField("generation")
    with pytest.raises(ProtocolViolation, match="missing"):
        check_result(_request(), bare, CATALOGUE)
    with pytest.raises(ProtocolViolation, match="gemm is not a generation"):
        check_result(_request("gemm"), _result(*GOOD), CATALOGUE)


def test_the_columns_come_from_the_parts_and_the_catalogue() -> None:
    result = _result(*GOOD)
    columns = generation_columns(result, CATALOGUE, "generate", PARAMS, 2, "float32")
    assert columns["prompt_tokens"] == 8 and columns["decode_steps"] == STEPS
    assert columns["time_to_first_token_seconds"] == pytest.approx(4500e-9)
    assert columns["prefill_tokens_per_second"] == pytest.approx(2 * 8 / 4500e-9)
    assert columns["inter_token_latency_seconds"] == pytest.approx(1050e-9)
    per_sample = [3300e-9, 3000e-9]  # each sample's decode steps together
    assert columns["decode_tokens_per_second"] == pytest.approx(
        (2 * 3 / per_sample[0] + 2 * 3 / per_sample[1]) / 2
    )
    moved = CATALOGUE.get("generate").decode_bytes(PARAMS, 2, "float32")
    assert columns["decode_bytes_per_step"] == pytest.approx(moved / 3)
    assert columns["decode_bandwidth_bytes_per_second"] == pytest.approx(moved / 3150e-9)
    assert columns["kv_cache_bytes"] == 2 * 2 * 2 * 64 * (8 + 4 - 1) * 4  # batch, K+V, layers
    assert json.loads(columns["decode_step_samples_ns"]) == GOOD[1]
    assert generation_columns(agent_pb2.RunResult(), CATALOGUE, "gemm", {}, 1, "float32") == {}


def test_the_bandwidth_fraction_is_against_this_hosts_calibration() -> None:
    calibration = {"id": "c", "read_bandwidth": {"1": {"bytes_per_second": 4e9}}, "method": {}}
    row = {
        "workload": "generate",
        "phase": "infer",
        "batch_size": 2,
        "dtype": "float32",
        "params": json.dumps(PARAMS),
        "device": "cpu",
        "launcher": "local",
        "intra_op_threads": 1,
        "decode_bandwidth_bytes_per_second": 1e9,
    }
    annotated = ceilings(CATALOGUE, calibration)(row)
    assert annotated["decode_bandwidth_fraction"] == pytest.approx(0.25)
    elsewhere = ceilings(CATALOGUE, calibration)({**row, "device": "cuda:0"})
    assert elsewhere["decode_bandwidth_fraction"] is None  # no GPU bandwidth calibrated
