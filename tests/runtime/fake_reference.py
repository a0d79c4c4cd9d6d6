"""A framework-free plugin with both optional capabilities ("accuracy", "equivalence"): "lenet"
is a numpy softmax regression on the flattened image, trained with the canonical SGD momentum.
It lets the runtime's accuracy loop be tested for real (real digits, real training, real gRPC)
without a framework."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from fake_plugin import FakePlugin

from fwbench.runtime.plugin import (
    ACCURACY,
    EQUIVALENCE,
    Capability,
    PluginContext,
    PluginDescription,
    Settings,
    WorkloadSpec,
)
from fwbench.runtime.reference import (
    EquivalenceCase,
    EquivalenceResult,
    OptimizerSpec,
    param_count,
)

PIXELS = 28 * 28


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


class NumpyTrainer:
    def __init__(self, weights: Mapping[str, np.ndarray], optimizer: OptimizerSpec) -> None:
        self.w = np.array(weights["classifier.weight"], dtype=np.float64)
        self.b = np.array(weights["classifier.bias"], dtype=np.float64)
        self.velocity = [np.zeros_like(self.w), np.zeros_like(self.b)]
        self.optimizer = optimizer
        self.settings = Settings("float32", 1, 1, "eager", "NCHW", "cpu", {"numpy": "yes"})
        self.steps = 0

    def _logits(self, images: np.ndarray) -> np.ndarray:
        return images.reshape(len(images), PIXELS) @ self.w.T + self.b

    def loss(self, images: np.ndarray, labels: np.ndarray) -> float:
        probs = _softmax(self._logits(images))
        return float(-np.mean(np.log(probs[np.arange(len(labels)), labels])))

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> object:
        x = images.reshape(len(images), PIXELS)
        grad_logits = _softmax(self._logits(images))
        grad_logits[np.arange(len(labels)), labels] -= 1.0
        grad_logits /= len(labels)
        grads = [grad_logits.T @ x, grad_logits.sum(axis=0)]
        for param, velocity, grad in zip((self.w, self.b), self.velocity, grads, strict=True):
            velocity *= self.optimizer.momentum
            velocity += grad
            param -= self.optimizer.learning_rate * velocity
        self.steps += 1
        return self.steps

    def predict(self, images: np.ndarray) -> np.ndarray:
        return self._logits(images).argmax(axis=1).astype(np.int64)


class FakeReferencePlugin(FakePlugin):
    optional_capabilities = frozenset({ACCURACY, EQUIVALENCE})

    def __init__(self, context: PluginContext | None = None) -> None:
        super().__init__(context)
        self.trainers: list[NumpyTrainer] = []

    def describe(self) -> PluginDescription:
        description = super().describe()
        capabilities = dict(description.capabilities)
        capabilities["lenet"] = Capability(("train", "infer"), ("float32",), ("eager",))
        return PluginDescription(
            **{**description.__dict__, "capabilities": capabilities, "framework": "numpy"}
        )

    def canonical_weights(self, model: str, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {
            "classifier.weight": rng.normal(0, 0.01, (10, PIXELS)).astype(np.float32),
            "classifier.bias": np.zeros(10, np.float32),
        }

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        trainer = NumpyTrainer(case.weights, case.optimizer)
        before = trainer.loss(case.inputs, case.labels)
        logits = trainer._logits(case.inputs).astype(np.float32)
        trainer.train_step(case.inputs, case.labels)
        return EquivalenceResult(
            param_count(case.weights), logits, before, trainer.loss(case.inputs, case.labels)
        )

    def trainer(
        self,
        model: str,
        weights: Mapping[str, np.ndarray],
        optimizer: OptimizerSpec,
        spec: WorkloadSpec,
    ) -> NumpyTrainer:
        trainer = NumpyTrainer(weights, optimizer)
        self.trainers.append(trainer)
        return trainer
