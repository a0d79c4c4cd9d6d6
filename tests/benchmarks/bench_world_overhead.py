"""Benchmark: does the harness slow a distributed world down?

Times the same 2-rank DDP training step (torch-cpu, LeNet, gloo) three ways, interleaved and
in a turning order so that machine drift spreads evenly:
  A. `collector run --world-sizes 2` as a user runs it, scraping on (the default 0.25 s);
  B. the same with --scrape-interval 0 (no telemetry);
  C. a bare script (bare_ddp.py): two processes pinned as the collector pins its ranks (one
     CPU each), the same threads, model, seed, batch and optimizer; timed with perf_counter_ns.
A world's step time is its slowest rank's median (run/combine.py); C's is the same.

Run from the repository root with the dev environment, on an otherwise idle machine:
    .venv/bin/python tests/benchmarks/bench_world_overhead.py [--rounds 5] [--iterations 400]
Prints a Markdown table; docs/distributed.md records the figures and how they were taken.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs

HERE = Path(__file__).parent
COLLECTOR = Path(sys.executable).with_name("collector")
WORKLOAD, BATCH, RANKS = "lenet", 8, 2


def tool_median(folder: Path, iterations: int, warmup: int, scrape: float) -> tuple[float, float]:
    """(the world row's median step seconds, its first-step loss)."""
    command = [str(COLLECTOR), "run", "--agents", "torch-cpu", "--workloads", WORKLOAD,
               "--phases", "train", "--batch-sizes", str(BATCH), "--world-sizes", str(RANKS),
               "--iterations", str(iterations), "--warmup", str(warmup),
               "--scrape-interval", f"{scrape:g}", "--store", str(folder / "store.sqlite"),
               "--out", str(folder / "run")]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True)
    row = pd.read_parquet(folder / "run" / "results.parquet").iloc[0]
    assert row["status"] == "ok", row["error"]
    return float(row["median_seconds"]), float(row["first_step_loss"])


def bare_median(python: Path, iterations: int, warmup: int, threads: int) -> tuple[float, float]:
    """The slowest rank's median step seconds (the rank whose timed steps took longest in
    all, as combine.py picks), and rank 0's first-step loss."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = []
    for rank in range(RANKS):
        env = {"PATH": "/usr/bin:/bin", "RANK": str(rank), "WORLD_SIZE": str(RANKS),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
        command = ["taskset", "-c", str(rank % os.cpu_count()), str(python),
                   str(HERE / "bare_ddp.py"), WORKLOAD, str(BATCH), str(warmup),
                   str(iterations), str(threads)]  # fmt: skip
        ranks.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env))
    outputs = [json.loads(rank.communicate(timeout=600)[0]) for rank in ranks]
    slowest = max(outputs, key=lambda out: sum(out["samples"]))
    return statistics.median(slowest["samples"]) / 1e9, outputs[0]["first_step_loss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    manifest = discover_manifests(manifest_dirs())["torch-cpu"]
    env = environment_for(manifest)
    env.ensure()
    threads = max((os.cpu_count() or 1) // RANKS, 1)
    arms = {
        "collector (scraping 0.25 s)": lambda d: tool_median(d, args.iterations, args.warmup, 0.25),
        "collector (no scraping)": lambda d: tool_median(d, args.iterations, args.warmup, 0.0),
        "bare DDP script": lambda d: bare_median(env.python, args.iterations, args.warmup, threads),
    }
    names = list(arms)
    times: dict[str, list[float]] = {name: [] for name in names}
    losses: dict[str, float] = {}
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            with tempfile.TemporaryDirectory() as folder:
                seconds, loss = arms[name](Path(folder))
            times[name].append(seconds)
            losses[name] = loss
            print(f"round {round_ + 1}: {name}: {seconds * 1e3:.3f} ms", file=sys.stderr)
    bare = times["bare DDP script"]
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    print(f"{WORKLOAD} train, batch {BATCH} a rank, {RANKS} ranks (gloo), {threads} thread(s) "
          f"a rank, {args.iterations} timed steps, {args.rounds} rounds; {cpu}, "
          f"{os.cpu_count()} CPUs\n")  # fmt: skip
    print("| arm | median step (ms), by round | ratio to bare, by round | median ratio |")
    print("|---|---|---|---|")
    for name in names:
        ratios = [t / b for t, b in zip(times[name], bare, strict=True)]
        steps = ", ".join(f"{t * 1e3:.3f}" for t in times[name])
        shown = ", ".join(f"{r:.3f}" for r in ratios)
        print(f"| {name} | {steps} | {shown} | {statistics.median(ratios):.3f} |")
    print("\nfirst-step loss: " + ", ".join(f"{n} {v:.6f}" for n, v in losses.items()))


if __name__ == "__main__":
    main()
