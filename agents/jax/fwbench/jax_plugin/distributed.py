"""Ranks of a distributed world on JAX's own engine: jax.distributed (one process per rank;
rank 0 serves the coordinator at MASTER_ADDR:MASTER_PORT), XLA's cross-process collectives
(on a CPU those of jax_cpu_collectives_implementation, gloo by default in jax 0.10), and one
Mesh over every process's devices with a "data" axis.

"jax_multiprocess" trains a catalogue model data-parallel the way JAX does it: parameters
replicated over the mesh, the global batch sharded over "data" (each process contributes its
own synthetic shard, seed + rank), and the whole step one jit-compiled program, in which
XLA's SPMD partitioner inserts the gradient all-reduce. One consequence differs from torch's
DDP: BatchNorm's batch statistics are those of the global batch (XLA all-reduces them too),
as SyncBatchNorm's, not each rank's own. "collective" is a psum over "data" under shard_map.

"jax_sharded" is the same step over the devices of ONE process (FWBENCH_LOCAL_DEVICES=D: D host
devices made by --xla_force_host_platform_device_count, no jax.distributed): the batch
sharded over them, batch_size items each, and XLA's in-process all-reduce. Those forced
devices must not be combined with several processes (runtime/world.py refuses it), and a
world of one process offers it also with one device, the baseline of its scaling.

"tensor" is model parallelism within layers, the JAX way: every weight whose last axis (a
dense layer's or a convolution's output features) divides by the devices is sharded on that
axis over the mesh, the rest replicated; the batch (the world's, batch_size in all) is
replicated, and XLA's SPMD partitioner splits each layer's work and inserts the collectives
(all-gathers of activations, reduce-scatters of gradients) itself."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fwbench.jax_plugin import models
from fwbench.jax_plugin.reference import equivalence_fn, optimizer_for, to_model_input
from fwbench.jax_plugin.training import TrainLoop, sgd
from fwbench.runtime.plugin import Capability, RankReport, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult
from fwbench.runtime.world import World

JAX_MULTIPROCESS = "jax_multiprocess"
JAX_SHARDED = "jax_sharded"  # one process, a mesh over its own devices
TENSOR = "tensor"  # weights sharded on their output features, the batch replicated
COLLECTIVE = "collective"
AXIS = "data"
ELEMENTS_PER_ITEM = 1024  # the catalogue's allreduce item
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def start(world: World, device: str) -> None:
    """Joins the world (blocks until every rank has joined). Called once, from the plugin's
    constructor, before anything creates a jax backend. `device` is PluginContext.device.
    With FWBENCH_LOCAL_DEVICES=D > 1 (a world of one process) makes D host devices instead."""
    if world.local_devices > 1:
        if device == "cuda":
            raise RuntimeError(
                "FWBENCH_LOCAL_DEVICES makes host (CPU) devices; on a GPU host a process uses "
                "the GPUs it sees (CUDA_VISIBLE_DEVICES): not built"
            )
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={world.local_devices}".strip()
        return
    if _DEVICE_COUNT_FLAG in os.environ.get("XLA_FLAGS", ""):
        raise RuntimeError(
            f"XLA_FLAGS sets {_DEVICE_COUNT_FLAG}: several CPU devices in one process cannot "
            "be combined with a world of processes; unset it for ranks"
        )
    if world.backend:  # FWBENCH_DIST_BACKEND: gloo or mpi on a CPU
        jax.config.update("jax_cpu_collectives_implementation", world.backend)
    seconds = world.timeout_seconds  # FWBENCH_DIST_TIMEOUT_SECONDS
    jax.distributed.initialize(
        coordinator_address=world.rendezvous,
        num_processes=world.size,
        process_id=world.rank,
        # On a GPU host every rank takes the GPU of its local rank, as torchrun's do.
        local_device_ids=[world.local_rank] if device == "cuda" else None,
        initialization_timeout=seconds,
    )


def backend_name(device: jax.Device, world: World) -> str:
    """What carries the collectives: NCCL between GPUs, XLA's own between one process's host
    devices, the configured CPU implementation between processes."""
    if world.local_devices > 1:
        return "xla-local"
    if device.platform == "gpu":
        return "nccl"
    return str(jax.config.jax_cpu_collectives_implementation)  # type: ignore[attr-defined]


def capabilities(base: Capability, world: World) -> dict[str, Capability]:
    """What a rank distributes: every model's training step, and allreduce. A process of
    several devices offers jax_sharded only; any world of one process offers it too."""
    strategies: tuple[str, ...] = (JAX_MULTIPROCESS,)
    if world.size == 1:
        strategies = (JAX_SHARDED,) if world.local_devices > 1 else (JAX_MULTIPROCESS, JAX_SHARDED)
    train = Capability(("train",), base.dtypes, base.modes, (*strategies, TENSOR))
    return {
        **{name: train for name in models.MODEL_NAMES},
        "allreduce": Capability(("train",), base.dtypes, base.modes, (COLLECTIVE,)),
    }


def mesh_for(device: jax.Device) -> Mesh:
    """Every process's devices of this platform, in process order, on one "data" axis."""
    return Mesh(np.array(jax.devices(device.platform)), (AXIS,))


