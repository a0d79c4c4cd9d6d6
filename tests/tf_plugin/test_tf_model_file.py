"""The user's TensorFlow SavedModels (format savedmodel): a small Keras network (convolution,
BatchNorm, dense) exported with `model.export(..., format="tf_saved_model")` and a plain
tf.Module saved with `tf.saved_model.save`, both made here; their serving_default signatures
read (names, the open batch, dtypes, parameters), cells built as the runtime builds them from
a RunRequest in both modes, their outputs Keras' own `predict` (and the module's arithmetic),
training refused with its reason, and the folders refused in one line: no saved_model.pb, a
corrupt one, no serving_default signature, an input fwbench cannot make. Runs inside the
tf-mkl (or tf-eigen) agent environment."""

from __future__ import annotations

import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.model_files import ModelRejected, inspect, model_workload_spec
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.registry import check_plugin
from fwbench.spec import model_files
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES
from fwbench.spec.model_files import TensorInfo, make_inputs
from fwbench.tf_plugin import model_file
from fwbench.tf_plugin.plugin import TensorFlowPlugin
from fwbench.tf_plugin.training import MODES

SEED = 7
IMAGE = (8, 8, 3)
Inputs = dict[str, tuple[tuple[int, ...], str]]  # a cell's inputs: name -> (shape, dtype)


@pytest.fixture(scope="module")
def plugin() -> TensorFlowPlugin:
    return TensorFlowPlugin(PluginContext(device="cpu"))


def _keras_net() -> keras.Model:
    """Convolution, BatchNorm with moving statistics away from 0 and 1, pooling, dense; the
    weights Keras' initialisers make from one seed."""
    keras.utils.set_random_seed(1)
    layers = keras.layers
    image = keras.Input(IMAGE, name="image")
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(image)
    norm = layers.BatchNormalization()
    x = layers.GlobalAveragePooling2D()(norm(x))
    model = keras.Model(image, layers.Dense(5, name="logits")(x))
    norm.moving_mean.assign(np.linspace(-0.5, 0.5, 4, dtype=np.float32))
    norm.moving_variance.assign(np.linspace(0.5, 1.5, 4, dtype=np.float32))
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[keras.Model, Path]:
    model = _keras_net()
    path = tmp_path_factory.mktemp("keras") / "net"
    model.export(str(path), format="tf_saved_model", verbose=False)
    return model, path


