"""The torch plugin beyond its models: modes, reference (canonical weights, equivalence,
trainer), start-up thread settings and out-of-memory translation. Runs inside the torch-cpu
agent environment."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from fwbench.runtime import digits
from fwbench.runtime.plugin import OutOfMemory, PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, OptimizerSpec, param_count
from fwbench.spec import load_catalogue
from fwbench.torch_plugin import models, reference
from fwbench.torch_plugin.plugin import TorchPlugin, is_out_of_memory

CATALOGUE = load_catalogue()
# torch.compile imports modules that still use torch.jit.script_method internally.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)


@pytest.fixture(scope="module")
def plugin() -> TorchPlugin:
    return TorchPlugin(PluginContext(device="cpu"))


def spec(workload: str, phase: str, mode: str, batch: int = 2, **params: int) -> WorkloadSpec:
    w = CATALOGUE.get(workload)
    return WorkloadSpec(w, phase, batch, "float32", w.resolve_params(params), 0, 0, mode)


def test_describe_offers_eager_first_then_compile(plugin):
    capabilities = plugin.describe().capabilities
    plain = {"attention": ("eager", "compile", "plain")}  # and its matmul-softmax-matmul
    assert all(c.modes == plain.get(n, ("eager", "compile")) for n, c in capabilities.items())


@pytest.mark.parametrize("phase", ["infer", "train"])
def test_compile_mode_computes_what_eager_computes(plugin, phase):
    small = {"m": 64, "n": 32, "k": 48}
    eager = plugin.build(spec("gemm", phase, "eager", **small))
    compiled = plugin.build(spec("gemm", phase, "compile", **small))
    assert compiled.settings.mode == "compile"
    assert compiled.settings.extra["compile_backend"] == "inductor"
    torch.testing.assert_close(compiled.step(), eager.step())  # same seed, same inputs


def test_compile_mode_trains_a_model(plugin):
    built = plugin.build(spec("lenet", "train", "compile", batch=4))
    losses = [float(built.step().detach()) for _ in range(5)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_single_bias_lstm_equals_nn_lstm_with_a_zero_second_bias():
    torch.manual_seed(0)
    ours = models.SingleBiasLSTM(5, 7)
    theirs = nn.LSTM(5, 7, batch_first=True)
    with torch.no_grad():
        theirs.weight_ih_l0.copy_(ours.weight_ih_l0)
        theirs.weight_hh_l0.copy_(ours.weight_hh_l0)
        theirs.bias_ih_l0.copy_(ours.bias_l0)
        theirs.bias_hh_l0.zero_()
    x = torch.randn(3, 4, 5)
    _, (h_n, _) = theirs(x)
    torch.testing.assert_close(ours(x), h_n[-1])
    assert sum(p.numel() for p in ours.parameters()) == 4 * 7 * (5 + 7 + 1)


@pytest.mark.parametrize("name", ["lenet", "mobilenet_v2", "lstm"])
def test_canonical_weights_round_trip_through_load(name):
    weights = reference.canonical_weights(name, seed=4)
    assert "num_batches_tracked" not in " ".join(weights)
    again = reference.export(reference.load(name, weights))
    assert weights.keys() == again.keys()
    for key in weights:
        np.testing.assert_array_equal(weights[key], again[key])
    assert reference.canonical_weights(name, seed=4)[next(iter(weights))].tolist() == (
        weights[next(iter(weights))].tolist()
    )


def test_load_rejects_missing_or_unexpected_weights():
    weights = reference.canonical_weights("lenet", 0)
    weights.pop("features.0.bias")
    with pytest.raises(ValueError, match=r"missing \['features.0.bias'\]"):
        reference.load("lenet", weights)
    weights = reference.canonical_weights("lenet", 0) | {"extra.weight": np.zeros(1, np.float32)}
    with pytest.raises(ValueError, match="unexpected"):
        reference.load("lenet", weights)


def test_equivalence_reports_counts_logits_and_a_falling_loss():
    weights = reference.canonical_weights("resnet18", 1)
    rng = np.random.default_rng(0)
    case = EquivalenceCase(
        "resnet18",
        weights,
        rng.standard_normal((2, 3, 64, 64)).astype(np.float32),
        np.array([3, 7]),
        OptimizerSpec(0.01, 0.9),
    )
    result = reference.equivalence(case)
    assert result.param_count == param_count(weights) == 11_689_512
    assert result.eval_logits.shape == (2, 1000)
    assert result.loss_after < result.loss_before


def test_trainer_learns_digits(plugin):
    data = digits.load_digits()
    shapes = {k: v.shape for k, v in plugin.canonical_weights("lenet", 0).items()}
    trainer = plugin.trainer(
        "lenet",
        digits.initial_weights(shapes, 0),
        OptimizerSpec(0.01, 0.9),
        spec("train_to_accuracy", "train", "eager", batch=32),
    )
    assert trainer.settings.layout == "NCHW"
    for epoch in (1, 2, 3, 4, 5):
        for index in digits.epoch_batches(len(data.train.labels), 32, 0, epoch):
            trainer.train_step(data.train.images[index], data.train.labels[index])
    predicted = trainer.predict(data.validation.images)
    assert predicted.dtype == np.int64
    assert np.mean(predicted == data.validation.labels) > 0.8


def test_fwbench_threads_sets_torch_threads_at_start_up():
    code = (
        "from fwbench.runtime.plugin import context_from_environment as context;"
        "from fwbench.runtime.registry import load_plugin;"
        "print(load_plugin('torch', context()).describe().intra_op_threads)"
    )
    env = {**os.environ, "FWBENCH_THREADS": "1", "FWBENCH_DEVICE": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stderr


def test_zero_threads_restores_the_default_after_a_thread_sweep(plugin):
    default = plugin.default_threads
    one = plugin.build(
        WorkloadSpec(**{**spec("gemm", "infer", "eager", m=8, n=8, k=8).__dict__, "threads": 1})
    )
    assert one.settings.intra_op_threads == 1
    again = plugin.build(spec("gemm", "infer", "eager", m=8, n=8, k=8))
    assert again.settings.intra_op_threads == default


@pytest.mark.parametrize(
    ("dtype", "mode", "phase"),
    [("float16", "eager", "infer"), ("float32", "jit", "infer"), ("float32", "eager", "test")],
)
def test_what_describe_does_not_offer_is_refused(plugin, dtype, mode, phase):
    cell = spec("gemm", "infer", "eager", m=8, n=8, k=8)
    with pytest.raises(UnsupportedWorkload, match="offered"):
        plugin.build(dataclasses.replace(cell, dtype=dtype, mode=mode, phase=phase))


def test_out_of_memory_errors_are_recognised_by_type_or_the_cpu_allocators_message():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


_OUT_OF_MEMORY = """
import resource
from fwbench.runtime.plugin import OutOfMemory, PluginContext, WorkloadSpec
from fwbench.spec import load_catalogue
from fwbench.torch_plugin.plugin import TorchPlugin

