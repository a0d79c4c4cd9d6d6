"""The bare-script side of the harness benchmarks: the same computation as the torch agent's
workload, timed the way a careful one-off script would (perf_counter_ns around each step, the
device synchronized before each clock read on CUDA), with no gRPC, no runtime and no
collector. Run with the torch agent environment's python.

Usage: python bare_torch.py WORKLOAD BATCH WARMUP ITERATIONS [--device cpu|cuda]
           [--dtype float32|bfloat16|float16] [--tf32 on|off] [--size M,N,K]
           [--min-seconds S]
       -> JSON list of ns samples
ITERATIONS is the least number of timed steps; with --min-seconds the loop also goes on until
that much time was timed, as the collector's --min-seconds does (on a GPU a short burst runs at
clocks a sustained load does not keep, so the two must time the same length of work).
gemm is an (M x K) @ (K x N) product (default 2048 each, float32, CPU); models run inference.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from fwbench.torch_plugin import models

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build(workload: str, batch: int, device: str = "cpu", dtype: str = "float32", size=None):
    generator = torch.Generator(device=device).manual_seed(0)
    kind = DTYPES[dtype]
    if workload == "gemm":
        m, n, k = size or (2048, 2048, 2048)
        a = torch.randn(m, k, generator=generator, device=device, dtype=kind)
        b = torch.randn(k, n, generator=generator, device=device, dtype=kind)
        return lambda: torch.matmul(a, b)
    model = models.build_model(workload).to(device=device, dtype=kind).eval()
    inputs, _ = models.example_batch(
        workload, batch, generator=generator, device=torch.device(device), dtype=kind
    )

    def infer():
        with torch.inference_mode():
            return model(inputs)

    return infer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("batch", type=int)
    parser.add_argument("warmup", type=int)
    parser.add_argument("iterations", type=int)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--tf32", choices=("on", "off"), default=None)
    parser.add_argument("--size", default=None, help="gemm M,N,K")
    parser.add_argument("--min-seconds", type=float, default=0.0)
    args = parser.parse_args()
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    size = tuple(int(part) for part in args.size.split(",")) if args.size else None
    step = build(args.workload, args.batch, args.device, args.dtype, size)
    cuda = args.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(1 + args.warmup):
        step()
    sync()
    samples: list[int] = []
    timed, wanted = 0, int(args.min_seconds * 1e9)
    while len(samples) < args.iterations or timed < wanted:
        start = time.perf_counter_ns()
        step()
        sync()
        samples.append(time.perf_counter_ns() - start)
        timed += samples[-1]
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
