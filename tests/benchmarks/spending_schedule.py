"""Simulation: how `--until-decided` spends its error budget over the looks, on the whole
done-when command of issue 13 (docs/report.md, "Spending the budget late").

`collector run --agents tf-mkl,tf-eigen --aa tf-eigen --workloads conv2d,gemm --phases
train,infer --batch-sizes 8 --until-decided --budget 10m` asks 8 questions: tf-eigen against
tf-mkl and the A/A twin tf-eigen#2 against tf-eigen, in 4 cells. This replays run/decide.py's
rules with stats/sequential.py's own functions: rounds of fresh processes that measure only
the cells an open comparison needs, each lasting what those cells cost on the development
machine (Intel Xeon, 2 vCPUs: COST), the budget check before a round, the looks from the
second round, the two error budgets with their Holm-style sharing, each comparison's margin
as this host's history gave it (MARGIN). Each process's cell is off by a lognormal for life
whose SD is the history's spread for that agent and cell (SPREAD) times a scale, and one
process in so many is slowed by a burst. For each SPENDING_POWER asked, it prints how often
every comparison was decided, how often the conv2d-training A/A pair was called equivalent,
false calls and the seconds used.

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/spending_schedule.py --runs 200 --powers 1,2,3
"""

from __future__ import annotations

import argparse

import numpy as np

import fwbench.collector.stats.sequential as sequential
from fwbench.collector.stats.significance import EQUIVALENT, FASTER, SLOWER, UNDECIDED

CELLS = ("conv2d train", "conv2d infer", "gemm train", "gemm infer")
# tf-mkl's step time over tf-eigen's, as measured on the Xeon (docs/report.md)
TRUTH = {"tf-mkl": dict(zip(CELLS, (0.43, 0.79, 0.86, 0.93), strict=True))}
TRUTH["tf-eigen"] = TRUTH["tf-eigen#2"] = dict.fromkeys(CELLS, 1.0)
# SD of the log process medians in this host's history (the margins' sources, 2026-11-27)
SPREAD = {"tf-mkl": dict(zip(CELLS, (0.046, 0.052, 0.020, 0.041), strict=True))}
SPREAD["tf-eigen"] = SPREAD["tf-eigen#2"] = dict(
    zip(CELLS, (0.059, 0.042, 0.024, 0.026), strict=True)
)
# Seconds a cell adds to its process (build, first iteration, warm-up, timed loop), and a start
COST = {"tf-mkl": dict(zip(CELLS, (0.65, 0.6, 7.8, 3.2), strict=True))}
COST["tf-eigen"] = COST["tf-eigen#2"] = dict(zip(CELLS, (0.65, 0.6, 8.9, 3.4), strict=True))
START = 4.0
QUESTIONS = [("tf-eigen", "tf-mkl", c) for c in CELLS]
QUESTIONS += [("tf-eigen#2", "tf-eigen", c) for c in CELLS]
MARGIN = dict(zip(QUESTIONS, (0.078, 0.069, 0.05, 0.05, 0.086, 0.061, 0.05, 0.05), strict=True))
FLOOR, BUDGET, ROUNDS = 0.03, 600.0, 100


def process(rng: np.random.Generator, agent: str, cell: str, scale: float, bursts: float):
    slow = 1.12 if rng.random() < bursts else 1.0
    life = rng.lognormal(0.0, scale * SPREAD[agent][cell])
    return slow * TRUTH[agent][cell] * life * rng.lognormal(0.0, 0.005, 12)


def one_run(rng: np.random.Generator, scale: float, bursts: float) -> tuple[dict, float]:
    data: dict[tuple[str, str], list] = {(a, c): [] for a in TRUTH for c in CELLS}
    state = {q: {"verdict": UNDECIDED, "spent": 0.0, "looks": 0, "open": True} for q in QUESTIONS}
    used, looks_time = 0.0, 0.0
    for round_number in range(1, ROUNDS + 1):
        asked = [q for q in QUESTIONS if state[q]["open"]]
        if not asked:
            break
        needed = {(a, c) for a, _, c in asked} | {(b, c) for _, b, c in asked}
        agents = {a for a, _ in needed}
        seconds = sum(START + sum(COST[a][c] for x, c in needed if x == a) for a in agents)
        if used + seconds > BUDGET:
            break
        used += seconds
        for agent, cell in needed:
            data[(agent, cell)].append(process(rng, agent, cell, scale, bursts))
        if round_number == 1:
            looks_time = BUDGET - used
            continue
        elapsed = used - (BUDGET - looks_time)
        differences = len(QUESTIONS) - sum(s["verdict"] in (FASTER, SLOWER) for s in state.values())
        equivalences = len(QUESTIONS) - sum(s["verdict"] == EQUIVALENT for s in state.values())
        for question in asked:
            s = state[question]
            s["looks"] += 1
            now = sequential.spent_fraction(s["looks"], ROUNDS - 1, elapsed, looks_time)
            if now <= s["spent"]:
                s["open"] = False
                continue
            a_difference = sequential.alpha_between(s["spent"], now, differences)
            a_equivalence = sequential.alpha_between(s["spent"], now, equivalences)
            s["spent"] = now
            agent, against, cell = question
            seen = sequential.look(
                data[(against, cell)],
                data[(agent, cell)],
                a_difference,
                a_equivalence,
                FLOOR,
                MARGIN[question],
            )
            s["verdict"] = seen.verdict
            s["open"] = seen.verdict == UNDECIDED
    return {q: state[q]["verdict"] for q in QUESTIONS}, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--powers", default="1,2,3")
    parser.add_argument(
        "--models",
        default="0.8:0,0.7:0.1,0.6:0.05",
        help="scale of the history's spreads : share of burst processes",
    )
    args = parser.parse_args()
    aa_train = ("tf-eigen#2", "tf-eigen", "conv2d train")
    print(
        "noise model | power | every comparison decided | conv2d train A/A equivalent | "
        "false A/A differences | wrong tf-eigen calls | mean seconds"
    )
    for model in args.models.split(","):
        scale, bursts = (float(x) for x in model.split(":"))
        for power in (float(p) for p in args.powers.split(",")):
            sequential.SPENDING_POWER = power
            rng = np.random.default_rng(5)
            runs = [one_run(rng, scale, bursts) for _ in range(args.runs)]
            every = sum(all(v != UNDECIDED for v in verdicts.values()) for verdicts, _ in runs)
            aa = sum(verdicts[aa_train] == EQUIVALENT for verdicts, _ in runs)
            false = sum(
                any(verdicts[q] in (FASTER, SLOWER) for q in QUESTIONS[4:]) for verdicts, _ in runs
            )
            wrong = sum(
                any(verdicts[q] in (FASTER, EQUIVALENT) for q in QUESTIONS[:4])
                for verdicts, _ in runs
            )
            seconds = np.mean([used for _, used in runs])
            print(
                f"{scale} x history, {bursts:.0%} bursts | {power:g} | {every / args.runs:.0%} "
                f"| {aa / args.runs:.0%} | {false} | {wrong} | {seconds:.0f}"
            )


if __name__ == "__main__":
    main()
