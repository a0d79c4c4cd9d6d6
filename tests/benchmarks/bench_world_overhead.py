"""Benchmark: does the harness slow a distributed world down?

Times the same 2-rank data-parallel training step (LeNet; torch-cpu's DDP over gloo, or with
--framework tf-eigen's MWMS or jax-cpu's jax.distributed) three ways, interleaved and in a
turning order so that machine drift spreads evenly:
  A. `collector run --world-sizes 2` as a user runs it, scraping on (the default 0.25 s);
  B. the same with --scrape-interval 0 (no telemetry);
  C. a bare script (bare_ddp.py, bare_mwms.py, bare_jax.py): two processes pinned as the
     collector pins its ranks (one CPU each), the same threads, model, seed, batch and
     optimizer (the plugin's own model code); timed with perf_counter_ns.
A world's step time is its slowest rank's median (run/combine.py); C's is the same. Each
round is a fresh process (or world) of each arm, so the verdict is the collector's own
between-process rule (stats/significance.py: Welch's t over the rounds' log medians, TOST at
the margin): "equivalent" says the tool's step is within --margin of the bare script's,
"slower" that it is not, "undecided" that the rounds cannot tell. Since the arms run in
blocks (a round: each arm once, close in time), the rounds' paired ratios give a sharper
one-sided bound too ("at most X% slower"), which decides the "within --margin" column.

Run from the repository root with the dev environment, on an otherwise idle machine:
    .venv/bin/python tests/benchmarks/bench_world_overhead.py [--rounds 5] [--iterations 400]
        [--batch 8] [--csv FILE] [--framework torch|tensorflow|jax]
Prints a Markdown table; docs/lab/world-overhead.md records the figures and how they were taken.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.stats.significance import (
    DEFAULT_NOISE_FLOOR,
    equivalence_p,
    estimate_speedup,
    verdict,
)

HERE = Path(__file__).parent
COLLECTOR = Path(sys.executable).with_name("collector")
WORKLOAD, RANKS = "lenet", 2
# --framework: the agent whose world is measured and the bare script of the same step.
FRAMEWORKS = {
    "torch": ("torch-cpu", "bare_ddp.py"),  # DDP over gloo
    "tensorflow": ("tf-eigen", "bare_mwms.py"),  # MultiWorkerMirroredStrategy, RING
    "jax": ("jax-cpu", "bare_jax.py"),  # jax.distributed, XLA's CPU collectives (gloo)
}
Samples = list[int]  # the slowest rank's timed steps, nanoseconds
BARE = "bare script"


def slowest(ranks: list[Samples]) -> Samples:
    """The rank whose timed steps took longest in all, as run/combine.py picks it."""
    return max(ranks, key=sum)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tool_run(
    folder: Path, agent: str, batch: int, iterations: int, warmup: int, scrape: float
) -> tuple[Samples, float]:
    """(the world's slowest rank's samples, the row's first-step loss)."""
    command = [
        str(COLLECTOR),
        "run",
        "--agents",
        agent,
        "--workloads",
        WORKLOAD,
        "--phases",
        "train",
        "--batch-sizes",
        str(batch),
        "--world-sizes",
        str(RANKS),
        "--iterations",
        str(iterations),
        "--warmup",
        str(warmup),
        "--scrape-interval",
        f"{scrape:g}",
        "--store",
        str(folder / "store.sqlite"),
        "--out",
        str(folder / "run"),
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    row = pd.read_parquet(folder / "run" / "results.parquet").iloc[0]
    assert row["status"] == "ok", row["error"]
    return slowest(json.loads(row["rank_samples_ns"])), float(row["first_step_loss"])


def bare_run(
    python: Path, script: str, batch: int, iterations: int, warmup: int, threads: int
) -> tuple[Samples, float]:
    """(the slowest rank's samples, rank 0's first-step loss)."""
    port, peers = free_port(), ",".join(f"127.0.0.1:{free_port()}" for _ in range(RANKS))
    ranks = []
    for rank in range(RANKS):
        env = {
            "PATH": "/usr/bin:/bin",
            "RANK": str(rank),
            "WORLD_SIZE": str(RANKS),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PEERS": peers,
        }
        command = [
            "taskset",
            "-c",
            str(rank % os.cpu_count()),
            str(python),
            str(HERE / script),
            WORKLOAD,
            str(batch),
            str(warmup),
            str(iterations),
            str(threads),
        ]
        ranks.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env))
    # The JSON is the last line: gloo under JAX prints its own lines on stdout too.
    outputs = [json.loads(rank.communicate(timeout=600)[0].splitlines()[-1]) for rank in ranks]
    return slowest([out["samples"] for out in outputs]), outputs[0]["first_step_loss"]


