"""Tests for PaddlePlugin itself: what Describe says, what build refuses and why, threads,
out-of-memory recognition, and the cells the contract suite does not reach (static mode,
float64). Runs inside the paddle-cpu agent environment; shapes are small."""

from __future__ import annotations

import os
import re

import numpy as np
import paddle
import pytest

from fwbench.paddle_plugin import environment
from fwbench.paddle_plugin.plugin import DTYPES, UNSUPPORTED_REASONS, PaddlePlugin
from fwbench.paddle_plugin.training import MODES
from fwbench.runtime.architectures import MODEL_NAMES
from fwbench.runtime.plugin import (
    OutOfMemory,
    PluginContext,
    UnsupportedWorkload,
    WorkloadSpec,
    translate_out_of_memory,
)
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
SMALL = {
    "gemm": {"m": 16, "n": 8, "k": 12},
    "conv2d": {"channels_in": 3, "channels_out": 4, "height": 9, "width": 10, "kernel": 3},
    "lstm": {"seq_len": 5},
}


@pytest.fixture(scope="module")
def plugin() -> PaddlePlugin:
    return PaddlePlugin(PluginContext(device="cpu"))


def spec(
    workload: str,
    phase: str = "train",
    *,
    batch: int = 2,
    dtype: str = "float32",
    mode: str = "dygraph",
    threads: int = 0,
) -> WorkloadSpec:
    w = CATALOGUE.get(workload)
    params = SMALL.get(workload, {"image_size": 32} if "image_size" in w.params else {})
    return WorkloadSpec(w, phase, batch, dtype, w.resolve_params(params), threads, 0, mode)


# ---------------------------------------------------------------------------- describe


def test_describe_names_paddle_its_build_and_its_own_family(plugin):
    description = plugin.describe()
    assert (description.framework, description.framework_version) == ("paddle", paddle.__version__)
    assert description.family == "" and description.family_version == ""
    for key in ("paddle_commit", "blas", "onednn_compiled", "onednn_enabled", "cuda_build"):
        assert description.libraries[key], key
    assert description.libraries["cuda_build"] == "false"
    assert [d.kind for d in description.devices] == ["cpu"]
    assert description.intra_op_threads == len(os.sched_getaffinity(0))
    assert description.inter_op_threads == 1 and not description.threads_fixed_at_startup


def test_describe_offers_ops_and_models_in_both_modes(plugin):
    capabilities = plugin.describe().capabilities
    transformers = {"attention", "bert", "gpt", "generate"}
    assert set(capabilities) == {"gemm", "conv2d", *MODEL_NAMES, *transformers}
    for name, capability in capabilities.items():
        assert capability.dtypes == DTYPES
        if name not in ("attention", "generate"):
            assert capability.phases == ("train", "infer")
            assert capability.modes == MODES == ("dygraph", "static")
    assert capabilities["attention"].modes == ("dygraph", "static", "plain")
    assert capabilities["attention"].phases == ("train", "infer")
    assert (capabilities["generate"].phases, capabilities["generate"].modes) == (("infer",), MODES)


def test_describe_reports_paddle_flags_that_are_set(plugin, monkeypatch):
    monkeypatch.setenv("FLAGS_check_nan_inf", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    reported = plugin.describe().environment
    assert reported["FLAGS_check_nan_inf"] == "0" and reported["OMP_NUM_THREADS"] == "2"


def test_unsupported_workloads_are_refused_with_their_reason(plugin):
    description = plugin.describe()
    assert set(description.unsupported_reasons) == {"allreduce"}
    for name, reason in UNSUPPORTED_REASONS.items():
        assert name not in description.capabilities
        cell = CATALOGUE.get(name)
        request = WorkloadSpec(
            cell, cell.phases[0], 1, "float32", cell.resolve_params({}), 0, 0, "dygraph"
        )
        with pytest.raises(UnsupportedWorkload, match=re.escape(reason)):
            plugin.build(request)


@pytest.mark.parametrize("change", [{"dtype": "bfloat16"}, {"dtype": "float16"}, {"mode": "eager"}])
def test_unoffered_dtypes_and_modes_are_refused(plugin, change):
    with pytest.raises(UnsupportedWorkload, match="valid:"):
        plugin.build(spec("lenet", **change))


# ------------------------------------------------------------------------------- threads


def test_a_cells_thread_count_is_applied_and_then_the_default_again(plugin):
    assert plugin.build(spec("gemm", "infer", threads=1)).settings.intra_op_threads == 1
    default = plugin.build(spec("gemm", "infer")).settings
    assert default.intra_op_threads == len(os.sched_getaffinity(0))
    assert default.extra["blas_threads"] == str(default.intra_op_threads)


def test_the_default_thread_count(monkeypatch):
    monkeypatch.delenv(environment.THREADS_FLAG, raising=False)
    assert environment.default_threads(0) == len(os.sched_getaffinity(0))
    assert environment.default_threads(3) == 3
    monkeypatch.setenv(environment.THREADS_FLAG, "1")  # the agent's own Paddle setting wins
    assert environment.default_threads(0) == 1
    monkeypatch.setenv(environment.THREADS_FLAG, "many")
    with pytest.raises(RuntimeError, match="FLAGS_paddle_num_threads"):
        environment.default_threads(0)


def test_cuda_is_refused_by_the_cpu_plugin():
    with pytest.raises(RuntimeError, match="CPU only"):
        PaddlePlugin(PluginContext(device="cuda"))


# ------------------------------------------------------------------------- out of memory


def test_paddles_allocation_failure_becomes_out_of_memory():
    too_big = translate_out_of_memory(
        environment.is_out_of_memory, lambda: paddle.zeros([10**7, 10**6])
    )
    with pytest.raises(OutOfMemory, match="ResourceExhausted"):
        too_big()
    assert not environment.is_out_of_memory(ValueError("shape mismatch"))
    assert environment.is_out_of_memory(RuntimeError("(ResourceExhausted) Fail to alloc memory"))


# ------------------------------------------------------------------- cells beyond the suite


@pytest.mark.parametrize("phase", ["train", "infer"])
@pytest.mark.parametrize("name", ["gemm", "conv2d", "lenet", "mobilenet_v2", "lstm"])
def test_static_mode_builds_and_steps(plugin, name, phase):
    built = plugin.build(spec(name, phase, mode="static"))
    assert built.settings.mode == "static" and "to_static" in built.settings.extra["execution"]
    for _ in range(2):
        plugin.synchronize(built.step())


@pytest.mark.parametrize("name", ["gemm", "conv2d"])
def test_static_and_dygraph_ops_agree(plugin, name):
    outputs = [plugin.build(spec(name, mode=mode)).step() for mode in MODES]
    np.testing.assert_allclose(outputs[1].numpy(), outputs[0].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["gemm", "conv2d", "lenet", "resnet18", "lstm"])
def test_float64_cells_compute_in_float64(plugin, name):
    built = plugin.build(spec(name, dtype="float64"))
    assert str(built.step().dtype).endswith("float64")
    assert built.settings.dtype == "float64"


def test_settings_say_what_runs(plugin):
    lenet = plugin.build(spec("lenet")).settings
    assert (lenet.layout, lenet.device) == ("NCHW", "cpu")
    assert lenet.extra["optimizer"].startswith("paddle.optimizer.Momentum")
    assert lenet.extra["onednn_enabled"] in ("true", "false")
    assert plugin.build(spec("gemm")).settings.layout == ""
    lstm = plugin.build(spec("lstm", "infer")).settings
    assert lstm.layout == "" and "second bias" in lstm.extra["lstm"]
