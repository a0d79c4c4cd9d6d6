"""Ranks of a distributed world on TensorFlow's own engine: tf.distribute's
MultiWorkerMirroredStrategy (MWMS), one worker per rank process, the cluster told through
TF_CONFIG (every rank's HOST:PORT from FWBENCH_PEERS, the rank as the worker index), a custom
training loop under strategy.run with the gradients all-reduced by the strategy's collectives
(RING over gRPC on a CPU), and a replica-context all_reduce for the collective microbenchmark.

"mirrored" is tf.distribute.MirroredStrategy over the devices of ONE process: with
FWBENCH_LOCAL_DEVICES=D, the CPU split into D logical devices, one replica each with
batch_size items of its own, the gradients reduced in process (ReductionToOneDevice: a CPU
has no NCCL). A world of one process offers it with one device too, the baseline of its
scaling.

Keras' model.fit is never used: under MWMS with Keras 3 it fails (keras#20585,
tensorflow#72388). TensorFlow reports no per-step split of communication and computation, so
the ranks' engine_nanoseconds stay empty."""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from fwbench.runtime.plugin import (
    Capability,
    InvalidContext,
    RankReport,
    UnsupportedWorkload,
    WorkloadSpec,
)
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult
from fwbench.runtime.world import PEERS_VARIABLE, World
from fwbench.tf_plugin import models
from fwbench.tf_plugin.training import LEARNING_RATE, MOMENTUM, MomentumSGD, cross_entropy

MWMS = "multi_worker_mirrored"
MIRRORED = "mirrored"
LOCAL_REDUCTION = "reduction_to_one_device"  # MirroredStrategy's reduction between CPUs
COLLECTIVE = "collective"
ELEMENTS_PER_ITEM = 1024  # the catalogue's allreduce item
# FWBENCH_DIST_BACKEND: tf.distribute's CommunicationImplementation; "" = RING (a CPU's
# default: AUTO picks RING without GPUs, and RING is what the row should name).
_IMPLEMENTATIONS = {
    "": "ring",
    "ring": "ring",
    "nccl": "nccl",
    "auto": "auto",
}
# The dtypes TensorFlow's collective ops take (CollectiveReduceV2: "Value for attr 'T' of
# bfloat16 is not in the list of allowed values: bool, float, half, double, int32, int64"):
# bfloat16 gradients or messages cannot be all-reduced, so neither strategy offers bfloat16.
COLLECTIVE_DTYPES = ("float32", "float16", "float64")
MODES = ("function",)  # tf.function; eager strategy.run and XLA with collectives not offered


def tf_config(world: World) -> dict[str, Any]:
    """TF_CONFIG for this rank: every rank a worker, at its FWBENCH_PEERS address."""
    peers = world.peers
    if not peers and world.size == 1:
        peers = (world.rendezvous,)
    if len(peers) != world.size:
        raise InvalidContext(
            f"{PEERS_VARIABLE} must name every rank's HOST:PORT (TensorFlow addresses each "
            f"worker); got {len(peers)} for a world of {world.size}"
        )
    return {
        "cluster": {"worker": list(peers)},
        "task": {"type": "worker", "index": world.rank},
    }


@dataclass(frozen=True)
class Rank:
    """This process as a rank: its world, strategies by name (the default first), the backend
    name of MWMS' collectives and its device."""

    world: World
    strategies: dict[str, tf.distribute.Strategy]
    backend: str
    device: str

    @property
    def strategy(self) -> tf.distribute.Strategy:
        return next(iter(self.strategies.values()))

    def backend_of(self, strategy: str) -> str:
        return LOCAL_REDUCTION if strategy == MIRRORED else self.backend


def _local_strategy(world: World, device: str) -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over this process's FWBENCH_LOCAL_DEVICES logical CPUs (before the
    first op: logical devices are fixed when TensorFlow's context initialises)."""
    if world.local_devices > 1:
        if not device.upper().startswith("/CPU"):
            raise InvalidContext(
                "FWBENCH_LOCAL_DEVICES splits the CPU into logical devices; on a GPU host a "
                "process uses the GPUs it sees: not built"
            )
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(world.local_devices)]
        )
    devices = [f"/CPU:{index}" for index in range(world.local_devices)]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


