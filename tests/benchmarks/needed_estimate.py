"""Analysis: how good is "about N processes a side would likely decide it"?

An undecided comparison of `collector run --until-decided` (and of `compare`) says how many
processes a side would likely decide it (stats/significance.py, repetitions_needed). This
simulates comparisons (a process draws a lifelong lognormal factor, SPREAD, and 30 step times
with 5% noise), looks with the sequential rules at every round (m comparisons sharing the
budget, looks planned for --rounds), records the estimate made at a given number of
processes a side, with and without counting the degrees of freedom more processes bring, and
then runs on until decided (at most --rounds) to see how many it actually took.

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/needed_estimate.py [--rounds 100] [--trials 200]
Figures: docs/report.md ("undecided").
"""

from __future__ import annotations

import argparse

import numpy as np

from fwbench.collector.stats.needed import repetitions_needed
from fwbench.collector.stats.sequential import look, look_alpha
from fwbench.collector.stats.significance import UNDECIDED, RatioEstimate

FLOOR, MARGIN, COMPARISONS = 0.03, 0.05, 8
CASES = [(1.0, 0.03), (1.0, 0.05), (1.08, 0.04)]  # (contender's speed, spread a process)


def process(rng: np.random.Generator, truth: float, spread: float) -> np.ndarray:
    return truth * rng.lognormal(0, spread) * rng.lognormal(0, 0.05, 30)


def trial(rng, ratio, spread, at, rounds):
    """(estimate without, with degrees of freedom, processes it took) or None when it was
    decided before `at`."""
    base: list[np.ndarray] = []
    other: list[np.ndarray] = []
    estimate = None
    for n in range(1, rounds + 1):
        base.append(process(rng, 0.01, spread))
        other.append(process(rng, 0.01 / ratio, spread))
        if n < 2:
            continue
        alpha = look_alpha(n - 1, rounds - 1, COMPARISONS)
        seen = look(base, other, alpha, alpha, FLOOR, MARGIN)
        if n == at and seen.verdict == UNDECIDED:
            interval = RatioEstimate(seen.speedup, seen.ci_low, seen.ci_high, float("nan"))
            estimate = (
                repetitions_needed(interval, n, FLOOR, MARGIN),
                repetitions_needed(interval, n, FLOOR, MARGIN, seen.level),
            )
        if seen.verdict != UNDECIDED:
            break
    if estimate is None or None in estimate:
        return None
    return (*estimate, n if seen.verdict != UNDECIDED else rounds + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    print(
        "| speed | spread | estimate at | square root only (median) | with df (median) | "
        "took (median) | took <= with df |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for ratio, spread in CASES:
        for at in (3, 5, 10):
            rng = np.random.default_rng(7)
            found = [trial(rng, ratio, spread, at, args.rounds) for _ in range(args.trials)]
            rows = np.array([f for f in found if f is not None], dtype=float)
            plain, counted, took = rows.T
            print(
                f"| {ratio} | {spread:.0%} | {at} | {np.median(plain):.0f} | "
                f"{np.median(counted):.0f} | {np.median(took):.0f} | "
                f"{np.mean(took <= counted):.0%} |"
            )


if __name__ == "__main__":
    main()
