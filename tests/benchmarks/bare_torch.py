"""The bare-script side of the harness benchmark: the same computation as the torch agent's
workload, timed the way a careful one-off script would (perf_counter_ns around each step),
with no gRPC, no runtime and no collector. Run with the torch agent environment's python.

Usage: python bare_torch.py WORKLOAD BATCH WARMUP ITERATIONS   -> JSON list of ns samples
"""

from __future__ import annotations

import json
import sys
import time

import torch

from fwbench.torch_plugin import models


def build(workload: str, batch: int):
    generator = torch.Generator().manual_seed(0)
    if workload == "gemm":
        a = torch.randn(2048, 2048, generator=generator)
        b = torch.randn(2048, 2048, generator=generator)
        return lambda: torch.matmul(a, b)
    model = models.build_model(workload).eval()
    inputs, _ = models.example_batch(workload, batch, generator=generator)

    def infer():
        with torch.inference_mode():
            return model(inputs)

    return infer


def main() -> None:
    workload, batch, warmup, iterations = sys.argv[1], *map(int, sys.argv[2:5])
    step = build(workload, batch)
    for _ in range(1 + warmup):
        step()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        step()
        samples.append(time.perf_counter_ns() - start)
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
