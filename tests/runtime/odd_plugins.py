"""Plugins that break the contract in one way each, for the registry's load-time checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
from fake_plugin import FakePlugin

from fwbench.runtime.plugin import ACCURACY, BuiltStep, PluginContext, WorkloadSpec


class RecordsContext(FakePlugin):
    """Keeps the contract; remembers the context it was built with."""

    last_context: PluginContext | None = None

    def __init__(self, context: PluginContext) -> None:
        super().__init__(context)
        RecordsContext.last_context = context


class NoContext(FakePlugin):
    def __init__(self) -> None:  # the old contract: constructed with no arguments
        super().__init__()


class NoSynchronize:
    optional_capabilities: frozenset[str] = frozenset()

    def __init__(self, context: PluginContext) -> None:
        pass

    def describe(self) -> None:
        pass

    def build(self, spec: object) -> None:
        pass


class Undeclared(FakePlugin):
    optional_capabilities = None  # type: ignore[assignment]


class UnknownCapability(FakePlugin):
    optional_capabilities = frozenset({"telepathy"})


class AccuracyWithoutTrainer(FakePlugin):
    optional_capabilities = frozenset({ACCURACY})

    def canonical_weights(self, model: str, seed: int) -> Mapping[str, np.ndarray]:
        return {}


class Careless(FakePlugin):
    """Loads fine, but builds what it does not claim, misreports its settings and loses a
    generation's parts: the contract suite must catch all three."""

    def _check(self, spec: WorkloadSpec) -> None:
        pass

    def _build(self, spec: WorkloadSpec) -> BuiltStep:
        built = super()._build(spec)
        return BuiltStep(built.step, dataclasses.replace(built.settings, dtype="float64"))
