"""Run inside a Keras agent's environment (its KERAS_BACKEND set) by
test_model_file_equivalence.py: saves a user's model file once, then reads it as each agent
does, through the plugin and the runtime's own request handling.

    python keras_model_file.py save FILE        a compiled model of varied layers, as .keras
    python keras_model_file.py run FILE OUT     OUT.npz: the outputs of an inference cell in
                                                the backend's default mode; OUT.json: the
                                                signature, the mode and a training cell's
                                                first two losses
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

BATCH, SEED, SIZE = 4, 11, 16


def save(path: Path) -> None:
    """Convolutions (a depthwise one), BatchNorm with non-trivial statistics, an LSTM over the
    rows, attention, dense: a model whose file every Keras backend must read alike. Its
    weights come from NumPy (zero initialisers in the file): Keras runs each layer's
    initialiser before loading a file's weights, and on JAX a random one compiles an XLA
    program per weight shape (11 s of loading this model with Keras' defaults there)."""
    import keras

    layers = keras.layers
    zeros = {"kernel_initializer": "zeros"}
    image = keras.Input((SIZE, SIZE, 3), name="image")
    x = layers.Conv2D(8, 3, padding="same", activation="relu", **zeros)(image)
    x = layers.DepthwiseConv2D(3, strides=2, padding="same", depthwise_initializer="zeros")(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    half = SIZE // 2
    rows = layers.Reshape((half, half * 8))(x)
    rows = layers.LSTM(16, return_sequences=True, recurrent_initializer="zeros", **zeros)(rows)
    attended = layers.MultiHeadAttention(num_heads=2, key_dim=8, **zeros)(rows, rows)
    pooled = layers.GlobalAveragePooling1D()(attended)
    hidden = layers.Dense(32, activation="gelu", **zeros)(pooled)
    model = keras.Model(image, layers.Dense(10, name="logits", **zeros)(hidden), name="varied")
    rng = np.random.default_rng(3)
    for variable in model.weights:
        if "variance" in variable.path:
            value = rng.uniform(0.5, 1.5, variable.shape)
        else:
            value = rng.normal(0.0, 0.3, variable.shape)
        variable.assign(value.astype(np.float32))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.save(path)


def run(path: Path, out: Path) -> None:
    from fwbench.agent.v1 import agent_pb2
    from fwbench.runtime.model_files import inspect, model_workload_spec
    from fwbench.runtime.plugin import PluginContext
    from fwbench.runtime.registry import load_plugin
    from fwbench.spec import model_files
    from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

    plugin = load_plugin("keras", PluginContext(device="cpu"))
    sha = model_files.digest(path)
    file = agent_pb2.ModelFile(path=str(path), format="keras", sha256=sha)
    signature = inspect(plugin, agent_pb2.InspectModelRequest(model=file))
    shape = [BATCH, *signature.inputs[0].shape[1:]]
    file.inputs.add(name=signature.inputs[0].name, shape=shape, dtype="float32")

    def cell(phase: str):  # type: ignore[no-untyped-def]
        request = agent_pb2.RunRequest(
            workload=model_files.workload_name(path, sha),
            model=file,
            phase=PHASE_VALUES[phase],
            batch_size=BATCH,
            dtype=DTYPE_VALUES["float32"],
            seed=SEED,
        )
        return plugin.build(model_workload_spec(request, plugin, plugin.model_formats, None))

    infer = cell("infer")
    infer.step()
    outputs = infer.outputs()
    train = cell("train")
    losses = [float(np.asarray(train.step())) for _ in range(2)]
    np.savez(out.with_suffix(".npz"), **outputs)
    summary = {
        "inputs": [[t.name, list(t.shape), t.dtype] for t in signature.inputs],
        "outputs": [[t.name, list(t.shape), t.dtype] for t in signature.outputs],
        "parameters": signature.parameters,
        "phases": list(signature.phases),
        "mode": infer.settings.mode,
        "losses": losses,
    }
    out.with_suffix(".json").write_text(json.dumps(summary))


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(Path(sys.argv[2]))
    else:
        run(Path(sys.argv[2]), Path(sys.argv[3]))