class Scorer(tf.Module):
    """Two inputs (one integer), three outputs of three dtypes, a variable that is not
    trainable; `other` is a second function for a SavedModel without serving_default."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(2)
        self.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32))
        self.b = tf.Variable(rng.standard_normal(3).astype(np.float32))
        self.scale = tf.Variable(2.0, trainable=False)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 4], tf.float32, name="x"),
            tf.TensorSpec([None], tf.int32, name="ids"),
        ]
    )
    def serve(self, x: tf.Tensor, ids: tf.Tensor) -> dict[str, tf.Tensor]:
        probs = tf.nn.softmax(x @ self.w + self.b)
        return {"probs": probs, "count": ids * 2, "a_sum": tf.reduce_sum(x, 1) * self.scale}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def other(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"length": tf.strings.length(text)}


def _save(folder: Path, signatures: dict[str, str]) -> Path:
    module = Scorer()
    chosen = {key: getattr(module, name) for key, name in signatures.items()}
    tf.saved_model.save(module, str(folder), signatures=chosen or None)
    return folder


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("module") / "scorer", {"serving_default": "serve"})


def _request(path: Path, inputs: Inputs, phase: str, mode: str) -> agent_pb2.RunRequest:
    sha = model_files.digest(path)
    specs = [agent_pb2.TensorSpec(name=n, shape=s, dtype=d) for n, (s, d) in inputs.items()]
    return agent_pb2.RunRequest(
        workload=model_files.workload_name(path, sha),
        model=agent_pb2.ModelFile(path=str(path), format="savedmodel", sha256=sha, inputs=specs),
        phase=PHASE_VALUES[phase],
        batch_size=next(iter(inputs.values()))[0][0],
        dtype=DTYPE_VALUES["float32"],
        mode=mode,
        seed=SEED,
    )


def _spec(
    plugin: TensorFlowPlugin, path: Path, inputs: Inputs, phase: str = "infer", mode: str = ""
) -> WorkloadSpec:
    """The cell as the runtime makes it from a RunRequest (model_workload_spec)."""
    request = _request(path, inputs, phase, mode)
    return model_workload_spec(request, plugin, plugin.model_formats, None)


def _image(batch: int) -> Inputs:
    return {"image": ((batch, *IMAGE), "float32")}


def _rejected(plugin: TensorFlowPlugin, path: Path) -> str:
    with pytest.raises(ModelRejected) as rejected:
        plugin.inspect_model(str(path), "savedmodel")
    message = str(rejected.value)
    assert "\n" not in message
    assert message.startswith(f"model: {path.name} is not a readable savedmodel model: ")
    return message


def test_the_plugin_reads_savedmodels_in_its_graph_modes(plugin):
    check_plugin("tensorflow", plugin)
    assert plugin.model_formats == ("savedmodel",)
    capability = plugin.model_capability
    assert capability.phases == ("infer",) and capability.dtypes == ("float32",)
    assert capability.modes == ("function", "xla") and set(capability.modes) <= set(MODES)


def test_a_keras_export_is_read_with_its_batch_open(plugin, exported):
    model, path = exported
    signature = plugin.inspect_model(str(path), "savedmodel")
    assert signature.inputs == (TensorInfo("image", (None, *IMAGE), "float32"),)
    assert signature.outputs == (TensorInfo("output_0", (None, 5), "float32"),)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert signature.parameters == trainable == 3 * 3 * 3 * 4 + 4 + 2 * 4 + 4 * 5 + 5
    assert signature.phases == ("infer",)
    assert signature.unsupported_reasons == {"train": model_file.TRAIN_REASON}
    assert signature.details["signature"] == "serving_default"
    message = inspect(plugin, agent_pb2.InspectModelRequest(model=_model_message(path)))
    assert [(t.name, list(t.shape)) for t in message.inputs] == [("image", [-1, *IMAGE])]


def _model_message(path: Path) -> agent_pb2.ModelFile:
    return agent_pb2.ModelFile(path=str(path), format="savedmodel")


def test_a_modules_signature_is_sorted_by_key_with_its_dtypes(plugin, scorer):
    signature = plugin.inspect_model(str(scorer), "savedmodel")
    assert signature.inputs == (
        TensorInfo("ids", (None,), "int32"),
        TensorInfo("x", (None, 4), "float32"),
    )
    assert signature.outputs == (
        TensorInfo("a_sum", (None,), "float32"),
        TensorInfo("count", (None,), "int32"),
        TensorInfo("probs", (None, 3), "float32"),
    )
    assert signature.parameters == 4 * 3 + 3  # w and b; not the untrainable scale
    assert plugin.saved_models.get(str(scorer)) is plugin.saved_models.get(str(scorer))


@pytest.mark.parametrize(("mode", "batch"), [("function", 4), ("xla", 1)])
def test_outputs_are_keras_predict(plugin, exported, mode, batch):
    model, path = exported
    spec = _spec(plugin, path, _image(batch), mode=mode)
    built = plugin.build(spec)
    settings = built.settings
    assert settings.mode == mode and settings.extra["model_format"] == "savedmodel"
    assert settings.extra["jit_compile"] == str(mode == "xla").lower()
    plugin.synchronize(built.step())
    assert built.outputs is not None
    outputs = built.outputs()
    image = make_inputs((TensorInfo("image", (batch, *IMAGE), "float32"),), SEED)["image"]
    expected = model.predict(image, verbose=0)
    assert list(outputs) == ["output_0"] and outputs["output_0"].shape == (batch, 5)
    np.testing.assert_allclose(outputs["output_0"], expected, rtol=0, atol=1e-5)


def test_a_modules_outputs_come_back_by_key_in_sorted_order(plugin, scorer):
    inputs = {"ids": ((3,), "int32"), "x": ((3, 4), "float32")}
    outputs = plugin.build(_spec(plugin, scorer, inputs)).outputs()
    assert list(outputs) == ["a_sum", "count", "probs"]
    feed = make_inputs([TensorInfo(n, s, d) for n, (s, d) in inputs.items()], SEED)
    module = Scorer()  # the same weights: one seed
    assert outputs["count"].dtype == np.int32
    np.testing.assert_array_equal(outputs["count"], feed["ids"] * 2)
    np.testing.assert_allclose(outputs["a_sum"], feed["x"].sum(1) * 2.0, atol=1e-6)
    logits = feed["x"] @ module.w.numpy() + module.b.numpy()
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(outputs["probs"], probs, atol=1e-6)


def test_training_and_eager_are_refused(plugin, exported):
    _, path = exported
    with pytest.raises(UnsupportedWorkload, match="infer only"):
        _spec(plugin, path, _image(2), phase="train")
    with pytest.raises(UnsupportedWorkload, match="mode 'eager' not offered"):
        _spec(plugin, path, _image(2), mode="eager")
    spec = _spec(plugin, path, _image(2))
    train = WorkloadSpec(
        spec.workload, "train", 2, "float32", {}, 0, SEED, "function", model=spec.model
    )
    with pytest.raises(UnsupportedWorkload, match="no loss or optimizer fwbench can train with"):
        plugin.build(train)


def test_a_folder_without_saved_model_pb_is_refused_in_one_line(plugin, scorer, tmp_path):
    folder = tmp_path / "empty"
    shutil.copytree(scorer / "variables", folder / "variables")
    assert "does not exist" in _rejected(plugin, folder)


def test_a_corrupt_saved_model_pb_is_refused_in_one_line(plugin, scorer, tmp_path):
    folder = tmp_path / "corrupt"
    shutil.copytree(scorer, folder)
    (folder / "saved_model.pb").write_bytes(b"\x0a\xff\xff not a protocol buffer")
    _rejected(plugin, folder)


def test_a_savedmodel_without_serving_default_is_refused_naming_its_signatures(plugin, tmp_path):
    other = _save(tmp_path / "other", {"score": "serve", "text": "other"})
    message = _rejected(plugin, other)
    assert message.endswith("no serving_default signature (its signatures: score, text)")
    bare = tmp_path / "bare"
    tf.saved_model.save(tf.Module(), str(bare))
    assert _rejected(plugin, bare).endswith("(its signatures: none)")


def test_an_input_fwbench_cannot_make_is_refused(plugin, tmp_path):
    text = _save(tmp_path / "text", {"serving_default": "other"})
    assert _rejected(plugin, text).endswith(
        "input text has dtype string; fwbench uses " + ", ".join(model_files.DTYPES)
    )


def test_tensorflows_profiler_counts_the_signature_at_the_cells_shapes(plugin, exported):
    """The convolution's and the dense layer's multiply-adds (2 x 8x8x4 x 3x3x3 and 2 x 5x4
    an item), and the profiler's one FLOP an element for the biases and the normalisation:
    each item adds at least the first, not much more (the normalisation's constants count
    once a batch)."""
    _, path = exported
    products = 2 * (8 * 8 * 4) * (3 * 3 * 3) + 2 * 5 * 4
    counted = {b: plugin.build(_spec(plugin, path, _image(b))).flops() for b in (1, 4)}
    per_item = (counted[4].flops - counted[1].flops) / 3
    assert products <= per_item <= 1.2 * products
    assert per_item <= counted[1].flops <= 1.01 * per_item
    assert (
        counted[1].counter == f"TensorFlow profiler, float_operation (tensorflow {tf.__version__})"
    )
