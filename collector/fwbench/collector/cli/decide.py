"""`collector run --until-decided`: its options, their checks, and the table of decisions a
run measured that way ends with (run/decide.py does the measuring)."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fwbench.collector.stats.defaults import DEFAULT_MARGIN, DEFAULT_NOISE_FLOOR, MAX_HISTORY_MARGIN

if TYPE_CHECKING:
    from fwbench.collector.agents.specs import Instance
    from fwbench.collector.stats.margins import SpreadOf
    from fwbench.collector.verdicts.record import DecidedRun

DEFAULT_BUDGET = "10m"
# --repeat's meaning with --until-decided, unless given. High enough that the budget, not
# the rounds, ends a run of rounds of 6 s or more: the error budget is then spent by time,
# each look its round's share (stats/sequential.py). At 20, runs stopped with up to a third
# of a 10-minute budget left; by simulation, an A/A pair 5.7% apart measured in 9-s rounds is
# decided in 71% of runs at 100 against 6% at 20 (docs/report.md, "The round limit").
DEFAULT_MAX_ROUNDS = 100
# Rounds of short processes: the spread between processes, not the samples within one, sets
# the intervals, so a round's time goes further on more processes (measured: docs/report.md,
# "Samples per process or processes"). Used unless --iterations / --min-seconds are given.
DECIDED_MIN_ITERATIONS = 3
DECIDED_MIN_SECONDS = 0.5
# One warm-up iteration after the (untimed) first: past it, steps were within a few percent
# of steady state for every agent measured, and 5 of them were 45% of a round when a step
# takes seconds (docs/report.md, "Warm-up"). Used unless --warmup is given.
DECIDED_WARMUP = 1
_UNITS = {"s": 1, "m": 60, "h": 3600}

UntilDecided = Annotated[
    bool,
    typer.Option(
        "--until-decided",
        help="Add fresh-process rounds until every agent is decided against --baseline in "
        "every cell (faster, slower or equivalent within --margin), or --budget ends; decided "
        f"cells stop being measured. --repeat is then the most rounds (default "
        f"{DEFAULT_MAX_ROUNDS}: the budget, not the rounds, ends a run of slow rounds); "
        f"--iterations, --min-seconds and --warmup default to {DECIDED_MIN_ITERATIONS}, "
        f"{DECIDED_MIN_SECONDS} s and {DECIDED_WARMUP} (short processes, many of them).",
    ),
]
Budget = Annotated[
    str,
    typer.Option(
        help="With --until-decided: the most wall time to spend, e.g. 90s, 10m, 1h "
        f"(default {DEFAULT_BUDGET}).",
        show_default=False,
    ),
]
Baseline = Annotated[
    str,
    typer.Option(
        help="With --until-decided: the agent the others are compared with (first), or "
        "'family': each agent against its family's native agent (keras-torch against "
        "torch-cpu, onnxruntime-cpu against torch-cpu)."
    ),
]
Margin = Annotated[
    float | None,
    typer.Option(
        help="With --until-decided: equivalence margin, a fraction (0.05 = within 5%; the "
        "noise floor, 3%, if larger). Default: each comparison's from this host's earlier "
        "runs of its cell, how far apart one process of each side lies (SD), within "
        f"[{DEFAULT_MARGIN:.0%}, {MAX_HISTORY_MARGIN:.0%}]; {DEFAULT_MARGIN:.0%} without them.",
        show_default=False,
    ),
]


def parse_budget(text: str) -> float:
    """Seconds in "90s", "10m", "1.5h" or a bare number of seconds."""
    from fwbench.collector.run.plan import SelectionError

    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not found or float(found.group(1)) <= 0:
        raise SelectionError(f"--budget {text!r}: give a positive time such as 90s, 10m or 1h")
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


def decided_loop(
    repeat: int | None, iterations: int, warmup: int | None, min_seconds: float | None
) -> tuple[int, int, int, float]:
    """(--repeat, --iterations, --warmup, --min-seconds) with --until-decided: what was given,
    else the defaults above. --repeat is the most rounds; the error budget is shared by the
    looks those rounds allow, so at least one look (two rounds) is needed."""
    from fwbench.collector.run.plan import SelectionError

    if repeat is not None and repeat < 2:
        raise SelectionError(
            f"--repeat {repeat} with --until-decided: give 2 or more rounds (the first look "
            "needs two processes a side)"
        )
    return (
        DEFAULT_MAX_ROUNDS if repeat is None else repeat,
        iterations or DECIDED_MIN_ITERATIONS,
        DECIDED_WARMUP if warmup is None else warmup,
        DECIDED_MIN_SECONDS if min_seconds is None else min_seconds,
    )


def decide_options(
    until_decided: bool,
    budget: str,
    baseline: str,
    margin: float | None,
    instances: Sequence[Instance],
    fresh_process: bool,
) -> dict[str, Any]:
    """RunOptions fields for --until-decided (empty without it); SelectionError for bad input.
    `budget` "" when not given (DEFAULT_BUDGET then): one given without --until-decided, even
    the default's value, is refused. --baseline names an instance as the results do."""
    from fwbench.collector.run.plan import SelectionError
    from fwbench.collector.verdicts.families import FAMILY

    agents = [str(instance) for instance in instances]
    if not until_decided:
        given = [
            option for option, value in (("--budget", budget), ("--baseline", baseline)) if value
        ] + (["--margin"] if margin is not None else [])
        if given:
            raise SelectionError(
                f"{', '.join(given)} only go{'es' if len(given) == 1 else ''} with "
                "--until-decided (measure until decided): add it, or drop "
                f"{'it' if len(given) == 1 else 'them'}"
            )
        return {}
    if len(agents) < 2:
        raise SelectionError(
            "--until-decided compares agents: give two or more (or --aa NAME for an A/A pair)"
        )
    if not fresh_process:
        raise SelectionError("--until-decided needs a fresh process a round; drop --same-process")
    if baseline and baseline != FAMILY and baseline not in agents:
        raise SelectionError(
            f"--baseline {baseline!r} is not among {', '.join(agents)} (or {FAMILY!r}: each "
            "agent against its family's native agent, Keras on torch against torch)"
        )
    if margin is not None and not 0 < margin < 1:
        raise SelectionError("--margin is a fraction in (0, 1), e.g. 0.05 for 5%")
    return {
        "until_decided_seconds": parse_budget(budget or DEFAULT_BUDGET),
        "baseline": baseline or agents[0],
        "noise_floor": DEFAULT_NOISE_FLOOR,
        "margin": margin,
    }