def build(
    spec: WorkloadSpec, dtype: jnp.dtype, mesh: Mesh, backend: str
) -> tuple[Callable[[], object], RankReport]:
    if spec.strategy == COLLECTIVE and spec.workload.name == "allreduce":
        return _allreduce(spec, dtype, mesh, backend)
    if spec.workload.name in models.MODEL_NAMES and spec.strategy in (
        JAX_MULTIPROCESS,
        JAX_SHARDED,
        TENSOR,
    ):
        return _train(spec, dtype, mesh, backend, tensor=spec.strategy == TENSOR)
    raise UnsupportedWorkload(f"jax: no strategy {spec.strategy!r} for {spec.workload.name}")


def _global(sharding: NamedSharding, local: Any) -> Any:
    """Every leaf of `local` (this process's part) as one array over the mesh: the whole
    value where `sharding` replicates, this process's rows where it splits the batch."""
    return jax.tree.map(
        lambda leaf: jax.make_array_from_process_local_data(sharding, np.asarray(leaf)), local
    )


def _allreduce(
    spec: WorkloadSpec, dtype: jnp.dtype, mesh: Mesh, backend: str
) -> tuple[Callable[[], object], RankReport]:
    """Each device holds batch_size x 1024 elements; every step replaces them by their sum
    over the world (in place: the message is donated), as torch's all_reduce does."""
    elements = spec.batch_size * ELEMENTS_PER_ITEM
    local_devices = len(mesh.local_devices)
    sharding = NamedSharding(mesh, P(AXIS))
    message = [_global(sharding, np.ones(elements * local_devices, dtype))]
    summed = jax.shard_map(
        lambda x: jax.lax.psum(x, AXIS), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)
    )
    reduce = jax.jit(summed, donate_argnums=0)
    jax.block_until_ready(message[0])

    def step() -> object:
        message[0] = reduce(message[0])
        return message[0]

    return step, RankReport(backend, collective_bytes=elements * jnp.dtype(dtype).itemsize)


def _weight_sharding(mesh: Mesh, leaf: Any) -> NamedSharding:
    """A weight's sharding under "tensor": its last axis over the mesh where that divides."""
    shape = np.shape(leaf)
    if len(shape) >= 2 and shape[-1] % mesh.devices.size == 0:
        return NamedSharding(mesh, P(*([None] * (len(shape) - 1)), AXIS))
    return NamedSharding(mesh, P())


