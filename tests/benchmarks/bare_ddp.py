"""One rank of the bare-script side of the world overhead benchmark (bench_world_overhead.py):
the torch agent's DDP training step of a catalogue model (same model, same seed, same
synthetic batch per rank, SGD lr 0.01 momentum 0.9, gloo over TCP), timed the way a careful
one-off script would (perf_counter_ns around each step), with no gRPC, no runtime, no
collector. Run with the torch agent environment's python, once per rank, with torchrun's
variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); pin it yourself (taskset).

Usage: python bare_ddp.py WORKLOAD BATCH WARMUP ITERATIONS THREADS
       -> JSON {"samples": [ns, ...], "first_step_loss": float, "ends": [ns, ...]} on stdout
("ends": each timed step's end on perf_counter_ns, CLOCK_MONOTONIC, which every process of
the host shares: wakeup_cost.py lines them up with another process's phases).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from fwbench.torch_plugin import models


def main() -> None:
    workload, batch, warmup, iterations, threads = sys.argv[1:6]
    torch.set_num_threads(int(threads))
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    address = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=size)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(models.build_model(workload))
    generator = torch.Generator().manual_seed(0 + rank)
    inputs, labels = models.example_batch(workload, int(batch), generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    losses = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        if not losses:
            losses.append(float(loss.detach()))

    for _ in range(int(warmup) + 1):  # the first iteration, then the warm-up
        step()
    samples, ends = [], []
    for _ in range(int(iterations)):
        start = time.perf_counter_ns()
        step()
        end = time.perf_counter_ns()
        samples.append(end - start)
        ends.append(end)
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"samples": samples, "first_step_loss": losses[0], "ends": ends}))


if __name__ == "__main__":
    main()
