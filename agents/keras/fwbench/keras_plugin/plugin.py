"""KerasPlugin: Keras 3 on the backend its agent's KERAS_BACKEND names (torch, jax or
tensorflow), for the catalogue's ops (gemm, conv2d, attention in keras.ops), models and
transformers (Keras layers, compile + train_on_batch / predict_on_batch; bert and gpt in
transformers.py) and generation on a KV cache (generation.py), with the "equivalence"
capability (the transformers' too), the "model_files" one (a user's .keras file:
model_file.py) and, on the TensorFlow backend, "model_export" (the file as a SavedModel and
as ONNX: model_export.py).

This module is what the registry imports, before the plugin is constructed, so it imports
neither Keras nor a backend: Keras decides its backend for good when it is first imported.
The constructor checks KERAS_BACKEND, sizes the backend's thread pools and imports Keras
(environment.py), then hands the work to agent.py; a bad backend stops the agent with one
line (InvalidContext)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fwbench.keras_plugin import environment
from fwbench.runtime.architectures import MODEL_NAMES, TRANSFORMER_NAMES
from fwbench.runtime.model_files import ModelSignature
from fwbench.runtime.plugin import (
    EQUIVALENCE,
    MODEL_EXPORT,
    MODEL_FILES,
    PROFILE,
    BuiltStep,
    Capability,
    PluginContext,
    PluginDescription,
    WorkloadSpec,
)
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult

if TYPE_CHECKING:
    from fwbench.keras_plugin.agent import KerasAgent


class KerasPlugin:
    optional_capabilities = frozenset({EQUIVALENCE, MODEL_FILES})
    model_formats = ("keras",)
    equivalence_models = frozenset((*MODEL_NAMES, *TRANSFORMER_NAMES))
    equivalence_trains = True

    def __init__(self, context: PluginContext) -> None:
        backend, threads = environment.start(context)
        from fwbench.keras_plugin.agent import KerasAgent, no_profiler  # imports Keras: now

        self._agent: KerasAgent = KerasAgent(context, backend, threads)
        from fwbench.keras_plugin import model_export

        self.export_formats = model_export.formats(backend)
        if self.export_formats:
            self.optional_capabilities = KerasPlugin.optional_capabilities | {MODEL_EXPORT}
        # The backend's own profiler: Keras' layers run as its operations (on tensorflow and
        # jax, on the CPU only: agent.no_profiler says why not elsewhere).
        self._backend = backend
        if not no_profiler(backend, self._agent.backend.device):
            self.optional_capabilities = self.optional_capabilities | {PROFILE}

    def profiler(self) -> str:
        if self._backend == "tensorflow":
            from fwbench.runtime import tf_profile

            return tf_profile.PROFILER
        if self._backend == "jax":
            from fwbench.runtime import jax_profile

            return jax_profile.PROFILER
        from fwbench.runtime import torch_profile

        return torch_profile.PROFILER

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
        if self._backend == "tensorflow":
            from fwbench.runtime import tf_profile

            return tf_profile.profile(run_steps, trace_dir)
        if self._backend == "jax":
            from fwbench.runtime import jax_profile

            return jax_profile.profile(run_steps, trace_dir)
        import torch

        from fwbench.runtime import torch_profile

        return torch_profile.profile(run_steps, trace_dir, torch.device(self._agent.backend.device))

    @property
    def model_capability(self) -> Capability:
        return self._agent.model_capability()

    def describe(self) -> PluginDescription:
        return self._agent.describe()

    def inspect_model(self, path: str, format: str) -> ModelSignature:
        return self._agent.inspect_model(path)

    def export_model(self, path: str, format: str, target: str, dest: str) -> str:
        from fwbench.keras_plugin import model_export

        with self._agent.backend.scope():
            return model_export.export(path, target, dest)

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        return self._agent.build(spec)

    def synchronize(self, output: object) -> None:
        self._agent.synchronize(output)

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        if model not in self.equivalence_models:
            raise ValueError(f"the keras plugin builds no {model!r}")
        return self._agent.canonical_weights(model, seed, params)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        if case.model not in self.equivalence_models:
            raise ValueError(f"the keras plugin builds no {case.model!r}")
        return self._agent.equivalence(case)