def start(world: World, device: str) -> Rank:
    """Sets TF_CONFIG and creates the strategy, which starts this rank's gRPC server and
    blocks until every worker has connected to TensorFlow's coordination service (hosted by
    worker 0; its heartbeats, not MWMS' Python health check, which TensorFlow then turns
    off, notice a lost peer). Must run before TensorFlow's
    context initialises (collective ops are configured at start-up): from the plugin's
    constructor, after the thread pools are sized and before the first op. On a GPU each rank
    keeps the GPU of its local rank only."""
    if world.local_devices > 1:  # one process, its own devices: no cluster to join
        return Rank(world, {MIRRORED: _local_strategy(world, device)}, LOCAL_REDUCTION, device)
    implementation = _IMPLEMENTATIONS.get(world.backend.lower())
    if implementation is None:
        raise InvalidContext(
            f"FWBENCH_DIST_BACKEND={world.backend!r}: TensorFlow offers "
            + ", ".join(name for name in _IMPLEMENTATIONS if name)
        )
    gpus = tf.config.list_physical_devices("GPU")
    if gpus and tf.config.get_visible_devices("GPU"):
        tf.config.set_visible_devices(gpus[world.local_rank % len(gpus)], "GPU")
    config = tf_config(world)
    os.environ["TF_CONFIG"] = json.dumps(config)
    seconds = float(world.timeout_seconds)  # FWBENCH_DIST_TIMEOUT_SECONDS
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=getattr(
            tf.distribute.experimental.CommunicationImplementation, implementation.upper()
        ),
        timeout_seconds=seconds,
    )
    try:
        strategies: dict[str, tf.distribute.Strategy] = {
            MWMS: tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        }
    except tf.errors.UnknownError as error:
        address = config["cluster"]["worker"][world.rank]
        if "grpc server" in str(error).lower() and port_taken(address):
            raise OSError(
                errno.EADDRINUSE,
                f"Address already in use: {address}, where rank {world.rank}'s TensorFlow "
                f"gRPC server was to listen ({error.message})",
            ) from error
        raise
    if world.size == 1:
        strategies[MIRRORED] = _local_strategy(world, device)
    return Rank(world, strategies, implementation, device)


