"""The TensorFlow plugin: every workload x phase x mode, settings, dtype and thread rejection,
synchronize, out-of-memory translation, the oneDNN check, describe(), and the optional
capabilities (equivalence, trainer). Runs inside the tf-mkl / tf-eigen agent environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import stepped_models
import tensorflow as tf

from fwbench.runtime import digits
from fwbench.runtime.plugin import OutOfMemory, PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec
from fwbench.spec import load_catalogue
from fwbench.tf_plugin import environment
from fwbench.tf_plugin.plugin import TensorFlowPlugin, is_out_of_memory
from fwbench.tf_plugin.training import MODES

CATALOGUE = load_catalogue()
# The transformers (attention, bert, gpt, generate) have their own file: test_tf_transformers.py.
TRANSFORMERS = ("attention", "bert", "gpt", "generate")
WORKLOADS = [
    name
    for name, w in CATALOGUE.workloads.items()
    if w.kind in ("op", "model") and name not in TRANSFORMERS
]
SMALL = {
    "gemm": {"m": 32, "n": 16, "k": 8},
    "conv2d": {"channels_in": 4, "channels_out": 8, "height": 8, "width": 8, "kernel": 3},
    "lstm": {"seq_len": 8},
}


@pytest.fixture(scope="module")
def plugin() -> TensorFlowPlugin:
    return TensorFlowPlugin(PluginContext(device="cpu"))


def spec(
    workload: str,
    phase: str = "infer",
    mode: str = "function",
    *,
    batch: int = 2,
    dtype: str = "float32",
    threads: int = 0,
    **params: int,
) -> WorkloadSpec:
    w = CATALOGUE.get(workload)
    resolved = w.resolve_params(params or SMALL.get(workload, {}))
    if "image_size" in w.params and not params:
        resolved["image_size"] = 32
    return WorkloadSpec(w, phase, batch, dtype, resolved, threads, 0, mode)


def _arrays(output: object) -> list[np.ndarray]:
    return [np.asarray(tf.cast(t, tf.float32)) for t in tf.nest.flatten(output)]


# ------------------------------------------------------------------------ the full matrix


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("phase", ["train", "infer"])
@pytest.mark.parametrize("workload", stepped_models.swept_params(WORKLOADS))
def test_every_workload_phase_and_mode_builds_and_steps(plugin, workload, phase, mode):
    # XLA's CPU compiler takes most of this file's time (resnet152 training: ~30 s).
    built = plugin.build(spec(workload, phase, mode))
    output = built.step()
    plugin.synchronize(output)
    arrays = _arrays(output)
    assert arrays and all(np.isfinite(a).all() for a in arrays)
    assert built.settings.mode == mode
    assert built.settings.extra["jit_compile"] == str(mode == "xla").lower()


def test_the_default_mode_is_tf_function_and_all_modes_are_offered(plugin):
    capabilities = plugin.describe().capabilities
    assert set(capabilities) == {*WORKLOADS, *TRANSFORMERS}
    assert all(c.modes == ("function", "xla", "eager") for c in capabilities.values())
    others = [c for name, c in capabilities.items() if name != "generate"]
    assert all(c.phases == ("train", "infer") for c in others)


@pytest.mark.parametrize("phase", ["infer", "train"])
def test_modes_compute_the_same_gemm(plugin, phase):
    results = [_arrays(plugin.build(spec("gemm", phase, mode)).step()) for mode in MODES]
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_gemm_is_batched_and_its_gradients_use_an_all_ones_upstream(plugin):
    infer = _arrays(plugin.build(spec("gemm", batch=3, m=4, n=5, k=6)).step())
    assert infer[0].shape == (3, 4, 5)
    # The training step returns the forward's output too: a tf.function prunes what no result
    # needs, and the gradients do not need it (ops.py): the step would lose its forward pass.
    out, grad_a, grad_b = _arrays(
        plugin.build(spec("gemm", "train", batch=3, m=4, n=5, k=6)).step()
    )
    np.testing.assert_allclose(out, infer[0], rtol=1e-5)
    assert grad_a.shape == (3, 4, 6) and grad_b.shape == (3, 6, 5)
    # With dC = 1, dA = 1 @ B^T: every row of dA is the same (the row sums of B).
    np.testing.assert_allclose(grad_a, np.broadcast_to(grad_a[:, :1], grad_a.shape), rtol=1e-6)


@pytest.mark.parametrize(("kernel", "grown"), [(3, 0), (4, 1), (1, 0)])
def test_conv2d_pads_kernel_over_two_on_every_side(plugin, kernel, grown):
    params = {**SMALL["conv2d"], "kernel": kernel}
    (out,) = _arrays(plugin.build(spec("conv2d", **params)).step())
    assert out.shape == (2, 8 + grown, 8 + grown, 8)
    forward, grad_x, grad_w = _arrays(plugin.build(spec("conv2d", "train", **params)).step())
    assert (
        forward.shape == out.shape
        and grad_x.shape == (2, 8, 8, 4)
        and grad_w.shape == (kernel, kernel, 4, 8)
    )


def test_model_training_steps_lower_the_loss(plugin):
    built = plugin.build(spec("lenet", "train", batch=8))
    losses = [float(built.step()) for _ in range(5)]
    assert losses[-1] < losses[0]


# ------------------------------------------------------------------ settings and rejection


def test_settings_report_layout_dtype_threads_and_onednn(plugin):
    conv = plugin.build(spec("conv2d")).settings
    gemm = plugin.build(spec("gemm", mode="xla")).settings
    resnet = plugin.build(spec("resnet18", "train", dtype="bfloat16")).settings
    assert (conv.layout, gemm.layout, resnet.layout) == ("NHWC", "", "NHWC")
    assert conv.device == "/CPU:0"
    assert conv.intra_op_threads == len(os.sched_getaffinity(0))
    assert gemm.extra["jit_compile"] == "true" and conv.extra["jit_compile"] == "false"
    assert conv.extra["onednn_enabled"] == str(environment.onednn_flag()).lower()
    assert resnet.dtype == "bfloat16" and "pure" in resnet.extra["dtype_policy"]
    assert resnet.extra["batch_norm"] == "FusedBatchNormV3"


def test_bfloat16_and_float64_really_run_in_that_dtype(plugin):
    (bf16,) = tf.nest.flatten(plugin.build(spec("gemm", dtype="bfloat16")).step())
    (f64,) = tf.nest.flatten(plugin.build(spec("gemm", dtype="float64")).step())
    assert (bf16.dtype, f64.dtype) == (tf.bfloat16, tf.float64)
    logits = plugin.build(spec("resnet18", dtype="float64")).step()
    assert logits.dtype == tf.float64


def test_float16_is_refused_on_the_cpu(plugin):
    assert "float16" not in plugin.describe().capabilities["gemm"].dtypes
    with pytest.raises(UnsupportedWorkload, match="float16"):
        plugin.build(spec("gemm", dtype="float16"))


def test_other_thread_counts_are_refused_with_the_restart_hint(plugin):
    current = plugin.describe().intra_op_threads
    with pytest.raises(UnsupportedWorkload, match=f"FWBENCH_THREADS={current + 1}"):
        plugin.build(spec("gemm", threads=current + 1))
    assert plugin.build(spec("gemm", threads=current)).settings.intra_op_threads == current
    assert plugin.describe().threads_fixed_at_startup


def test_unknown_mode_is_refused(plugin):
    with pytest.raises(UnsupportedWorkload, match="mode"):
        plugin.build(spec("gemm", mode="graph"))


def test_synchronize_accepts_every_kind_of_step_output(plugin):
    for output in (tf.ones(3), [tf.ones(2), tf.zeros(1)], None):
        plugin.synchronize(output)


def test_a_cuda_agent_without_a_gpu_refuses_to_start():
    with pytest.raises(RuntimeError, match="no GPU"):
        environment.select_device("cuda")


def test_out_of_memory_errors_are_recognised_by_type_or_message():
    assert is_out_of_memory(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating"))
    assert is_out_of_memory(tf.errors.InternalError(None, None, "Failed to allocate 8 GiB"))
    assert not is_out_of_memory(tf.errors.InvalidArgumentError(None, None, "shapes differ"))
    assert not is_out_of_memory(ValueError("out of memory"))  # not TensorFlow's


def test_out_of_memory_in_a_step_raises_out_of_memory_chained(plugin, monkeypatch):
    built = plugin.build(spec("conv2d", mode="eager"))

    def exhausted(*_args: object, **_kwargs: object) -> None:
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(tf.nn, "conv2d", exhausted)
    with pytest.raises(OutOfMemory, match="OOM when allocating") as caught:
        built.step()
    assert isinstance(caught.value.__cause__, tf.errors.ResourceExhaustedError)


# ------------------------------------------------------------------------ oneDNN and threads


def test_onednn_flag_and_executed_kernels_agree():
    assert environment.onednn_flag() == environment.onednn_ops_in_graph()


def test_onednn_mismatches_refuse_to_start(monkeypatch):
    state = environment.onednn_flag()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0" if state else "1")
    with pytest.raises(RuntimeError, match="TF_ENABLE_ONEDNN_OPTS"):
        environment.verify_onednn()
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.setattr(environment, "onednn_ops_in_graph", lambda: not state)
    with pytest.raises(RuntimeError, match="executed graph"):
        environment.verify_onednn()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "maybe")
    monkeypatch.setattr(environment, "onednn_ops_in_graph", lambda: state)
    with pytest.raises(RuntimeError, match="0/1/true/false"):
        environment.verify_onednn()


_DESCRIBE = """
import json
from fwbench.runtime.plugin import context_from_environment
from fwbench.runtime.registry import load_plugin
d = load_plugin("tensorflow", context_from_environment()).describe()
print(json.dumps({"libraries": dict(d.libraries), "environment": dict(d.environment),
                  "intra": d.intra_op_threads, "inter": d.inter_op_threads,
                  "fixed": d.threads_fixed_at_startup, "framework": d.framework,
                  "devices": [x.kind for x in d.devices], "workloads": sorted(d.capabilities)}))
