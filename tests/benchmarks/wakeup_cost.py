"""Diagnostic: what wake-ups on a rank's CPU cost a 2-rank world's step, measured inside one
bare world (bare_ddp.py, pinned one CPU a rank, as bench_world_overhead.py runs it) while a
waker process on each rank's CPU switches on and off: phases of --phase-seconds, off and on in
turn, an "on" phase waking --rates times a second (taking turns when several are given) and
spinning --work-us at each wake-up. Each "on" phase's median step is paired with the mean of
its two neighbouring "off" phases (log scale), so the drift of a launch cancels; excluding each
phase's first 10%. The harness's own threads wake a rank's CPU 30-110 times a second
(world_threads.py): this bounds what those wake-ups can cost.

Run from the repository root with the dev environment, on an otherwise idle machine:
    .venv/bin/python tests/benchmarks/wakeup_cost.py [--rates 100,1000] [--phase-seconds 1]
        [--seconds 120] [--work-us 20] [--batch 8] [--csv FILE]
Prints one line a rate; docs/lab/world-overhead.md records what it found.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from bench_world_overhead import RANKS, WORKLOAD, free_port
from scipy.stats import t as student_t

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs

HERE = Path(__file__).parent
SETTLE_SECONDS = 15.0  # the world's start, first step and warm-up, before the first phase

WAKER = """
import os, sys, time
start, phase, end, work = (int(a) for a in sys.argv[1:5])
rates = [int(r) for r in sys.argv[5].split(",")]
if sys.argv[6] == "idle":
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
elif sys.argv[6] != "normal":
    os.nice(int(sys.argv[6]))
schedule = [r for rate in rates for r in (0, rate)]  # off, on, off, on...
while (now := time.perf_counter_ns()) < start:
    time.sleep((start - now) / 1e9)
while (now := time.perf_counter_ns()) < end:
    k = (now - start) // phase
    rate, phase_end = schedule[k % len(schedule)], start + (k + 1) * phase
    if rate == 0:
        time.sleep(max(0, phase_end - now) / 1e9)
        continue
    interval = 1 / rate
    while (now := time.perf_counter_ns()) < min(phase_end, end):
        time.sleep(interval)
        spin = time.perf_counter_ns() + work
        while time.perf_counter_ns() < spin:
            pass
"""


def phases(start: int, phase: int, end: int, rates: list[int]) -> pd.DataFrame:
    schedule = [r for rate in rates for r in (0, rate)]
    count = (end - start) // phase
    return pd.DataFrame(
        {
            "phase": range(count),
            "start": [start + k * phase for k in range(count)],
            "rate": [schedule[k % len(schedule)] for k in range(count)],
        }
    )


def medians(ranks: list[dict[str, list[int]]], table: pd.DataFrame, phase: int) -> pd.DataFrame:
    """Each phase's median step of the world's slowest rank there, over steps ending in the
    phase's last 90%."""
    rows = []
    for _, p in table.iterrows():
        low, high = p["start"] + phase // 10, p["start"] + phase
        per_rank = []
        for rank in ranks:
            steps = [
                s for s, e in zip(rank["samples"], rank["ends"], strict=True) if low <= e < high
            ]
            if len(steps) >= 20:
                per_rank.append(statistics.median(steps))
        if len(per_rank) == len(ranks):
            rows.append({"phase": p["phase"], "rate": p["rate"], "median_ns": max(per_rank)})
    return pd.DataFrame(rows)


def paired(table: pd.DataFrame, rate: int) -> tuple[float, float, float, int]:
    """(geometric mean on/off, 95% low, high, pairs)."""
    by_phase = table.set_index("phase")
    logs = []
    for k, row in by_phase[by_phase["rate"] == rate].iterrows():
        if k - 1 in by_phase.index and k + 1 in by_phase.index:
            off = (
                math.log(by_phase.at[k - 1, "median_ns"])
                + math.log(by_phase.at[k + 1, "median_ns"])
            ) / 2
            logs.append(math.log(row["median_ns"]) - off)
    n = len(logs)
    if n < 3:
        return math.nan, math.nan, math.nan, n
    mean, half = (
        statistics.fmean(logs),
        student_t.ppf(0.975, n - 1) * statistics.stdev(logs) / math.sqrt(n),
    )
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,1000", help="wake-ups a second, comma-separated")
    parser.add_argument("--phase-seconds", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=120.0, help="seconds of phases")
    parser.add_argument("--work-us", type=float, default=20.0, help="spin at each wake-up")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=60_000, help="the world's timed steps")
    parser.add_argument(
        "--policy",
        default="normal",
        help="the waker's scheduling: normal, idle (SCHED_IDLE) or a nice value",
    )
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    environment = environment_for(discover_manifests(manifest_dirs())["torch-cpu"])
    environment.ensure()
    python, cpus, port = str(environment.python), os.cpu_count() or 1, free_port()
    ranks = []
    for rank in range(RANKS):
        env = {
            "PATH": "/usr/bin:/bin",
            "RANK": str(rank),
            "WORLD_SIZE": str(RANKS),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        command = [
            "taskset",
            "-c",
            str(rank % cpus),
            python,
            str(HERE / "bare_ddp.py"),
            WORKLOAD,
            str(args.batch),
            "50",
            str(args.iterations),
            "1",
        ]
        ranks.append(subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True))
    phase = int(args.phase_seconds * 1e9)
    start = time.perf_counter_ns() + int(SETTLE_SECONDS * 1e9)
    end = start + int(args.seconds * 1e9)
    wakers = [
        subprocess.Popen(
            [
                "taskset",
                "-c",
                str(rank % cpus),
                sys.executable,
                "-c",
                WAKER,
                str(start),
                str(phase),
                str(end),
                str(int(args.work_us * 1000)),
                args.rates,
                args.policy,
            ]
        )
        for rank in range(RANKS)
    ]
    outputs = [json.loads(rank.communicate(timeout=3600)[0].splitlines()[-1]) for rank in ranks]
    for waker in wakers:
        waker.kill()
        waker.wait()
    last_end = min(rank["ends"][-1] for rank in outputs)
    if last_end < end:
        print(
            f"note: the world ended {(end - last_end) / 1e9:.0f} s before the phases did "
            "(raise --iterations)",
            file=sys.stderr,
        )
    table = medians(outputs, phases(start, phase, min(end, last_end), rates), phase)
    if args.csv:
        table.to_csv(args.csv, index=False)
    off = table[table["rate"] == 0]["median_ns"] / 1e6
    print(
        f"off phases: {len(off)}, median step {off.median():.3f} ms "
        f"(phases {off.min():.3f}-{off.max():.3f})"
    )
    for rate in rates:
        ratio, low, high, n = paired(table, rate)
        print(
            f"{rate} wake-ups/s a CPU, {args.work_us:g} us each ({args.policy}): "
            f"step on/off {ratio:.3f} (95% {low:.3f}-{high:.3f}), {n} pairs"
        )


if __name__ == "__main__":
    main()
