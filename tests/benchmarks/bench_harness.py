"""Benchmark: does the harness distort what it measures?

Times the same computation two ways, interleaved A B A B so that machine drift spreads evenly:
  A. through fwbench: the torch-cpu agent process, driven over gRPC by the collector's client;
  B. a bare script (bare_torch.py) in the same virtual environment.
Workloads: gemm 2048^3 infer (about 60 ms a step here; also compared as GFLOP/s) and lenet
infer at batch 1 (well under a millisecond, where per-iteration overhead would show).

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/bench_harness.py [--rounds 9] [--warmup 50]
Prints a Markdown table; docs/benchmarks.md records the figures and how they were taken.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.launchers.local import start_local
from fwbench.runtime.plugin import BuiltStep, Settings
from fwbench.runtime.timing import LoopPlan, measure

HERE = Path(__file__).parent
# (workload, batch, FLOPs per item, timed iterations per round): lenet's sub-millisecond
# step needs thousands of iterations before its median settles on this machine.
CASES = [("gemm", 1, 2 * 2048**3, 30), ("lenet", 1, 833_040, 2000)]


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


def loop_cost_ns(iterations: int = 200_000) -> float:
    """The timing loop's own cost per iteration: wall time of measure() over an empty step,
    divided by the iterations (includes the two clock reads and the sample append)."""
    empty = BuiltStep(step=lambda: None, settings=Settings("float32", 1, 1, "eager", "", "cpu"))
    plan = LoopPlan(0, iterations, 0.0, iterations, progress_interval_seconds=0.5)
    start = time.perf_counter_ns()
    measure(lambda: empty, lambda _: None, plan, threading.Event(), lambda *_: None)
    return (time.perf_counter_ns() - start) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=50)
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
        for workload, batch, flops, iterations in CASES:
            harness, bare = [], []
            for _ in range(args.rounds):
                harness.append(
                    agent_median(handle.client, workload, batch, iterations, args.warmup)
                )
                bare.append(bare_median(env.python, workload, batch, iterations, args.warmup))
            ratios = [h / b for h, b in zip(harness, bare, strict=True)]
            h, b = statistics.median(harness), statistics.median(bare)
            print(
                f"| {workload} bs={batch} | {h * 1e3:.3f} ms | {b * 1e3:.3f} ms | "
                f"{h / b:.3f} ({min(ratios):.3f}..{max(ratios):.3f}) | "
                f"{flops * batch / h / 1e9:.1f} | {flops * batch / b / 1e9:.1f} |"
            )
    finally:
        handle.stop()
    print(f"\ntiming loop cost on an empty step: {loop_cost_ns():.0f} ns per iteration")


if __name__ == "__main__":
    main()
