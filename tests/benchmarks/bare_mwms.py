"""One rank of the bare-script side of the world overhead benchmark (bench_world_overhead.py
--framework tensorflow): the tf agent's MultiWorkerMirroredStrategy training step of a
catalogue model (distributed.py's: the same model and seed, a synthetic shard per rank, the
strategy's MEAN all-reduce of the gradients over RING collectives, momentum SGD), timed the
way a careful one-off script would (perf_counter_ns around each step), with no gRPC, no
runtime, no collector. Run with the tf agent environment's python, once per rank, with RANK,
WORLD_SIZE and PEERS (every rank's HOST:PORT, comma-separated); pin it yourself (taskset).

Usage: python bare_mwms.py WORKLOAD BATCH WARMUP ITERATIONS THREADS
       -> JSON {"samples": [ns, ...], "first_step_loss": float} on stdout
"""

from __future__ import annotations

import json
import os
import sys
import time

import tensorflow as tf

from fwbench.tf_plugin import models
from fwbench.tf_plugin.training import LEARNING_RATE, MOMENTUM, MomentumSGD, cross_entropy


def main() -> None:
    workload, batch, warmup, iterations, threads = sys.argv[1:6]
    tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    rank = int(os.environ["RANK"])
    workers = os.environ["PEERS"].split(",")
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
    os.environ["TF_CONFIG"] = json.dumps(config)
    ring = tf.distribute.experimental.CommunicationImplementation.RING
    options = tf.distribute.experimental.CommunicationOptions(implementation=ring)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        model = models.build_model(workload, dtype=tf.float32, seed=0, device="/CPU:0")
        variables = model.store.trainable_variables()
        optimizer = MomentumSGD(variables, LEARNING_RATE, MOMENTUM)
    data = models.batch_for(
        workload, int(batch), {}, dtype=tf.float32, seed=0 + rank, device="/CPU:0"
    )

    def replica_step(inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = cross_entropy(model(inputs, training=True), labels)
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        context = tf.distribute.get_replica_context()
        optimizer.apply(context.all_reduce(tf.distribute.ReduceOp.MEAN, gradients))
        return loss

    run = tf.function(lambda x, y: strategy.run(replica_step, args=(x, y)), autograph=False)
    first = float(run(data.inputs, data.labels))  # the first iteration
    for _ in range(int(warmup)):
        run(data.inputs, data.labels)
    samples = []
    for _ in range(int(iterations)):
        start = time.perf_counter_ns()
        run(data.inputs, data.labels)  # returns once its kernels are done (a CPU)
        samples.append(time.perf_counter_ns() - start)
    print(json.dumps({"samples": samples, "first_step_loss": first}))


if __name__ == "__main__":
    main()