def paired_ratio(tool: list[np.ndarray], bare: list[np.ndarray]) -> tuple[float, float]:
    """(tool / bare, the one-sided 95% upper bound of that ratio) from each round's pair of
    medians: the rounds are blocks (each arm once, close in time), so what the machine did in
    a round cancels in its ratio. A one-sided bound answers "at most X% slower"."""
    logs = np.log([np.median(t) / np.median(b) for t, b in zip(tool, bare, strict=True)])
    centre = float(logs.mean())
    if len(logs) < 2:
        return math.exp(centre), math.inf
    scale = float(logs.std(ddof=1)) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre + float(student_t.ppf(0.95, len(logs) - 1)) * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--batch", type=int, default=8, help="items a rank")
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--csv", type=Path, help="every round's median step, one row an arm")
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="torch")
    args = parser.parse_args()
    agent, script = FRAMEWORKS[args.framework]
    env = environment_for(discover_manifests(manifest_dirs())[agent])
    env.ensure()
    threads = max((os.cpu_count() or 1) // RANKS, 1)
    steps = args.batch, args.iterations, args.warmup
    arms = {
        "collector (scraping 0.25 s)": lambda d: tool_run(d, agent, *steps, 0.25),
        "collector (no scraping)": lambda d: tool_run(d, agent, *steps, 0.0),
        BARE: lambda d: bare_run(env.python, script, *steps, threads),
    }
    names = list(arms)
    rounds: dict[str, list[Samples]] = {name: [] for name in names}
    losses: dict[str, float] = {}
    records = []
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for position, name in enumerate(order, 1):
            with tempfile.TemporaryDirectory() as folder:
                samples, loss = arms[name](Path(folder))
            rounds[name].append(samples)
            losses[name] = loss
            median = statistics.median(samples) / 1e6
            records.append((round_ + 1, position, name, args.batch, round(median, 3)))
            print(f"round {round_ + 1}: {name}: {median:.3f} ms", file=sys.stderr)
    if args.csv:
        columns = ["round", "position", "arm", "batch", "median_step_ms"]
        pd.DataFrame(records, columns=columns).to_csv(args.csv, index=False)
    bare = [np.asarray(r, dtype=float) for r in rounds[BARE]]
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    print(
        f"{agent} ({script}): {WORKLOAD} train, batch {args.batch} a rank, {RANKS} ranks, "
        f"{threads} thread(s) a rank, {args.iterations} timed steps, {args.rounds} rounds; "
        f"{cpu}, {os.cpu_count()} CPUs\n"
    )
    bound = f"{args.margin:.0%}"
    head = "| arm | median step (ms), by round | tool / bare (95% interval) | verdict"
    print(f"{head} | paired by round: ratio, one-sided 95% top | within {bound} |")
    print("|---|---|---|---|---|---|")
    for name in names:
        medians = ", ".join(f"{statistics.median(r) / 1e6:.3f}" for r in rounds[name])
        if name == BARE:
            print(f"| {name} | {medians} | 1 | | | |")
            continue
        tool = [np.asarray(r, dtype=float) for r in rounds[name]]
        found = estimate_speedup(bare, tool)  # speedup of the tool over bare: bare / tool
        p_equal = equivalence_p(bare, tool, 1 + args.margin)
        said = verdict(
            found, found.p_value, DEFAULT_NOISE_FLOOR, args.margin, p_equivalent_adjusted=p_equal
        )
        said = {"faster": "tool faster", "slower": "tool slower"}.get(said, said)
        low, high = 1 / found.ci_high, 1 / found.ci_low  # tool / bare
        ratio = f"{1 / found.speedup:.3f} ({low:.3f}-{high:.3f})"
        paired, top = paired_ratio(tool, bare)
        within = "yes" if top <= 1 + args.margin else "not shown"
        print(f"| {name} | {medians} | {ratio} | {said} | {paired:.3f}, {top:.3f} | {within} |")
    print("\nfirst-step loss: " + ", ".join(f"{n} {v:.6f}" for n, v in losses.items()))


if __name__ == "__main__":
    main()
