"""The user's programs saved by torch.export (`.pt2`, format torch_export): a small network
(a convolution, BatchNorm in eval, a dense layer; the batch axis a torch.export.Dim) exported
here, its signature read, run as a model cell in both modes at two batch sizes with the inputs
every agent makes, its outputs the module's own and its FLOPs counted by FlopCounterMode as
the ONNX agents' counter counts its ONNX export; a file cut short is refused in one line.
Compiling dominates: the compile mode runs one batch size, both with FWBENCH_FULL=1. Runs
inside the torch-cpu agent environment."""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fwbench.runtime import onnx_flops
from fwbench.runtime.model_files import ModelRejected
from fwbench.runtime.model_request import ModelRequest
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.registry import check_plugin
from fwbench.spec import model_files
from fwbench.spec.model_files import TensorInfo
from fwbench.torch_plugin import model_file, torchscript
from fwbench.torch_plugin.plugin import TorchPlugin

FULL = os.environ.get("FWBENCH_FULL") == "1"
pytestmark = [
    pytest.mark.skipif(not model_file.available(), reason="this torch has no torch.export"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.dense = nn.Linear(4, 5)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        pooled = torch.relu(self.norm(self.conv(image))).mean((2, 3))
        return self.dense(pooled), {"pooled": pooled}


# FlopCounterMode's count of one item (a multiply-add is 2): the convolution's 4x8x8 outputs of
# 3x3x3 each and the dense layer's 5 of 4; BatchNorm, ReLU and the mean count nothing.
NET_FLOPS_PER_ITEM = 2 * (4 * 8 * 8) * (3 * 3 * 3) + 2 * 5 * 4


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Net, Path]:
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # statistics that are not the identity, so eval's BatchNorm counts
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 2.0)
    net.eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(
        net, (torch.zeros(2, 3, 8, 8),), dynamic_shapes={"image": {0: batch}}
    )
    path = tmp_path_factory.mktemp("model") / "net.pt2"
    torch.export.save(program, path)
    return net, path


@pytest.fixture(scope="module")
def plugin() -> TorchPlugin:
    return TorchPlugin(PluginContext(device="cpu"))


def _spec(path: Path, batch: int, mode: str, phase: str = "infer") -> WorkloadSpec:
    digest = model_files.digest(path)
    name = model_files.workload_name(path, digest)
    inputs = (TensorInfo("image", (batch, 3, 8, 8), "float32"),)
    model = ModelRequest(str(path), model_file.FORMAT, digest, inputs)
    workload = model_files.workload_def(name, path.name)
    return WorkloadSpec(workload, phase, batch, "float32", {}, 0, 7, mode, model=model)


def test_the_signature_names_inputs_and_outputs_and_leaves_the_batch_open(plugin, exported):
    _, path = exported
    check_plugin("torch", plugin)
    assert plugin.model_formats == (model_file.FORMAT, torchscript.FORMAT)
    signature = plugin.inspect_model(str(path), model_file.FORMAT)
    assert signature.inputs == (TensorInfo("image", (None, 3, 8, 8), "float32"),)
    assert signature.outputs == (
        TensorInfo("output_0", (None, 5), "float32"),
        TensorInfo("output_1", (None, 4), "float32"),
    )
    # conv 4*3*3*3+4, norm 4+4 and its buffers 4+4+1, dense 5*4+5
    assert signature.parameters == 112 + 8 + 9 + 25
    assert signature.phases == ("infer",)
    assert "loss or optimizer" in signature.unsupported_reasons["train"]


