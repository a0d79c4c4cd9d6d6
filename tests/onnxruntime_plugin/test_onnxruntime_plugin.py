"""The onnxruntime plugin as the runtime drives it, in the onnxruntime-cpu environment: what
describe() offers and why it leaves out the rest, a train cell refused with its reason, modes
that really change ORT's graph optimisation, the session settings each row records, the
bound step computing the graph's logits, equivalence on logits only, and refusing to start
where there is no CUDA provider. The contract suite (tests/plugin_contract) runs beside it."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fwbench.onnxruntime_plugin import models, session
from fwbench.onnxruntime_plugin.graphs import WeightsError
from fwbench.onnxruntime_plugin.plugin import TRAIN_REASON, OnnxRuntimePlugin
from fwbench.runtime.architectures import NUM_CLASSES
from fwbench.runtime.plugin import InvalidContext, PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()


@pytest.fixture(scope="module")
def plugin() -> OnnxRuntimePlugin:
    return OnnxRuntimePlugin(PluginContext(device="cpu"))


def cell(name: str, phase: str = "infer", mode: str = "all", **params: int) -> WorkloadSpec:
    workload = CATALOGUE.get(name)
    return WorkloadSpec(workload, phase, 2, "float32", workload.resolve_params(params), 0, 0, mode)


def test_describe_offers_inference_of_models_and_ops_beside_torch(plugin):
    description = plugin.describe()
    assert description.framework == "onnxruntime"
    assert description.framework_version == ort.__version__
    assert (description.family, description.family_version) == ("torch", "")
    transformers = {"attention", "bert", "gpt", "generate"}
    assert set(description.capabilities) == {*models.MODELS, *models.OPS, *transformers}
    for capability in description.capabilities.values():
        assert capability.phases == ("infer",) and capability.modes[0] == "all"
    assert description.unsupported_reasons["*/train"] == TRAIN_REASON
    assert description.libraries["onnx"] == onnx.__version__
    assert "CPUExecutionProvider" in description.libraries["providers"]


def test_a_train_cell_is_refused_with_the_reason(plugin):
    with pytest.raises(UnsupportedWorkload, match="no backward pass"):
        plugin.build(cell("lenet", phase="train"))


def test_settings_record_the_session(plugin):
    built = plugin.build(cell("resnet18", image_size=32))
    extra = built.settings.extra
    assert extra["execution_providers"] == "CPUExecutionProvider"
    assert extra["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert extra["execution_mode"] == "ORT_SEQUENTIAL"
    assert extra["opset"] == str(models.OPSET)
    assert "run_with_iobinding" in extra["timed_step"]
    assert "PyTorch layouts" in extra["exported_from"]
    assert (built.settings.layout, built.settings.device) == ("NCHW", "cpu")


@pytest.mark.parametrize(
    ("mode", "level"),
    [
        ("all", "ORT_ENABLE_ALL"),
        ("extended", "ORT_ENABLE_EXTENDED"),
        ("basic", "ORT_ENABLE_BASIC"),
        ("disabled", "ORT_DISABLE_ALL"),
    ],
)
def test_each_mode_is_the_sessions_optimisation_level(plugin, mode, level):
    built = plugin.build(cell("lenet", mode=mode))
    assert (built.settings.mode, built.settings.extra["graph_optimization_level"]) == (mode, level)


def _optimized_ops(tmp_path, mode: str) -> list[str]:
    graph = models.build_model("resnet18", {"image_size": 32})
    path = tmp_path / f"{mode}.onnx"
    session.create(graph.serialized, session.CPU, mode, optimized_model_path=str(path))
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def test_modes_change_the_graph_ort_runs(tmp_path):
    """Disabled runs the graph as built (BatchNorm nodes and all); basic already folds each
    BatchNorm into its convolution."""
    disabled, basic = _optimized_ops(tmp_path, "disabled"), _optimized_ops(tmp_path, "basic")
    assert disabled.count("BatchNormalization") == 20
    assert "BatchNormalization" not in basic and len(basic) < len(disabled)


def test_threads_are_the_cells_or_ort_default(plugin):
    one = plugin.build(dataclasses.replace(cell("lenet"), threads=1))
    assert one.settings.intra_op_threads == 1
    assert one.settings.extra["intra_op_num_threads"] == "1"
    default = plugin.build(cell("lenet"))
    assert default.settings.intra_op_threads == session.default_intra_op_threads()


def test_the_bound_step_computes_the_graphs_logits(plugin):
    spec = cell("mobilenet_v2", image_size=32)
    built = plugin.build(spec)
    binding = built.step()
    plugin.synchronize(binding)
    bound = binding.get_outputs()[0].numpy()
    graph = models.build_model("mobilenet_v2", spec.params, seed=spec.seed)
    images = np.random.default_rng([spec.seed, 1]).standard_normal((2, 3, 32, 32), np.float32)
    plain = ort.InferenceSession(graph.serialized, providers=["CPUExecutionProvider"])
    expected = plain.run(None, {models.INPUT: images})[0]
    np.testing.assert_allclose(bound, expected, rtol=1e-5, atol=1e-6)


def test_unoffered_dtypes_and_modes_are_refused(plugin):
    with pytest.raises(UnsupportedWorkload, match="float16"):
        plugin.build(dataclasses.replace(cell("gemm", m=4, n=4, k=4), dtype="float16"))
    with pytest.raises(UnsupportedWorkload, match="graph optimisation levels"):
        plugin.build(cell("lenet", mode="jit"))


def _case(weights: dict[str, np.ndarray]) -> EquivalenceCase:
    images = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    return EquivalenceCase(
        "lenet", weights, images, np.zeros(3, np.int64), OptimizerSpec(0.01, 0.9)
    )


def test_equivalence_gives_logits_only(plugin):
    result = plugin.equivalence(_case(plugin.canonical_weights("lenet", 0)))
    assert result.eval_logits.shape == (3, NUM_CLASSES["lenet"])
    assert result.param_count == 61706
    assert result.loss_before is None and result.loss_after is None
    assert OnnxRuntimePlugin.equivalence_trains is False
    assert OnnxRuntimePlugin.equivalence_models == frozenset((*models.MODELS, "bert", "gpt"))


def test_equivalence_refuses_a_corrupted_weight_set_naming_it(plugin):
    weights = plugin.canonical_weights("lenet", 0)
    missing = {k: v for k, v in weights.items() if k != "features.0.weight"}
    with pytest.raises(WeightsError, match=r"features\.0\.weight"):
        plugin.equivalence(_case(missing))
    wrong = weights | {"classifier.4.bias": np.zeros(9, np.float32)}
    with pytest.raises(WeightsError, match=r"classifier\.4\.bias.*\(9,\)"):
        plugin.equivalence(_case(wrong))


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this ORT has CUDA"
)
def test_a_cuda_agent_without_the_cuda_provider_refuses_in_one_line():
    with pytest.raises(InvalidContext) as refused:
        OnnxRuntimePlugin(PluginContext(device="cuda"))
    assert "CUDAExecutionProvider" in str(refused.value) and "\n" not in str(refused.value)
    assert isinstance(refused.value, RuntimeError)  # as the contract asks of a CUDA refusal
