"""The user's .keras files (capability "model_files"): the signature InspectModel answers, the
cells the runtime builds from a RunRequest (model_workload_spec), their outputs against Keras'
own forward pass on the same inputs, a training step with the file's own loss and optimizer,
and the files it refuses. Small models, a few seconds on each backend."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.keras_plugin import model_file
from fwbench.runtime.model_files import ModelRejected, inspect, model_workload_spec
from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec
from fwbench.spec import model_files
from fwbench.spec.catalogue import CatalogueError
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES
from fwbench.spec.model_files import TensorInfo, compare_outputs, make_inputs

BATCH, SEED = 3, 7
# Every mode but torch's "compile": its first step builds C++ kernels (inductor), tens of
# seconds on a CPU; it compiles the same train_on_batch/predict_on_batch as the catalogue's.
STEPPED = {"torch": ("eager",), "jax": ("jit", "eager"), "tensorflow": ("function", "eager")}


# Keras' random initialisers compile an XLA program per weight shape on JAX (16 s for this
# model, 1.3 s with zeros): zeros, then weights from NumPy.
ZEROS = {"kernel_initializer": "zeros"}


def _varied(compiled: bool = True) -> keras.Model:
    """Convolutions, a depthwise one, BatchNorm, a GRU over the rows, attention, dense."""
    layers = keras.layers
    image = keras.Input((8, 8, 3), name="image")
    x = layers.Conv2D(4, 3, padding="same", activation="relu", **ZEROS)(image)
    x = layers.DepthwiseConv2D(3, padding="same", depthwise_initializer="zeros")(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    reshaped = layers.Reshape((8, 8 * 4))(x)
    rows = layers.GRU(8, return_sequences=True, recurrent_initializer="zeros", **ZEROS)(reshaped)
    attended = layers.MultiHeadAttention(num_heads=2, key_dim=4, **ZEROS)(rows, rows)
    logits = layers.Dense(5, name="logits", **ZEROS)(layers.GlobalAveragePooling1D()(attended))
    model = _seeded(keras.Model(image, logits, name="varied"))
    if compiled:
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def _seeded(model: keras.Model) -> keras.Model:
    """Every weight uniform in [-0.5, 0.5) from one seed; BatchNorm's variances in [0.5, 1.5)."""
    rng = np.random.default_rng(1)
    for variable in model.weights:
        low = 0.5 if "variance" in variable.path else -0.5
        variable.assign(rng.uniform(low, low + 1.0, variable.shape).astype(np.float32))
    return model