@pytest.mark.parametrize(
    ("mode", "batches"), [("eager", (1, 4)), ("compile", (1, 4) if FULL else (4,))]
)
def test_a_cell_computes_what_the_module_computes(plugin, exported, mode, batches):
    net, path = exported
    for batch in batches:
        spec = _spec(path, batch, mode)
        built = plugin.build(spec)
        assert built.settings.mode == mode and built.outputs is not None
        plugin.synchronize(built.step())
        outputs = built.outputs()
        assert set(outputs) == {"output_0", "output_1"}
        assert outputs["output_0"].shape == (batch, 5)
        image = torch.from_numpy(spec.model.arrays(spec.seed)["image"])
        with torch.no_grad():
            scores, extra = net(image)
        reference = {"output_0": scores.numpy(), "output_1": extra["pooled"].numpy()}
        difference = model_files.compare_outputs(outputs, reference)
        assert difference.within, difference.why
        counted = built.flops()  # type: ignore[misc]
        assert counted.flops == NET_FLOPS_PER_ITEM * batch
        assert (
            counted.counter
            == f"torch.utils.flop_counter.FlopCounterMode (torch {torch.__version__})"
        )


def test_training_a_program_is_refused_with_the_reason(plugin, exported):
    with pytest.raises(UnsupportedWorkload, match="no loss or optimizer"):
        plugin.build(_spec(exported[1], 2, "eager", phase="train"))


def test_a_file_cut_short_is_refused_in_one_line(plugin, exported, tmp_path):
    cut = tmp_path / "cut.pt2"
    data = exported[1].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelRejected) as refused:
        plugin.inspect_model(str(cut), model_file.FORMAT)
    message = str(refused.value)
    assert message.startswith("model: cut.pt2 is not a readable torch_export model: ")
    assert "\n" not in message


def test_outputs_are_numpy_arrays_of_every_tensor_leaf(exported):
    run = model_file.build(_spec(exported[1], 3, "eager"), torch.device("cpu"), lambda f: f)
    outputs = run.outputs()
    assert all(isinstance(v, np.ndarray) for v in outputs.values())
    assert [v.shape for v in outputs.values()] == [(3, 5), (3, 4)]


def test_the_program_exported_as_onnx_computes_what_the_module_does(
    exported: tuple[Net, Path], tmp_path: Path
) -> None:
    """torch.onnx.export (model_export.py) of the .pt2, run by ONNX's own reference evaluator
    at a batch the program was not traced at: the outputs named output_0, output_1, the batch
    left open, the values the module's."""
    from fwbench.torch_plugin import model_export

    if not model_export.formats():
        pytest.skip("no onnxscript or onnx in this environment: the plugin offers no export")
    from onnx import load
    from onnx.reference import ReferenceEvaluator

    net, path = exported
    plugin = check_plugin("torch", TorchPlugin(PluginContext(device="cpu")))
    assert plugin.export_formats == ("onnx", torchscript.FORMAT)  # type: ignore[attr-defined]
    dest = tmp_path / "net.onnx"
    tool = plugin.export_model(str(path), "torch_export", "onnx", str(dest))  # type: ignore[attr-defined]
    assert tool.startswith(f"torch.onnx.export (dynamo) torch {torch.__version__}, onnxscript")
    graph = load(str(dest)).graph
    assert [o.name for o in graph.output] == ["output_0", "output_1"]
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param  # the batch stays open
    image = np.random.default_rng(1).uniform(-1, 1, (3, 3, 8, 8)).astype(np.float32)
    got = ReferenceEvaluator(str(dest)).run(None, {graph.input[0].name: image})
    with torch.no_grad():
        scores, extra = net(torch.from_numpy(image))
    np.testing.assert_allclose(got[0], scores.numpy(), atol=1e-5)
    np.testing.assert_allclose(got[1], extra["pooled"].numpy(), atol=1e-5)
    # The ONNX agents' counter (runtime/onnx_flops.py) counts the export as PyTorch counts
    # the program: the same convolution and dense layer, at a batch size of the cell's.
    counted = onnx_flops.count(
        str(dest), [TensorInfo(graph.input[0].name, (3, 3, 8, 8), "float32")]
    )
    assert counted.flops == NET_FLOPS_PER_ITEM * 3


