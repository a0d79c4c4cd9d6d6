"""The user's functions serialized by jax.export (`.jax`, format jax_export): a small jitted
function with a symbolic batch exported and serialized here, its signature read (the batch
open), run as a model cell at two batch sizes with the inputs every agent makes, its outputs
the function's own, its FLOPs XLA's count of the function; a file cut short is refused in one
line; a loop is not counted. Runs inside the jax-cpu agent environment."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fwbench.jax_plugin import model_file
from fwbench.jax_plugin.plugin import JaxPlugin
from fwbench.runtime.model_files import ModelRejected
from fwbench.runtime.model_request import ModelRequest
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.registry import check_plugin
from fwbench.spec import model_files
from fwbench.spec.model_files import TensorInfo

pytestmark = pytest.mark.skipif(
    not model_file.available(), reason="no flatbuffers: jax.export cannot deserialize here"
)
WEIGHTS = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)


def net(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    hidden = jnp.tanh(x @ WEIGHTS)
    return jax.nn.softmax(hidden, axis=-1), hidden.sum(axis=-1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shape = jax.export.symbolic_shape("b, 8")
    function = jax.export.export(jax.jit(net))(jax.ShapeDtypeStruct(shape, jnp.float32))
    path = tmp_path_factory.mktemp("model") / "net.jax"
    path.write_bytes(function.serialize())
    return path


@pytest.fixture(scope="module")
def plugin() -> JaxPlugin:
    return JaxPlugin(PluginContext(device="cpu"))


def _spec(path: Path, batch: int, phase: str = "infer") -> WorkloadSpec:
    digest = model_files.digest(path)
    inputs = (TensorInfo("input_0", (batch, 8), "float32"),)
    model = ModelRequest(str(path), model_file.FORMAT, digest, inputs)
    workload = model_files.workload_def(model_files.workload_name(path, digest), path.name)
    return WorkloadSpec(workload, phase, batch, "float32", {}, 0, 3, "jit", model=model)


def test_the_signature_names_inputs_and_outputs_and_leaves_the_batch_open(plugin, exported):
    check_plugin("jax", plugin)
    assert plugin.model_formats == (model_file.FORMAT,)
    signature = plugin.inspect_model(str(exported), model_file.FORMAT)
    assert signature.inputs == (TensorInfo("input_0", (None, 8), "float32"),)
    assert signature.outputs == (
        TensorInfo("output_0", (None, 3), "float32"),
        TensorInfo("output_1", (None,), "float32"),
    )
    assert signature.phases == ("infer",) and signature.parameters == 0
    assert signature.details["platforms"] == "cpu"


@pytest.mark.parametrize("batch", [1, 5])
def test_a_cell_computes_what_the_function_computes(plugin, exported, batch):
    spec = _spec(exported, batch)
    built = plugin.build(spec)
    assert built.settings.mode == "jit" and built.outputs is not None
    plugin.synchronize(built.step())
    outputs = built.outputs()
    assert outputs["output_0"].shape == (batch, 3)
    probabilities, sums = net(jnp.asarray(spec.model.arrays(spec.seed)["input_0"]))
    reference = {"output_0": np.asarray(probabilities), "output_1": np.asarray(sums)}
    difference = model_files.compare_outputs(outputs, reference)
    assert difference.within, difference.why
    # XLA's cost analysis of the deserialized call is its analysis of the function itself:
    # the product's multiply-adds (2 x batch x 8 x 3) and the softmax's elementwise arithmetic.
    counted = built.flops()  # type: ignore[misc]
    x = jnp.asarray(spec.model.arrays(spec.seed)["input_0"])
    assert counted.flops == jax.jit(net).lower(x).compile().cost_analysis()["flops"]
    assert counted.flops >= 2 * batch * 8 * 3
    assert counted.counter == f"XLA cost analysis (jax {jax.__version__})"


def test_training_a_function_is_refused_with_the_reason(plugin, exported):
    with pytest.raises(UnsupportedWorkload, match="no loss or optimizer"):
        plugin.build(_spec(exported, 2, phase="train"))


def test_a_file_cut_short_is_refused_in_one_line(plugin, exported, tmp_path):
    cut = tmp_path / "cut.jax"
    data = exported.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelRejected) as refused:
        plugin.inspect_model(str(cut), model_file.FORMAT)
    message = str(refused.value)
    assert message.startswith("model: cut.jax is not a readable jax_export model: ")
    assert "\n" not in message


def test_a_loop_is_not_counted_rather_than_counted_once() -> None:
    """XLA counts a while loop's body once: a scan of ten products would count as one, so
    the count says why it has none instead (fwbench/runtime/xla_flops.py)."""
    from fwbench.runtime import xla_flops

    weights = jnp.asarray(WEIGHTS[:3])  # 3x3

    def scanned(x: jax.Array) -> jax.Array:
        return jax.lax.scan(lambda c, _: (c @ weights, None), x, None, length=10)[0]

    x = jnp.ones((4, 3))
    counted = xla_flops.count(jax.jit(scanned).lower(x), jax.__version__)
    assert counted.flops == 0 and "loop" in counted.not_counted
    assert xla_flops.count(jax.jit(lambda x: x @ weights).lower(x), "").flops == 2 * 4 * 3 * 3