plugin = TorchPlugin(PluginContext(device="cpu"))
gemm = load_catalogue().get("gemm")
big = gemm.resolve_params({"m": 32768, "n": 32768, "k": 32768})
resource.setrlimit(resource.RLIMIT_AS, (4 * 1024**3, 4 * 1024**3))
try:
    plugin.build(WorkloadSpec(gemm, "infer", 1, "float64", big, 0, 0, "eager"))
except OutOfMemory as error:
    print(type(error.__cause__).__name__, "|", error)
"""


def test_running_out_of_host_memory_raises_out_of_memory_chained():
    # In a subprocess: an 8 GiB matrix under a 4 GiB address-space limit.
    done = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True)
    cause, _, message = done.stdout.strip().partition(" | ")
    assert cause == "RuntimeError", done.stderr[-2000:]
    assert "can't allocate memory" in message


def test_out_of_memory_in_a_step_is_translated_too(plugin, monkeypatch):
    built = plugin.build(spec("gemm", "infer", "eager", m=8, n=8, k=8))

    def exhausted(*_args: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch, "matmul", exhausted)
    with pytest.raises(OutOfMemory) as caught:
        built.step()
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError)


def test_torch_batch_norm_refuses_to_train_on_one_value_per_channel():
    """The premise of the check below, in this torch: its rule, not the plugin's."""
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm2d(4).train()(torch.zeros(1, 4, 1, 1))


