"""Analysis: how often the sequential rules of `collector run --until-decided` decide, and how
often they are wrong, by simulation (issue 13; the numbers in docs/report.md, "Looks").

Each simulated comparison is one contender against one baseline, a fresh process a side per
round: a process draws a lifelong factor (lognormal, SPREAD) and 30 step times around it
(5% noise); after each round from the second, the rules look. Two rule sets:

- current: stats/sequential.py as the collector uses it when rounds lead the spending
  (alpha / (rounds - 1) per look; time-led spending: tests/collector/test_sequential.py), TOST
  for equivalence);
- former: the first schedule (look k spends 0.05 x 6 / (pi^2 k^2), equivalence from the
  two-sided interval), kept here only to show what the change bought.

Both with m comparisons sharing the budget (Bonferroni; m = 8 as in the done-when command:
4 cells, an agent and an A/A twin each), so the levels are those a real run uses at first.

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/sequential_rules.py [--rounds 12] [--trials 400]
"""

from __future__ import annotations

import argparse
import math
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collector"))
from test_sequential import sequential  # the tests' simulation, kept in one place

from fwbench.collector.stats.sequential import look_alpha
from fwbench.collector.stats.significance import ALPHA, EQUIVALENT, FASTER, SLOWER

CASES = [  # (speed ratio of the contender, lifelong spread of a process)
    (1.0, 0.01),
    (1.0, 0.02),
    (1.0, 0.03),
    (1.0, 0.07),
    (1.05, 0.02),
    (1.3, 0.07),
]


def _rules(rule: str, comparisons: int, look_number: int, rounds: int) -> tuple[float, float]:
    """(difference, equivalence) budget at a look, m comparisons sharing it (Bonferroni)."""
    if rule == "current":
        alpha = look_alpha(look_number, rounds - 1, comparisons)
        return alpha, alpha
    spent = ALPHA * 6 / (math.pi**2 * look_number**2) / comparisons
    return spent, spent / 2  # the first equivalence: the two-sided interval at 1 - spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--comparisons", type=int, default=8)
    args = parser.parse_args()
    print(
        f"| ratio | spread | rule | equivalent | faster | slower | median processes "
        f"(decided) |  ({args.trials} trials, at most {args.rounds} processes a side, "
        f"m = {args.comparisons})"
    )
    for ratio, spread in CASES:
        for rule in ("former", "current"):
            rng = np.random.default_rng(2026)
            rules = partial(_rules, rule, args.comparisons)
            outcomes = [
                sequential(rng, ratio, spread, rules, args.rounds) for _ in range(args.trials)
            ]
            verdicts = [v for v, _ in outcomes]
            decided = [n for v, n in outcomes if v != "undecided"]
            share = {
                v: f"{100 * verdicts.count(v) / len(verdicts):.1f}%"
                for v in (EQUIVALENT, FASTER, SLOWER)
            }
            median = f"{np.median(decided):.0f}" if decided else "-"
            print(
                f"| {ratio:g} | {spread:.0%} | {rule} | {share[EQUIVALENT]} | {share[FASTER]} "
                f"| {share[SLOWER]} | {median} |"
            )


if __name__ == "__main__":
    main()
