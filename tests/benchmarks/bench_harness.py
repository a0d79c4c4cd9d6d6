"""Benchmark: does the harness distort what it measures?

Times the same computation two ways, interleaved A B A B so that machine drift spreads evenly:
  A. through fwbench: the torch-cpu agent process, driven over gRPC by the collector's client;
  B. a bare script (bare_torch.py) in the same virtual environment.
Workloads: gemm 2048^3 infer (about 60 ms a step here; also compared as GFLOP/s) and lenet
infer at batch 1 (well under a millisecond, where per-iteration overhead would show).

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/bench_harness.py [--rounds 7] [--iterations 50]
Prints a Markdown table; docs/benchmarks.md records the figures and how they were taken.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.envs import environment_for
from fwbench.collector.launch import start_local
from fwbench.collector.manifest import discover_manifests, manifest_dirs

HERE = Path(__file__).parent
CASES = [("gemm", 1, 2 * 2048**3), ("lenet", 1, 833_040)]


def agent_median(client, workload: str, batch: int, iterations: int, warmup: int) -> float:
    request = agent_pb2.RunRequest(
        workload=workload,
        phase=agent_pb2.PHASE_INFER,
        batch_size=batch,
        warmup_iterations=warmup,
        min_iterations=iterations,
        max_iterations=iterations,
        min_seconds=0.0,
    )
    result = list(client.run(request, 600))[-1].result
    return statistics.median(result.sample_nanoseconds) / 1e9


def bare_median(python: Path, workload: str, batch: int, iterations: int, warmup: int) -> float:
    out = subprocess.run(
        [
            str(python),
            str(HERE / "bare_torch.py"),
            workload,
            str(batch),
            str(warmup),
            str(iterations),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"FWBENCH_DEVICE": "cpu", "PATH": "/usr/bin:/bin"},
    )
    return statistics.median(json.loads(out.stdout)) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    manifest = discover_manifests(manifest_dirs())["torch-cpu"]
    env = environment_for(manifest)
    env.ensure(print)
    handle = start_local(manifest, Path(tempfile.mkdtemp()))
    try:
        print(
            "| workload | harness median | bare median | ratio harness/bare (min..max over "
            "rounds) | harness GFLOP/s | bare GFLOP/s |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for workload, batch, flops in CASES:
            harness, bare = [], []
            for _ in range(args.rounds):
                harness.append(
                    agent_median(handle.client, workload, batch, args.iterations, args.warmup)
                )
                bare.append(bare_median(env.python, workload, batch, args.iterations, args.warmup))
            ratios = [h / b for h, b in zip(harness, bare, strict=True)]
            h, b = statistics.median(harness), statistics.median(bare)
            print(
                f"| {workload} bs={batch} | {h * 1e3:.3f} ms | {b * 1e3:.3f} ms | "
                f"{h / b:.3f} ({min(ratios):.3f}..{max(ratios):.3f}) | "
                f"{flops * batch / h / 1e9:.1f} | {flops * batch / b / 1e9:.1f} |"
            )
    finally:
        handle.stop()


if __name__ == "__main__":
    main()