def _script_spec(path: Path, batch: int, mode: str = "eager") -> WorkloadSpec:
    spec = _spec(path, batch, mode)
    model = dataclasses.replace(spec.model, format=torchscript.FORMAT)  # type: ignore[type-var]
    return dataclasses.replace(spec, model=model)


def test_a_program_traced_into_torchscript_runs_as_the_module(plugin, exported, tmp_path):
    """--export to TorchScript (torchscript.py), for the torch that reads no programs: the
    file carries the program's signature, runs at batch sizes it was not traced at, computes
    what the module does and counts its FLOPs as the program does; compile is refused."""
    net, path = exported
    assert (
        torchscript.FORMAT in plugin.model_formats and torchscript.FORMAT in plugin.export_formats
    )
    dest = tmp_path / "net.pt"
    tool = plugin.export_model(str(path), "torch_export", torchscript.FORMAT, str(dest))
    assert tool == f"torch.jit.trace torch {torch.__version__}"
    signature = plugin.inspect_model(str(dest), torchscript.FORMAT)
    program = plugin.inspect_model(str(path), model_file.FORMAT)
    assert (signature.inputs, signature.outputs) == (program.inputs, program.outputs)
    assert signature.parameters == program.parameters and signature.phases == ("infer",)
    for batch in (1, 5):
        built = plugin.build(_script_spec(dest, batch))
        assert built.settings.extra["model_format"] == torchscript.FORMAT
        plugin.synchronize(built.step())
        image = torch.from_numpy(_spec(dest, batch, "eager").model.arrays(7)["image"])
        with torch.no_grad():
            scores, extra = net(image)
        reference = {"output_0": scores.numpy(), "output_1": extra["pooled"].numpy()}
        assert model_files.compare_outputs(built.outputs(), reference).within
        assert built.flops().flops == NET_FLOPS_PER_ITEM * batch  # type: ignore[misc]
    with pytest.raises(UnsupportedWorkload, match="eager only"):
        plugin.build(_script_spec(dest, 1, "compile"))


def test_a_torchscript_file_without_its_signature_is_refused_in_one_line(plugin, tmp_path):
    bare = tmp_path / "bare.pt"
    with warnings.catch_warnings():  # torch 2.13 deprecates torch.jit
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(nn.Linear(3, 2)), str(bare))
    with pytest.raises(ModelRejected) as refused:
        plugin.inspect_model(str(bare), torchscript.FORMAT)
    message = str(refused.value)
    assert message.startswith("model: bare.pt is not a readable torchscript model: ")
    assert "carries no fwbench/signature.json" in message and "\n" not in message


def test_the_documented_torchscript_file_is_read(plugin, tmp_path, monkeypatch):
    """docs/your-model.md's recipe for a TorchScript file of one's own, run as written: the
    plugin reads its signature and runs it."""
    page = (Path(__file__).parents[2] / "docs" / "your-model.md").read_text()
    recipe = page.split("### A TorchScript file", 1)[1].split("```python\n", 1)[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():  # torch 2.13 deprecates torch.jit
        warnings.simplefilter("ignore", DeprecationWarning)
        exec(compile(recipe, "your-model.md", "exec"), {})
    signature = plugin.inspect_model(str(tmp_path / "net.pt"), torchscript.FORMAT)
    assert signature.inputs == (TensorInfo("image", (None, 3, 16, 16), "float32"),)
    path = tmp_path / "net.pt"
    digest = model_files.digest(path)
    inputs = (TensorInfo("image", (2, 3, 16, 16), "float32"),)
    model = ModelRequest(str(path), torchscript.FORMAT, digest, inputs)
    workload = model_files.workload_def(model_files.workload_name(path, digest), path.name)
    spec = WorkloadSpec(workload, "infer", 2, "float32", {}, 0, 7, "eager", model=model)
    assert plugin.build(spec).outputs()["output_0"].shape == (2, 10)