def _tensor_parallel(mesh: Mesh, params: Any, state: Any, batch: Any) -> tuple[Any, Any, Any]:
    """Every process holds the whole of each value (the same seeds): each device takes its
    part of the weights and the whole batch."""

    def place(leaf: Any, sharding: NamedSharding) -> jax.Array:
        full = np.asarray(leaf)
        return jax.make_array_from_callback(full.shape, sharding, lambda index: full[index])

    replicated = NamedSharding(mesh, P())
    params = jax.tree.map(lambda leaf: place(leaf, _weight_sharding(mesh, leaf)), params)
    state, batch = jax.tree.map(lambda leaf: place(leaf, replicated), (state, batch))
    return params, state, batch


def _train(
    spec: WorkloadSpec, dtype: jnp.dtype, mesh: Mesh, backend: str, tensor: bool = False
) -> tuple[Callable[[], object], RankReport]:
    """The single-process trainer's step (loss, SGD lr 0.01 momentum 0.9), jitted over the
    mesh: identical initial weights on every rank (the seed), each its own data shard; a
    process of D devices makes D x batch_size items, batch_size for each of its devices.
    With `tensor`, the weights are sharded instead and every device sees the same batch of
    batch_size items (_tensor_parallel)."""
    model = models.Model(spec.workload.name)
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    dropout_key = _global(replicated, models.dropout_key(spec.seed))
    if tensor:
        params, state, inputs, labels = models.synthetic_training(model, spec, dtype)
        params, state, (inputs, labels) = _tensor_parallel(mesh, params, state, (inputs, labels))
    else:
        local = replace(spec, batch_size=spec.batch_size * len(mesh.local_devices))
        params, state, inputs, labels = models.synthetic_training(
            model, local, dtype, data_seed=spec.seed + jax.process_index()
        )
        params, state = _global(replicated, (params, state))
        inputs, labels = _global(batch, (inputs, labels))
    loop = TrainLoop(model, params, state, sgd(0.01, 0.9), dropout_key, spec.mode, per_example=True)
    jax.block_until_ready((loop.params, inputs, labels))
    first: list[jax.Array] = []

    def step() -> object:
        losses = loop(inputs, labels)
        if not first:
            first.append(losses)
        return losses

    def first_step_loss() -> float:
        """This rank's own examples' mean loss in the first step (torch: its local loss)."""
        if not first:
            return float("nan")
        shards = sorted(first[0].addressable_shards, key=lambda s: s.index[0].start or 0)
        return float(np.mean(np.concatenate([np.asarray(s.data) for s in shards])))

    replicas = 1 if tensor else len(mesh.local_devices)
    return step, RankReport(backend, first_step_loss=first_step_loss, replicas=replicas)


def equivalence(case: EquivalenceCase, mesh: Mesh) -> EquivalenceResult:
    """The equivalence steps as a rank of a world, the JAX way: the case's canonical weights
    replicated over the mesh, each process contributing its contiguous shard of the batch,
    and the reference's whole step one program jitted over the mesh, whose SPMD partitioner
    all-reduces the gradient; the losses are the whole batch's, on every rank
    (tests/distributed/test_distributed_equivalence.py)."""
    model = models.Model(case.model)
    ranks, rank = jax.process_count(), jax.process_index()
    if len(case.inputs) % ranks:
        raise ValueError(f"a batch of {len(case.inputs)} does not split into {ranks} shards")
    rows = slice(rank * len(case.inputs) // ranks, (rank + 1) * len(case.inputs) // ranks)
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    params, state = _global(replicated, model.from_canonical(case.weights))
    x = to_model_input(model, np.asarray(case.inputs)[rows], dtype=jnp.float32)
    x, labels = _global(batch, (x, np.asarray(case.labels)[rows].astype(np.int32)))
    step = equivalence_fn(model, optimizer_for(case.optimizer))
    eval_logits, loss_before, loss_after = jax.jit(step, out_shardings=replicated)(
        params, state, x, labels
    )
    return EquivalenceResult(
        param_count=model.trainable_count(),
        eval_logits=np.asarray(eval_logits, np.float32),
        loss_before=float(loss_before),
        loss_after=float(loss_after),
    )
