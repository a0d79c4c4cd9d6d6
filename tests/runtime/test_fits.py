"""Memory between and before cells. A cell that cannot fit in the host's memory is refused
before it is built (runtime/fits.py): on a CPU, Linux would hand the framework the memory and
its OOM killer would end the agent while the weights were being written. The bound counts
weights (three times to train), the batch's inputs and outputs and a generation's KV cache,
nothing more. And the last cell's model is collected before the next one is built."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime import fits
from fwbench.runtime.fits import available_bytes, least_bytes, require_fit
from fwbench.runtime.plugin import OutOfMemory, WorkloadSpec
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import evaluate_expression

CATALOGUE = load_catalogue()
HUGE = {"layers": 128, "hidden": 16384, "heads": 128, "vocab": 262144}


def _spec(name: str, phase: str, batch: int, given: dict[str, int], dtype: str = "float32"):
    workload = CATALOGUE.get(name)
    params = workload.resolve_params({k: v for k, v in given.items() if k in workload.params})
    return WorkloadSpec(workload, phase, batch, dtype, params, 0, 0, "eager")


def test_the_bound_is_weights_inputs_outputs_and_the_cache() -> None:
    spec = _spec("gpt", "infer", 2, {"seq_len": 8})
    weights = 124_439_808
    outputs = 2 * (8 + 8 * 50257)  # tokens in, logits out
    assert least_bytes(spec, CATALOGUE) == 4 * (weights + outputs)
    train = _spec("gpt", "train", 2, {"seq_len": 8}, dtype="bfloat16")
    assert least_bytes(train, CATALOGUE) == 2 * (3 * weights + 2 * outputs)
    generate = _spec("generate", "infer", 3, {})
    cache = CATALOGUE.get("generate").kv_cache_bytes(generate.params, 3, "float32")
    moved = evaluate_expression(generate.workload.elements_forward, generate.params) * 3
    assert least_bytes(generate, CATALOGUE) == 4 * (weights + moved) + cache
    assert least_bytes(_spec("lenet", "infer", 1, {}), CATALOGUE) > 0
    assert least_bytes(_spec("train_to_accuracy", "train", 32, {}), CATALOGUE) > 0


def test_a_cell_too_large_for_the_host_is_refused_naming_both_figures() -> None:
    with pytest.raises(OutOfMemory) as caught:
        require_fit(_spec("gpt", "train", 1, {**HUGE, "seq_len": 8}), CATALOGUE)
    message = str(caught.value)
    assert message.startswith("gpt at these parameters and batch 1 needs at least ")
    assert "weights, gradients and momentum" in message and "GiB available" in message
    require_fit(_spec("gpt", "train", 1, {"layers": 1, "seq_len": 8}), CATALOGUE)  # fits


def test_a_containers_limit_counts_where_it_is_lower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host's available memory as the test sets it: the real figure moves between two
    # readings on a busy host (by 150 kB once in CI).
    host = {"available": 5 * 2**30}

    def memory() -> SimpleNamespace:
        return SimpleNamespace(available=host["available"])

    monkeypatch.setattr(fits.psutil, "virtual_memory", memory)
    (tmp_path / "memory.max").write_text(f"{3 * 2**30}\n")
    (tmp_path / "memory.current").write_text(f"{2**30}\n")
    assert available_bytes(tmp_path) == 2 * 2**30  # the cgroup's room, under the host's
    host["available"] = 2**30
    assert available_bytes(tmp_path) == 2**30  # the host's, under the cgroup's room
    host["available"] = 5 * 2**30
    (tmp_path / "memory.max").write_text("max\n")
    assert available_bytes(tmp_path) == available_bytes(tmp_path / "missing") == 5 * 2**30
    with pytest.raises(OutOfMemory):
        (tmp_path / "memory.max").write_text(f"{2**30 + 1000}\n")
        require_fit(_spec("gpt", "infer", 1, {"seq_len": 8}), CATALOGUE, tmp_path)


def test_the_agent_answers_resource_exhausted_and_takes_the_next_run(stub) -> None:
    params = {**HUGE, "context": 64, "prompt_len": 8, "new_tokens": 4}
    huge = agent_pb2.RunRequest(
        workload="generate",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params=params,
        min_iterations=1,
        warmup_iterations=0,
        min_seconds=0.0,
    )
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Run(huge, timeout=30))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "refused before allocating" in (caught.value.details() or "")
    small = agent_pb2.RunRequest(
        workload="generate",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        min_iterations=1,
        warmup_iterations=0,
        min_seconds=0.0,
        params={"layers": 1, "hidden": 8, "heads": 2, "prompt_len": 4, "new_tokens": 2},
    )
    assert list(stub.Run(small, timeout=30))[-1].result.generation.decode_steps_per_sample == 1


def test_the_last_cells_model_is_collected_before_the_next_is_built(stub, agent) -> None:
    """A model held only by a reference cycle (as a tf.function's closure holds its
    variables) is freed before the next cell is built, even with the automatic collector off:
    a TensorFlow agent otherwise kept every GPT-2 of a sweep."""
    plugin = agent.servicer._plugin  # type: ignore[attr-defined]
    built_models: list[weakref.ref[object]] = []
    real_build = plugin.build

    def build(spec):  # type: ignore[no-untyped-def]
        model = _Cycle()
        built_models.append(weakref.ref(model))
        built = real_build(spec)
        return dataclasses.replace(built, step=lambda: (model, built.step())[1])

    request = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params={"m": 10},
        min_iterations=1,
        warmup_iterations=0,
        min_seconds=0.0,
    )
    gc.disable()
    try:
        plugin.build = build
        list(stub.Run(request, timeout=30))
        assert built_models[0]() is not None  # the cycle outlives its cell ...
        list(stub.Run(request, timeout=30))
        assert built_models[0]() is None  # ... until the next cell is built
    finally:
        gc.enable()
        plugin.build = real_build


class _Cycle:
    def __init__(self) -> None:
        self.itself = self
