"""Benchmark: how long the bootstrap intervals take on large inputs (stats/bootstrap.py).

`compare`, `report` and every round of `--until-decided` compute a median's interval over all
of a cell's samples and a speedup's interval over each side's processes. Both resample with
numpy, all replicates at once; a per-replicate Python loop would make a long cell's analysis
take minutes. The unit tests check what the intervals say; their speed is measured here, on a
quiet host, and never asserted where a busy one could fail it (docs/testing.md).

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/bench_bootstrap.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

from fwbench.collector.stats.bootstrap import median_interval, ratio_interval


def lognormal(n: int, seed: int) -> np.ndarray:
    return 0.01 * np.random.default_rng(seed).lognormal(0.0, 0.1, n)


def timed(work: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return seconds


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    one = [lognormal(100_000, 2)]
    three = [lognormal(2000, seed) for seed in range(3)]
    cases = {
        "median interval, one process of 100,000 samples": lambda: median_interval(one),
        "speedup interval, 3 processes of 2,000 samples a side": lambda: ratio_interval(
            three, three
        ),
    }
    print(f"{cpu_model()}, numpy {np.__version__}, median (min-max) of {args.repeat} runs")
    for name, work in cases.items():
        seconds = timed(work, args.repeat)
        low, high = min(seconds), max(seconds)
        print(f"  {name}: {statistics.median(seconds):.3f} s ({low:.3f}-{high:.3f})")


if __name__ == "__main__":
    main()