"""


def _describe_in_subprocess(**env: str) -> dict:
    variables = {**os.environ, **env}
    completed = subprocess.run(
        [sys.executable, "-c", _DESCRIBE],
        env=variables,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_describe_reports_the_onednn_state_asked_for(onednn):
    threads = {"FWBENCH_THREADS": "1", "FWBENCH_INTEROP_THREADS": "1"} if onednn == "0" else {}
    found = _describe_in_subprocess(TF_ENABLE_ONEDNN_OPTS=onednn, **threads)
    assert found["libraries"]["onednn_enabled"] == ("true" if onednn == "1" else "false")
    assert found["environment"]["TF_ENABLE_ONEDNN_OPTS"] == onednn
    assert found["framework"] == "tensorflow" and found["fixed"] is True
    assert found["devices"] == ["cpu"]
    assert found["workloads"] == sorted({*WORKLOADS, *TRANSFORMERS})
    if threads:
        assert (found["intra"], found["inter"]) == (1, 1)
    else:
        assert found["intra"] == found["inter"] == len(os.sched_getaffinity(0))


# ------------------------------------------------------------------------- ReferencePlugin


def _case(plugin: TensorFlowPlugin, model: str, rng: np.random.Generator) -> EquivalenceCase:
    weights = plugin.canonical_weights(model, 0)
    if model == "lstm":
        inputs = rng.integers(0, 20_000, (2, 8))
    else:
        channels, size = (1, 28) if model == "lenet" else (3, 32)
        inputs = rng.standard_normal((2, channels, size, size)).astype(np.float32)
    labels = rng.integers(0, 10 if model == "lenet" else 2, 2)
    return EquivalenceCase(model, weights, inputs, labels, OptimizerSpec(0.01, 0.9))


@pytest.mark.parametrize(
    ("model", "params", "classes"),
    [("lenet", 61_706, 10), ("resnet18", 11_689_512, 1000), ("lstm", 2_691_842, 2)],
)
def test_equivalence_returns_finite_results_and_one_step_lowers_the_loss(
    plugin, model, params, classes
):
    result = plugin.equivalence(_case(plugin, model, np.random.default_rng(0)))
    assert result.param_count == params
    assert result.eval_logits.shape == (2, classes) and result.eval_logits.dtype == np.float32
    assert np.isfinite(result.eval_logits).all()
    assert np.isfinite([result.loss_before, result.loss_after]).all()
    assert result.loss_after < result.loss_before


def test_equivalence_eval_logits_use_running_statistics(plugin):
    case = _case(plugin, "resnet18", np.random.default_rng(1))
    shifted = dict(case.weights)
    shifted["fc.bias"] = case.weights["fc.bias"] + 1.0  # moves every eval logit by exactly 1
    first = plugin.equivalence(case)
    second = plugin.equivalence(
        EquivalenceCase(case.model, shifted, case.inputs, case.labels, case.optimizer)
    )
    np.testing.assert_allclose(second.eval_logits - first.eval_logits, 1.0, rtol=1e-4)
    assert second.loss_before == pytest.approx(first.loss_before, rel=1e-5)  # softmax shift


def test_equivalence_rejects_incomplete_weights(plugin):
    case = _case(plugin, "lenet", np.random.default_rng(0))
    partial = {k: v for k, v in case.weights.items() if k != "classifier.4.bias"}
    with pytest.raises(ValueError, match=r"classifier\.4\.bias"):
        plugin.equivalence(
            EquivalenceCase("lenet", partial, case.inputs, case.labels, case.optimizer)
        )


def _train_digits(plugin: TensorFlowPlugin, mode: str, epochs: int) -> tuple[float, object]:
    data = digits.load_digits()
    shapes = {k: tuple(v.shape) for k, v in plugin.canonical_weights("lenet", 0).items()}
    workload = CATALOGUE.get("train_to_accuracy")
    run_spec = WorkloadSpec(
        workload, "train", 32, "float32", workload.resolve_params({}), 0, 0, mode
    )
    trainer = plugin.trainer(
        "lenet", digits.initial_weights(shapes, 0), OptimizerSpec(0.01, 0.9), run_spec
    )
    n = len(data.train.labels)
    for epoch in range(1, epochs + 1):
        for index in digits.epoch_batches(n, 32, 0, epoch):
            output = trainer.train_step(data.train.images[index], data.train.labels[index])
        plugin.synchronize(output)
    predicted = trainer.predict(data.validation.images)
    assert predicted.dtype == np.int64 and predicted.shape == data.validation.labels.shape
    return float(np.mean(predicted == data.validation.labels)), trainer


def test_trainer_learns_the_digits_without_retracing(plugin):
    accuracy, trainer = _train_digits(plugin, "function", epochs=5)
    assert accuracy > 0.8
    assert trainer.program.train_step.experimental_get_tracing_count() == 1
    assert trainer.settings.mode == "function" and trainer.settings.layout == "NHWC"


def test_trainer_honours_xla_mode(plugin):
    accuracy, trainer = _train_digits(plugin, "xla", epochs=3)
    assert accuracy > 0.5
    assert trainer.settings.extra["jit_compile"] == "true"