def port_taken(address: str) -> bool:
    """Whether this host's PORT of HOST:PORT is bound by another socket. TensorFlow says only
    "Could not start gRPC server" (its log: "Failed to add port to server"); the collector
    places a world again on other ports when a rank says "Address already in use"."""
    port = int(address.rpartition(":")[2])
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            probe.bind(("", port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def capabilities(dtypes: tuple[str, ...], rank: Rank) -> dict[str, Capability]:
    """What a rank distributes: every model's training step under its strategies, and
    allreduce, in the device's dtypes that collectives take."""
    reducible = tuple(d for d in dtypes if d in COLLECTIVE_DTYPES)
    train = Capability(("train",), reducible, MODES, tuple(rank.strategies))
    return {
        **{name: train for name in models.MODEL_NAMES},
        "allreduce": Capability(("train",), reducible, MODES, (COLLECTIVE,)),
    }


def settings_extra(spec: WorkloadSpec, rank: Rank) -> dict[str, str]:
    backend = rank.backend_of(spec.strategy)
    transport = "in process" if backend == LOCAL_REDUCTION else "grpc"
    extra = {"strategy": spec.strategy, "backend": backend, "transport": transport}
    if spec.strategy == MIRRORED:
        extra["replicas"] = f"{rank.world.local_devices} logical CPU device(s), one process"
        extra["gradient_reduction"] = "all_reduce MEAN over replicas, once per step"
        extra["batch_norm_statistics"] = "per replica (ON_READ variables, MEAN when read)"
    if spec.strategy == MWMS:
        extra["gradient_reduction"] = "all_reduce MEAN, once per step, one pack per dtype"
        extra["batch_norm_statistics"] = "per rank (ON_READ variables, MEAN when read)"
    return extra


def build(
    spec: WorkloadSpec, dtype: tf.DType, rank: Rank
) -> tuple[Callable[[], object], RankReport]:
    if spec.strategy == COLLECTIVE and spec.workload.name == "allreduce":
        return _allreduce(spec, dtype, rank)
    if spec.strategy in rank.strategies and spec.workload.name in models.MODEL_NAMES:
        return _train(spec, dtype, rank, rank.strategies[spec.strategy])
    raise UnsupportedWorkload(f"tensorflow: no strategy {spec.strategy!r} for {spec.workload.name}")


def _allreduce(
    spec: WorkloadSpec, dtype: tf.DType, rank: Rank
) -> tuple[Callable[[], object], RankReport]:
    message = tf.ones((spec.batch_size * ELEMENTS_PER_ITEM,), dtype=dtype)

    def replica_step() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        return context.all_reduce(tf.distribute.ReduceOp.SUM, message)

    strategy = rank.strategies.get(spec.strategy, rank.strategy)
    step = tf.function(lambda: strategy.run(replica_step), autograph=False)
    size = spec.batch_size * ELEMENTS_PER_ITEM * dtype.size
    return step, RankReport(rank.backend_of(spec.strategy), collective_bytes=size)


def _local_statistics(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
    """BatchNorm's running statistics as Keras keeps them under a strategy: each rank its
    own (ON_READ), averaged when read. Mirrored variables could not be assigned in a
    replica's step without an all-reduce of their own. Other variables (Keras' integer seed
    state in the LSTM) keep the strategy's default."""
    dtype = kwargs.get("dtype") or getattr(kwargs.get("initial_value"), "dtype", None)
    floating = dtype is not None and tf.as_dtype(dtype).is_floating
    if floating and not kwargs.get("trainable", True):
        kwargs["synchronization"] = tf.VariableSynchronization.ON_READ
        kwargs["aggregation"] = tf.VariableAggregation.MEAN
    return next_creator(**kwargs)


def _mean_over_ranks(gradients: list[tf.Tensor]) -> list[tf.Tensor]:
    """The strategy's all-reduce, one batch per dtype (a batch is packed into one tensor:
    half-precision weights with float32 BatchNorm parameters would not concatenate)."""
    context = tf.distribute.get_replica_context()
    groups: dict[tf.DType, list[int]] = {}
    for index, gradient in enumerate(gradients):
        groups.setdefault(gradient.dtype, []).append(index)
    reduced = list(gradients)
    for indices in groups.values():
        values = context.all_reduce(tf.distribute.ReduceOp.MEAN, [gradients[i] for i in indices])
        for index, value in zip(indices, values, strict=True):
            reduced[index] = value
    return reduced


def _replica_step(
    model: Callable[..., tf.Tensor], variables: list[tf.Variable], optimizer: MomentumSGD
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """One rank's share of a data-parallel step, for strategy.run: its shard's loss and
    gradients, the strategy's mean over ranks applied by momentum SGD; returns the loss."""

    def replica_step(inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = cross_entropy(model(inputs, training=True), labels)
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        optimizer.apply(_mean_over_ranks(gradients))
        return loss

    return replica_step


def _per_replica(strategy: tf.distribute.Strategy, values: list[tf.Tensor]) -> Any:
    """values[i] for this process's replica i: the one tensor itself for one replica (MWMS),
    a PerReplica value over the process's devices otherwise (MirroredStrategy)."""
    if len(values) == 1:
        return values[0]
    return strategy.experimental_distribute_values_from_function(
        lambda context: values[context.replica_id_in_sync_group]
    )


def _train(
    spec: WorkloadSpec, dtype: tf.DType, rank: Rank, strategy: tf.distribute.Strategy
) -> tuple[Callable[[], object], RankReport]:
    """The catalogue model under `strategy`: identical initial weights on every replica (the
    seed; the strategy broadcasts worker 0's anyway), each replica its own synthetic shard
    of batch_size items (seed + rank, + replica in a process of several devices); SGD with
    momentum as the single-process trainer, applied to the all-reduced mean gradient."""
    name = spec.workload.name
    with strategy.scope():
        with tf.variable_creator_scope(_local_statistics):
            model = models.build_model(name, dtype=dtype, seed=spec.seed, device=rank.device)
        variables = model.store.trainable_variables()
        optimizer = MomentumSGD(variables, LEARNING_RATE, MOMENTUM)
    replicas = strategy.num_replicas_in_sync // rank.world.size
    devices = [rank.device] if replicas == 1 else [f"/CPU:{index}" for index in range(replicas)]
    batches = [
        models.batch_for(
            name,
            spec.batch_size,
            spec.params,
            dtype=dtype,
            seed=spec.seed + rank.world.rank + i,
            device=device,
        )
        for i, device in enumerate(devices)
    ]
    inputs = _per_replica(strategy, [batch.inputs for batch in batches])
    labels = _per_replica(strategy, [batch.labels for batch in batches])

    replica_step = _replica_step(model, variables, optimizer)
    run = tf.function(
        lambda x, y: strategy.run(replica_step, args=(x, y)),
        autograph=False,
    )
    first_loss: list[float] = []

    def step() -> object:
        loss = run(inputs, labels)
        if not first_loss:  # this process's replicas' mean loss, as a rank's own for DDP
            local = strategy.experimental_local_results(loss)
            first_loss.append(float(np.mean([float(value) for value in local])))
        return loss

    report = RankReport(
        rank.backend_of(spec.strategy),
        first_step_loss=lambda: first_loss[0] if first_loss else float("nan"),
        replicas=replicas,
    )
    return step, report


def equivalence(case: EquivalenceCase, rank: Rank) -> EquivalenceResult:
    """The equivalence steps as a rank of a world, under its default strategy (MWMS, or
    MirroredStrategy in a process of several devices): the case's canonical weights in the
    strategy's variables, one step in which each replica trains on its contiguous shard of
    the batch and the strategy all-reduces the mean gradient (as _train does), which for
    equal shards and no BatchNorm is the whole batch's; the losses are the whole batch's, as
    the torch plugin's DDP path reports them (tests/distributed)."""
    from fwbench.tf_plugin.reference import labels_tensor, model_inputs

    strategy = rank.strategy
    with strategy.scope():
        with tf.variable_creator_scope(_local_statistics):
            net = models.build_model(case.model, device=rank.device, with_dropout=False)
        net.store.load(case.weights)
        variables = net.store.trainable_variables()
        spec = case.optimizer
        optimizer = MomentumSGD(variables, spec.learning_rate, spec.momentum)
    inputs = model_inputs(case.model, case.inputs, tf.float32, rank.device)
    labels = labels_tensor(case.labels, rank.device)
    size, local = strategy.num_replicas_in_sync, rank.world.local_devices
    if len(case.inputs) % size:
        raise ValueError(f"a batch of {len(case.inputs)} does not split into {size} shards")
    shard = len(case.inputs) // size
    first = rank.world.rank * local  # this process's replicas, in replica order
    rows = [slice((first + i) * shard, (first + i + 1) * shard) for i in range(local)]
    eval_logits = net(inputs, training=False).numpy()
    loss_before = float(cross_entropy(net(inputs, training=True), labels))

    replica_step = _replica_step(net, variables, optimizer)
    step = tf.function(lambda x, y: strategy.run(replica_step, args=(x, y)), autograph=False)
    step(
        _per_replica(strategy, [inputs[r] for r in rows]),
        _per_replica(strategy, [labels[r] for r in rows]),
    )
    return EquivalenceResult(
        param_count=net.store.param_count(),
        eval_logits=np.asarray(eval_logits, dtype=np.float32),
        loss_before=loss_before,
        loss_after=float(cross_entropy(net(inputs, training=True), labels)),
    )
