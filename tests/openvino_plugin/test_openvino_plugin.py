"""The openvino plugin as the runtime drives it, in the openvino-cpu environment: that no ONNX
Runtime is there (the graphs are the onnxruntime plugin's framework-free modules), what
describe() offers and why it leaves out the rest (training), cells of a model and an operator
built and stepped on their inputs, the settings each row records (threads, hint, float32 read back
from the compiled model), the two modes, equivalence on logits only, and refusing to start
where a GPU is asked for or the self-check fails. The contract suite (tests/plugin_contract)
runs beside it."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import numpy as np
import onnx
import pytest

from fwbench.onnxruntime_plugin import models
from fwbench.onnxruntime_plugin.graphs import WeightsError
from fwbench.openvino_plugin import compiled
from fwbench.openvino_plugin.plugin import TRAIN_REASON, OpenVinoPlugin
from fwbench.runtime.architectures import NUM_CLASSES
from fwbench.runtime.plugin import InvalidContext, PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()


@pytest.fixture(scope="module")
def plugin() -> OpenVinoPlugin:
    return OpenVinoPlugin(PluginContext(device="cpu"))


def cell(name: str, mode: str = "latency", phase: str = "infer", **params: int) -> WorkloadSpec:
    workload = CATALOGUE.get(name)
    return WorkloadSpec(workload, phase, 2, "float32", workload.resolve_params(params), 0, 0, mode)


def test_no_onnx_runtime_is_installed_or_loaded(plugin):
    assert importlib.util.find_spec("onnxruntime") is None
    assert not any(name.startswith("onnxruntime") for name in sys.modules)
    assert "fwbench.onnxruntime_plugin.session" not in sys.modules


def test_describe_offers_inference_of_models_and_ops_beside_torch(plugin):
    description = plugin.describe()
    assert (description.framework, description.framework_version) == ("openvino", "2026.4.1")
    assert (description.family, description.family_version) == ("torch", "")
    transformers = {"attention", "bert", "gpt", "generate"}
    assert set(description.capabilities) == {*models.MODELS, *models.OPS, *transformers}
    for capability in description.capabilities.values():
        assert capability.phases == ("infer",) and capability.dtypes == ("float32",)
        assert capability.modes == ("latency", "throughput")
    assert description.unsupported_reasons["*/train"] == TRAIN_REASON
    assert set(description.unsupported_reasons) == {"*/train"}
    assert description.libraries["onnx"] == onnx.__version__
    assert description.intra_op_threads == plugin.default_threads >= 1
    assert [d.kind for d in description.devices] == ["cpu"]


def test_train_and_unoffered_cells_are_refused_with_the_reason(plugin):
    with pytest.raises(UnsupportedWorkload, match="no backward pass"):
        plugin.build(cell("lenet", phase="train"))
    with pytest.raises(UnsupportedWorkload, match="no backward pass"):
        plugin.build(cell("bert", phase="train", layers=1, hidden=8, heads=2, seq_len=4, vocab=10))
    with pytest.raises(UnsupportedWorkload, match="float16"):
        plugin.build(dataclasses.replace(cell("gemm", m=4, n=4, k=4), dtype="float16"))
    with pytest.raises(UnsupportedWorkload, match="performance hints"):
        plugin.build(cell("lenet", mode="all"))


def test_an_operator_cell_steps_on_inputs_set_once(plugin):
    spec = cell("gemm", m=16, n=8, k=32)
    built = plugin.build(spec)
    request = built.step()
    plugin.synchronize(request)
    inputs = models.synthetic_inputs(models.build_op("gemm", spec.params, 2), 2, spec.seed)
    expected = inputs["a"] @ inputs["b"]
    got = request.get_output_tensor(0).data  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert built.settings.layout == ""


@pytest.mark.parametrize("mode", ["latency", "throughput"])
def test_each_mode_is_the_compiled_models_performance_hint(plugin, mode):
    built = plugin.build(cell("resnet18", mode=mode, image_size=32))
    extra = built.settings.extra
    assert (built.settings.mode, extra["performance_hint"]) == (mode, mode.upper())
    assert extra["inference_precision_hint"] == "f32"
    assert extra["execution_devices"] == "CPU" and built.settings.device == "cpu"
    streams, threads = int(extra["num_streams"]), int(extra["inference_num_threads"])
    assert built.settings.intra_op_threads == threads == plugin.default_threads
    assert int(extra["threads_per_stream"]) == threads // streams
    if mode == "latency":
        assert streams == 1
    assert "request.infer()" in extra["timed_step"] and extra["infer_requests"] == "1"
    assert (built.settings.layout, extra["opset"]) == ("NCHW", str(models.OPSET))


def test_both_modes_compute_the_same_logits(plugin):
    logits = []
    for mode in ("latency", "throughput"):
        request = plugin.build(cell("mobilenet_v2", mode=mode, image_size=32)).step()
        logits.append(np.array(request.get_output_tensor(0).data))  # type: ignore[attr-defined]
    assert logits[0].shape == (2, NUM_CLASSES["mobilenet_v2"]) and np.isfinite(logits[0]).all()
    np.testing.assert_allclose(logits[0], logits[1], rtol=1e-4, atol=1e-5)


def test_threads_are_the_cells_or_openvinos_default(plugin):
    one = plugin.build(dataclasses.replace(cell("lstm", seq_len=4), threads=1))
    assert one.settings.intra_op_threads == 1
    assert one.settings.extra["inference_num_threads"] == "1"
    assert one.settings.extra["inference_num_threads_asked"] == "1"
    default = plugin.build(cell("lenet"))
    assert default.settings.intra_op_threads == plugin.default_threads
    assert default.settings.extra["inference_num_threads_asked"] == "0 (OpenVINO's default)"


def _case(weights: dict[str, np.ndarray]) -> EquivalenceCase:
    images = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    return EquivalenceCase(
        "lenet", weights, images, np.zeros(3, np.int64), OptimizerSpec(0.01, 0.9)
    )


def test_equivalence_gives_the_graphs_logits_only(plugin):
    weights = plugin.canonical_weights("lenet", 0)
    result = plugin.equivalence(_case(weights))
    assert result.eval_logits.shape == (3, NUM_CLASSES["lenet"])
    assert result.param_count == 61706
    assert result.loss_before is None and result.loss_after is None
    assert OpenVinoPlugin.equivalence_trains is False
    assert OpenVinoPlugin.equivalence_models == frozenset((*models.MODELS, "bert", "gpt"))
    missing = {k: v for k, v in weights.items() if k != "features.0.weight"}
    with pytest.raises(WeightsError, match=r"features\.0\.weight"):
        plugin.equivalence(_case(missing))


def test_a_cuda_agent_refuses_to_start_in_one_line():
    with pytest.raises(InvalidContext) as refused:
        OpenVinoPlugin(PluginContext(device="cuda"))
    text = str(refused.value)
    assert "FWBENCH_DEVICE=cuda" in text and "CPU device only" in text and "\n" not in text
    assert isinstance(refused.value, RuntimeError)  # as the contract asks of a CUDA refusal


def test_a_failing_self_check_refuses_to_start_in_one_line(monkeypatch):
    def broken(*args: object) -> None:
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:1:\nno CPU plugin")

    monkeypatch.setattr(compiled, "compile_for", broken)
    with pytest.raises(InvalidContext) as refused:
        OpenVinoPlugin(PluginContext(device="cpu"))
    text = str(refused.value)
    assert text.startswith("openvino plugin: lenet self-check failed: RuntimeError")
    assert "\n" not in text