def earlier_spreads(store_path: Path, run_id: str, metadata: dict[str, Any]) -> SpreadOf:
    """What this host's runs before `run_id` measured, for --until-decided's margins
    (stats/margins.py); a store whose history cannot be read leaves every margin at its default
    rather than stopping the run (a warning says so)."""
    from fwbench.collector.analysis.history import earlier_history
    from fwbench.collector.store import PersistenceError, ResultStore

    try:
        return earlier_history(ResultStore(store_path), run_id, metadata).of_row
    except (PersistenceError, sqlite3.Error, ValueError, KeyError, TypeError) as error:
        print(
            f"warning: this host's earlier runs could not be read ({error}); every margin is "
            f"the default, {DEFAULT_MARGIN:.0%}",
            file=sys.stderr,
        )
        return lambda row: None


def decisions_table(decisions: DecidedRun, title: str) -> Table:
    """Every comparison's verdict, with its interval and the processes it took."""
    from fwbench.collector.analysis.decisions import (
        DECISION_HEADERS,
        decision_rows,
        decisions_caption,
    )
    from fwbench.collector.stats.significance import EQUIVALENT, FASTER, SLOWER

    styles = {FASTER: "green", SLOWER: "red", EQUIVALENT: "cyan"}
    table = Table(
        title=f"{title}: measured until decided (baseline {decisions.baseline})",
        caption=decisions_caption(decisions),
    )
    for header in DECISION_HEADERS:
        table.add_column(header, justify="right" if header in ("speedup", "processes") else "left")
    for cells, verdict in decision_rows(decisions):
        table.add_row(*cells[:-1], Text(cells[-1], style=styles.get(verdict, "yellow")))
    return table
