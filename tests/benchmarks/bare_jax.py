"""One rank of the bare-script side of the world overhead benchmark (bench_world_overhead.py
--framework jax): the jax agent's jax_multiprocess training step of a catalogue model
(distributed.py's: jax.distributed, one Mesh over every process's CPU device with a "data"
axis, weights replicated, each rank its own synthetic shard of the global batch, the whole
step one jitted program whose gradient all-reduce XLA inserts; SGD lr 0.01 momentum 0.9),
timed the way a careful one-off script would (perf_counter_ns around each step and
block_until_ready), with no gRPC, no runtime, no collector. Run with the jax agent
environment's python, once per rank, with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; pin
it yourself (taskset: XLA sizes its thread pool to the affinity).

Usage: python bare_jax.py WORKLOAD BATCH WARMUP ITERATIONS THREADS
       -> JSON {"samples": [ns, ...], "first_step_loss": float} on stdout
"""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from fwbench.jax_plugin import models
from fwbench.jax_plugin.training import TrainLoop, sgd


def main() -> None:
    workload, batch, warmup, iterations, _threads = sys.argv[1:6]  # threads: the affinity's
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    coordinator = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=size, process_id=rank)
    mesh = Mesh(np.array(jax.devices("cpu")), ("data",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def spread(sharding: NamedSharding, local: object) -> object:
        return jax.tree.map(
            lambda leaf: jax.make_array_from_process_local_data(sharding, np.asarray(leaf)),
            local,
        )

    model = models.Model(workload)
    spec = SimpleNamespace(seed=0, batch_size=int(batch), params={})
    params, state, inputs, labels = models.synthetic_training(
        model, spec, jnp.float32, data_seed=0 + rank
    )
    params, state = spread(replicated, (params, state))
    inputs, labels = spread(sharded, (inputs, labels))
    key = spread(replicated, models.dropout_key(0))
    loop = TrainLoop(model, params, state, sgd(0.01, 0.9), key, "jit", per_example=True)
    losses = jax.block_until_ready(loop(inputs, labels))  # the first iteration
    own = [np.asarray(shard.data) for shard in losses.addressable_shards]
    first = float(np.mean(np.concatenate(own)))
    for _ in range(int(warmup)):
        jax.block_until_ready(loop(inputs, labels))
    samples = []
    for _ in range(int(iterations)):
        start = time.perf_counter_ns()
        jax.block_until_ready(loop(inputs, labels))
        samples.append(time.perf_counter_ns() - start)
    print(json.dumps({"samples": samples, "first_step_loss": first}))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