@pytest.mark.parametrize(
    ("name", "layer"), [("resnet18", "layer4.0.downsample.1"), ("mobilenet_v2", "features.14")]
)
def test_training_on_a_1x1_map_at_batch_1_is_unsupported_naming_batch_norm(plugin, name, layer):
    with pytest.raises(UnsupportedWorkload) as refused:
        plugin.build(spec(name, "train", "eager", batch=1, image_size=32))
    message = str(refused.value)
    assert f"BatchNorm layer {layer}" in message and "gets a 1x1 feature map" in message
    assert "Expected more than 1 value per channel when training" in message
    assert "it runs at batch size 2 or more, or at image_size 64 or more" in message
    # What it says runs, runs; inference never normalises with batch statistics.
    plugin.build(spec(name, "train", "eager", batch=1, image_size=64)).step()
    plugin.build(spec(name, "infer", "eager", batch=1, image_size=32)).step()


def test_pipeline_stages_begin_evenly_spread_over_the_resnet() -> None:
    from fwbench.torch_plugin.pipeline_stages import split_points

    assert split_points("resnet18", 1) == []
    assert split_points("resnet18", 2) == ["layer3"]
    assert split_points("resnet50", 3) == ["layer2", "layer4"]
    assert split_points("resnet18", 4) == ["layer2", "layer3", "layer4"]
    with pytest.raises(UnsupportedWorkload, match="at most 4 stages"):
        split_points("resnet18", 5)


def test_gpu_switches_set_torch_and_every_cuda_row_reports_them():
    """FWBENCH_TF32 / FWBENCH_CUDNN_BENCHMARK (PluginContext) set torch's process-wide flags;
    gpu_settings() is what a CUDA row's settings carry."""
    from fwbench.torch_plugin.plugin import float32_kinds, gpu_settings

    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    try:
        TorchPlugin(PluginContext(device="cpu", tf32=True, cudnn_benchmark=True))
        on, kinds_on = gpu_settings(), float32_kinds()
        TorchPlugin(PluginContext(device="cpu", tf32=False, cudnn_benchmark=False))
        off, kinds_off = gpu_settings(), float32_kinds()
        torch.backends.cudnn.allow_tf32 = True  # torch's own default: float32 products only
        kinds_default = float32_kinds()
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = saved
    assert (on["tf32_matmul"], on["tf32_cudnn"], on["cudnn_benchmark"]) == ("True",) * 3
    assert (off["tf32_matmul"], off["tf32_cudnn"], off["cudnn_benchmark"]) == ("False",) * 3
    assert {"cudnn_deterministic", "float32_matmul_precision", "cuda_runtime"} <= set(on)
    # What a float32 row then ran in (the float32_matmul / float32_conv settings).
    assert (kinds_on, kinds_off, kinds_default) == (
        ("tf32", "tf32"),
        ("float32", "float32"),
        ("float32", "tf32"),
    )


def test_half_precision_rows_say_they_run_pure_not_autocast(plugin):
    w = CATALOGUE.get("gemm")
    params = w.resolve_params({"m": 8, "n": 8, "k": 8})
    bf16 = plugin.build(WorkloadSpec(w, "infer", 1, "bfloat16", params, 0, 0, "eager"))
    assert bf16.step().dtype == torch.bfloat16
    assert bf16.settings.extra["dtype_policy"].startswith("pure")
    assert bf16.report is None  # CUDA events only on CUDA
    assert (
        "dtype_policy"
        not in plugin.build(spec("gemm", "infer", "eager", m=8, n=8, k=8)).settings.extra
    )