@pytest.fixture(scope="module")
def saved(backend: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[keras.Model, Path]:
    model = _varied()
    path = tmp_path_factory.mktemp("files") / "varied.keras"
    model.save(path)
    return model, path


def _request(
    path: Path, shapes: dict[str, tuple[int, ...]], phase: str, mode: str
) -> agent_pb2.RunRequest:
    sha = model_files.digest(path)
    inputs = [agent_pb2.TensorSpec(name=n, shape=s, dtype="float32") for n, s in shapes.items()]
    return agent_pb2.RunRequest(
        workload=model_files.workload_name(path, sha),
        model=agent_pb2.ModelFile(path=str(path), format="keras", sha256=sha, inputs=inputs),
        phase=PHASE_VALUES[phase],
        batch_size=BATCH,
        dtype=DTYPE_VALUES["float32"],
        mode=mode,
        seed=SEED,
    )


def _spec(plugin, path: Path, shapes, phase: str = "infer", mode: str = "") -> WorkloadSpec:  # type: ignore[no-untyped-def]
    return model_workload_spec(
        _request(path, shapes, phase, mode), plugin, plugin.model_formats, None
    )


def _inspect(plugin, path: Path) -> agent_pb2.ModelSignature:  # type: ignore[no-untyped-def]
    model = agent_pb2.ModelFile(path=str(path), format="keras")
    return inspect(plugin, agent_pb2.InspectModelRequest(model=model))


def test_the_plugin_reads_keras_files_in_its_modes(plugin, backend):
    assert plugin.model_formats == ("keras",)
    capability = plugin.model_capability
    assert capability.phases == ("train", "infer") and capability.dtypes == ("float32",)
    assert capability.modes == plugin.describe().capabilities["lenet"].modes


def test_inspect_answers_the_files_signature(plugin, backend, saved):
    model, path = saved
    signature = plugin.inspect_model(str(path), "keras")
    assert signature.inputs == (TensorInfo("image", (None, 8, 8, 3), "float32"),)
    assert signature.outputs == (TensorInfo("logits", (None, 5), "float32"),)
    assert signature.parameters == model.count_params()
    assert signature.phases == ("infer", "train") and not signature.unsupported_reasons
    details = signature.details
    assert details["backend"] == backend and details["keras_version"] == keras.__version__
    assert details["optimizer"] == "Adam(learning_rate=0.01)"
    message = _inspect(plugin, path)  # the runtime's InspectModel, the same answer
    assert [(t.name, list(t.shape)) for t in message.inputs] == [("image", [-1, 8, 8, 3])]


@pytest.mark.parametrize("mode_index", [0, 1])
def test_inference_outputs_are_keras_own(plugin, backend, saved, mode_index):
    """The cell's outputs, and its step's, equal the model's forward pass (training=False) on
    the inputs every agent makes from the seed."""
    if mode_index >= len(STEPPED[backend]):
        pytest.skip(f"{backend} steps {len(STEPPED[backend])} mode here")
    model, path = saved
    mode = STEPPED[backend][mode_index]
    spec = _spec(plugin, path, {"image": (BATCH, 8, 8, 3)}, mode=mode)
    built = plugin.build(spec)
    assert built.settings.mode == mode and built.settings.extra["model_format"] == "keras"
    stepped = built.step()
    plugin.synchronize(stepped)
    image = make_inputs((TensorInfo("image", (BATCH, 8, 8, 3), "float32"),), SEED)["image"]
    expected = {"logits": keras.ops.convert_to_numpy(model(image, training=False))}
    outputs = built.outputs()
    assert outputs["logits"].shape == (BATCH, 5)
    difference = compare_outputs(outputs, expected)
    assert difference.within, difference.why
    assert compare_outputs({"logits": np.asarray(stepped)}, expected).within


def test_a_train_cell_steps_the_files_optimizer_and_sends_the_files_outputs(plugin, backend, saved):
    model, path = saved
    built = plugin.build(_spec(plugin, path, {"image": (BATCH, 8, 8, 3)}, phase="train"))
    extra = built.settings.extra
    assert extra["train_api"] == "train_on_batch" and extra["optimizer"].startswith("Adam")
    losses = [float(np.asarray(built.step())) for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[2] < losses[0]  # the weights changed
    image = make_inputs((TensorInfo("image", (BATCH, 8, 8, 3), "float32"),), SEED)["image"]
    expected = {"logits": keras.ops.convert_to_numpy(model(image, training=False))}
    assert compare_outputs(built.outputs(), expected).within  # the file's weights, not trained


def test_inputs_the_model_does_not_have_are_refused(plugin, backend, saved):
    _, path = saved
    with pytest.raises(CatalogueError, match="the model's inputs are image"):
        plugin.build(_spec(plugin, path, {"picture": (BATCH, 8, 8, 3)}))


def test_an_uncompiled_file_infers_and_refuses_to_train(plugin, backend, tmp_path):
    path = tmp_path / "plain.keras"
    _varied(compiled=False).save(path)
    signature = plugin.inspect_model(str(path), "keras")
    assert signature.phases == ("infer",)
    assert signature.unsupported_reasons == {"train": model_file.TRAIN_REASON}
    with pytest.raises(UnsupportedWorkload, match="no compiled loss and optimizer"):
        plugin.build(_spec(plugin, path, {"image": (BATCH, 8, 8, 3)}, phase="train"))


def test_a_truncated_file_is_rejected_in_one_line(plugin, backend, saved, tmp_path):
    _, path = saved
    cut = tmp_path / "cut.keras"
    shutil.copyfile(path, cut)
    with cut.open("r+b") as handle:
        handle.truncate(cut.stat().st_size // 2)
    with pytest.raises(ModelRejected) as rejected:
        plugin.inspect_model(str(cut), "keras")
    message = str(rejected.value)
    assert "\n" not in message and message.startswith("model: cut.keras is not a readable keras")


def test_a_file_carrying_python_code_is_refused(plugin, backend, tmp_path):
    """Safe mode: a Lambda layer's function would run Python code from the file."""
    x = keras.Input((3,), name="x")
    path = tmp_path / "code.keras"
    keras.Model(x, keras.layers.Lambda(lambda t: t * 2.0)(x)).save(path)
    with pytest.raises(
        ModelRejected,
        match=r"code\.keras is not a readable keras model: .*arbitrary code execution",
    ):
        plugin.inspect_model(str(path), "keras")


def _two_heads() -> keras.Model:
    """Inputs and outputs as dicts, each output its own loss."""
    layers = keras.layers
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    joined = layers.Concatenate()([a, b])
    hidden = layers.Dense(6, activation="relu", name="hidden", **ZEROS)(joined)
    outputs = {
        "zeta": layers.Dense(2, name="zd", **ZEROS)(hidden),
        "alpha": layers.Dense(3, name="ad", **ZEROS)(hidden),
    }
    model = _seeded(keras.Model({"a": a, "b": b}, outputs))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss={"zeta": "mse", "alpha": "sparse_categorical_crossentropy"},
    )
    return model


TWO_HEADS = {"a": (BATCH, 4), "b": (BATCH, 3)}


def test_dict_outputs_are_named_by_their_keys_and_each_cell_starts_from_the_file(
    plugin, backend, tmp_path
):
    model = _two_heads()
    path = tmp_path / "two_heads.keras"
    model.save(path)
    signature = plugin.inspect_model(str(path), "keras")
    assert [t.name for t in signature.inputs] == ["a", "b"]
    assert signature.outputs == (
        TensorInfo("alpha", (None, 3), "float32"),
        TensorInfo("zeta", (None, 2), "float32"),
    )
    got = plugin.build(_spec(plugin, path, TWO_HEADS)).outputs()
    feed = make_inputs([TensorInfo(n, s, "float32") for n, s in TWO_HEADS.items()], SEED)
    expected = {k: keras.ops.convert_to_numpy(v) for k, v in model(feed, training=False).items()}
    assert sorted(got) == ["alpha", "zeta"]
    assert compare_outputs(got, expected).within
    first = plugin.build(_spec(plugin, path, TWO_HEADS, phase="train"))
    losses = [np.asarray(first.step()) for _ in range(2)]  # the total and each output's
    assert losses[0].shape == (3,) and np.isfinite(losses).all() and losses[1][0] < losses[0][0]
    again = plugin.build(_spec(plugin, path, TWO_HEADS, phase="train"))  # the same file, cached
    assert np.asarray(again.step()) == pytest.approx(losses[0], rel=1e-5)  # weights, Adam's state


def test_a_file_saved_on_the_torch_backend_trains_on_every_backend(plugin, backend, tmp_path):
    """Keras' torch backend saves its own subclass of a built-in optimizer (module
    keras.src.backend.torch.optimizers.torch_adam), which the other backends cannot import."""
    saved, torch_saved = tmp_path / "two_heads.keras", tmp_path / "torch_saved.keras"
    _two_heads().save(saved)
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(torch_saved, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                optimizer = config["compile_config"]["optimizer"]
                module = "keras.src.backend.torch.optimizers.torch_adam"  # as torch writes it
                optimizer.update(module=module, registered_name="Adam")
                data = json.dumps(config).encode()
            target.writestr(item, data)
    signature = plugin.inspect_model(str(torch_saved), "keras")
    assert signature.phases == ("infer", "train")
    built = plugin.build(_spec(plugin, torch_saved, TWO_HEADS, phase="train"))
    assert np.isfinite(np.asarray(built.step())).all()


def test_targets_fit_each_loss(backend):
    rng = np.random.default_rng(0)
    labels = model_file.make_target(rng, (4, 6), "sparse_categorical_crossentropy")
    assert labels.shape == (4,) and labels.dtype == np.int32 and labels.max() < 6
    one_hot = model_file.make_target(rng, (4, 6), keras.losses.CategoricalCrossentropy())
    assert one_hot.shape == (4, 6) and (one_hot.sum(axis=-1) == 1).all()
    values = model_file.make_target(rng, (4, 2), "mse")
    assert values.dtype == np.float32 and values.min() >= 0 and values.max() < 1


def test_the_tensorflow_backend_exports_a_savedmodel_and_onnx_of_the_file(
    plugin, backend, saved, tmp_path
):
    """Keras' own exporter (model_export.py), on TensorFlow only: a SavedModel whose
    serving_default computes the model's outputs from its named input, and an ONNX graph
    (tf2onnx) that takes the same input, batch open, checked by ONNX's checker; the outputs of
    both against the runtimes are tests/integration's. The other backends write nothing."""
    from fwbench.keras_plugin import model_export

    if backend != "tensorflow":
        assert plugin.export_formats == () and "model_export" not in plugin.optional_capabilities
        return
    import onnx
    import tensorflow as tf

    assert plugin.export_formats == ("savedmodel", "onnx")
    model, path = saved
    folder = tmp_path / "varied.savedmodel"
    tool = plugin.export_model(str(path), "keras", "savedmodel", str(folder))
    assert tool == f"keras {keras.__version__} Model.export, tensorflow {tf.__version__}"
    assert model_files.detect_format(folder) == "savedmodel"
    serve = tf.saved_model.load(str(folder)).signatures["serving_default"]
    image = make_inputs((TensorInfo("image", (BATCH, 8, 8, 3), "float32"),), SEED)["image"]
    (got,) = serve(image=tf.constant(image)).values()
    expected = {"logits": keras.ops.convert_to_numpy(model(image, training=False))}
    difference = compare_outputs({"output_0": got.numpy()}, expected)  # renamed: in order
    assert difference.within, difference.why
    graph_file = tmp_path / "varied.onnx"
    tool = plugin.export_model(str(path), "keras", "onnx", str(graph_file))
    assert tool.startswith(f"tf2onnx {model_export._version('tf2onnx')} (keras {keras.__version__}")
    graph = onnx.load(str(graph_file))
    onnx.checker.check_model(graph)
    (taken,) = graph.graph.input
    dims = taken.type.tensor_type.shape.dim
    assert (
        taken.name == "image"
        and not dims[0].dim_value
        and [d.dim_value for d in dims[1:]]
        == [
            8,
            8,
            3,
        ]
    )


COUNTERS = {
    "torch": "torch.utils.flop_counter.FlopCounterMode (torch ",
    "jax": "XLA cost analysis (jax ",
    "tensorflow": "TensorFlow profiler, float_operation (tensorflow ",
}


def test_flops_are_counted_by_the_backends_own_counter(plugin, backend, saved, tmp_path):
    """A convolution and a dense layer: 2 x 8x8x4 x 3x3x3 and 2 x 5x4 multiply-add FLOPs an
    item, which FlopCounterMode counts exactly; TensorFlow's profiler adds one FLOP an element
    for biases and activations; XLA adds those too but leaves out the taps that fall on the
    convolution's padding ((22/24)^2 of the products at 8x8, 3x3, "same"). The varied model's
    GRU is a loop on
    JAX and TensorFlow, whose counters count a loop's body once: no count, and why."""
    layers = keras.layers
    image = keras.Input((8, 8, 3), name="image")
    x = layers.GlobalAveragePooling2D()(
        layers.Conv2D(4, 3, padding="same", activation="relu")(image)
    )
    path = tmp_path / "small.keras"
    keras.Model(image, layers.Dense(5, name="logits")(x)).save(path)
    products = (2 * (8 * 8 * 4) * (3 * 3 * 3) + 2 * 5 * 4) * BATCH
    counted = plugin.build(_spec(plugin, path, {"image": (BATCH, 8, 8, 3)})).flops()
    assert counted.counter.startswith(COUNTERS[backend]) and not counted.not_counted
    low, high = {"torch": (1.0, 1.0), "jax": (0.8, 1.0), "tensorflow": (1.0, 1.2)}[backend]
    assert low * products <= counted.flops <= high * products
    looped = plugin.build(_spec(plugin, saved[1], {"image": (BATCH, 8, 8, 3)})).flops()
    if backend == "torch":  # eager: every step of the loop runs, and is counted
        assert looped.flops > 0
    else:
        assert looped.flops == 0 and "loop" in looped.not_counted
