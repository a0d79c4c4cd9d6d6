"""Workloads of kind "accuracy": train a catalogue model on scikit-learn's digits until a
target validation accuracy, DAWNBench style.

The runtime, not the plugin, owns the data, the initial weights and the batch order, so every
framework sees exactly the same inputs in the same order and starts from the same weights; the
plugin only supplies a `Trainer`. Time to target counts training epochs only (evaluation is
timed separately), epoch 1 included: a user waits for compilation too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fwbench.runtime import digits
from fwbench.runtime.plugin import Settings, WorkloadSpec
from fwbench.runtime.reference import AccuracyPlugin, OptimizerSpec
from fwbench.runtime.timing import Clock, ProgressCallback, RunCancelled

OPTIMIZER = OptimizerSpec(learning_rate=0.01, momentum=0.9)
DATASET = "sklearn-digits"


@dataclass(frozen=True)
class Epoch:
    epoch: int
    train_ns: int
    eval_ns: int
    validation_accuracy: float


@dataclass
class AccuracyRun:
    settings: Settings
    build_ns: int
    target_accuracy: float
    items_per_epoch: int
    train_examples: int
    validation_examples: int
    epochs: list[Epoch] = field(default_factory=list)
    reached_at: int = 0  # epoch that first reached the target; 0 = never
    measure_started_unix_ns: int = 0
    measure_ended_unix_ns: int = 0

    @property
    def time_to_target_ns(self) -> int:
        return sum(e.train_ns for e in self.epochs[: self.reached_at]) if self.reached_at else 0


def train_to_accuracy(
    plugin: AccuracyPlugin,
    spec: WorkloadSpec,
    synchronize: Callable[[object], None],
    cancel: threading.Event,
    on_progress: ProgressCallback,
    clock: Clock = time.perf_counter_ns,
) -> AccuracyRun:
    """Blocks until the target is reached or max_epochs ran; raises RunCancelled on cancel."""
    target = spec.params["target_accuracy_permille"] / 1000.0
    model = spec.workload.model
    on_progress("build", 0)
    start = clock()
    data = digits.load_digits()
    shapes = {k: tuple(v.shape) for k, v in plugin.canonical_weights(model, spec.seed).items()}
    trainer = plugin.trainer(model, digits.initial_weights(shapes, spec.seed), OPTIMIZER, spec)
    n_train = len(data.train.labels)
    steps = n_train // spec.batch_size  # epoch_batches drops the last partial batch
    run = AccuracyRun(
        settings=trainer.settings,
        build_ns=clock() - start,
        target_accuracy=target,
        items_per_epoch=steps * spec.batch_size,
        train_examples=n_train,
        validation_examples=len(data.validation.labels),
        measure_started_unix_ns=time.time_ns(),
    )
    for epoch in range(1, spec.params["max_epochs"] + 1):
        on_progress("first_iteration" if epoch == 1 else "measure", epoch - 1)
        start = clock()
        output: object = None
        for index in digits.epoch_batches(n_train, spec.batch_size, spec.seed, epoch):
            if cancel.is_set():
                raise RunCancelled()
            output = trainer.train_step(data.train.images[index], data.train.labels[index])
        synchronize(output)
        trained = clock()
        predicted = np.asarray(trainer.predict(data.validation.images))
        accuracy = float(np.mean(predicted == data.validation.labels))
        run.epochs.append(Epoch(epoch, trained - start, clock() - trained, accuracy))
        if accuracy >= target:
            run.reached_at = epoch
            break
    run.measure_ended_unix_ns = time.time_ns()
    on_progress("measure", len(run.epochs))
    return run
