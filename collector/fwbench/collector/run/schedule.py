"""The order cells run in. Without repetition: agent by agent, each agent's cells in plan order
(as before `--repeat`). With `--repeat N`, agents alternate so slow drift of the machine spreads
evenly over the agents instead of landing on whichever ran last, and the agents' order changes
from one repetition (or `--until-decided` round) to the next along the rows of a Williams
design (`agent_order`): over a whole cycle every agent runs in every position, and right after
every other agent, equally often (A B, B A, A B ... for two agents), so neither a position in
the round nor the agent that ran just before can favour one agent every time:

- fresh processes (the default): each repetition is a new process of every agent running all
  its cells, so repetition-major: repetition 0 of A's cells, of B's, then repetition 1 ... Two
  processes of one agent can differ for their whole life (allocator state, thread placement:
  docs/report.md), so that difference must land between repetitions, where the cluster
  bootstrap counts it as noise, and not between agents, where it would look like a result.
- one process per agent (`--same-process`): key-major, for each cell key (threads, workload,
  phase, batch size, dtype) every agent in turn, N times over, so each cell's repetitions are
  close in time.

The thread count is always the outermost loop, so an agent that sizes its thread pools at
start-up is restarted once per count (and repetition). An agent's modes of one key run
together, in plan order. Cells an agent cannot run are recorded once, not once per
repetition."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from fwbench.collector.run.plan import Cell


class HasCells(Protocol):
    cells: list[Cell]


Work = TypeVar("Work", bound=HasCells)
# One agent's consecutive cells: (the agent's work, [(cell, repetition), ...]).
Stretch = tuple[Work, list[tuple[Cell, int]]]


def agent_order(count: int, block: int) -> list[int]:
    """The order of `count` agents in repetition (or round) `block`: row `block` of a Williams
    design, a Latin square balanced for first-order carry-over (Williams 1949). Its first row
    is 0, 1, n-1, 2, n-2, ...; row i adds i to each entry (mod n); for odd n the reversed rows
    follow. Over n rows (2n for odd n) each agent holds each position equally often and
    follows each other agent equally often. Relabelled so that row 0 is 0, 1, ..., n-1: a run
    without repetition keeps the order the agents were given in."""
    if count <= 1:
        return list(range(count))
    first = [0]
    for step in range(1, count):
        first.append((step + 1) // 2 if step % 2 else count - step // 2)
    label = {agent: position for position, agent in enumerate(first)}
    rows = [[label[(agent + shift) % count] for agent in first] for shift in range(count)]
    if count % 2:
        rows += [row[::-1] for row in rows]
    return rows[block % len(rows)]


def in_order(work: Sequence[Work], block: int) -> list[Work]:
    return [work[i] for i in agent_order(len(work), block)]


def stretches(
    work: Sequence[Work], repeat: int = 1, fresh_process: bool = False, first_block: int = 0
) -> list[Stretch[Work]]:
    """Execution order as runs of consecutive cells of one agent. With `fresh_process`, a
    stretch never spans two repetitions (the runner starts a new process between them).
    `first_block`: the round of `--until-decided` (each round one repetition), which picks
    the agents' order as a repetition number would."""
    if repeat <= 1:
        return [(item, [(cell, 0) for cell in item.cells]) for item in in_order(work, first_block)]
    keys = list(dict.fromkeys(cell.key for item in work for cell in item.cells))
    thread_order = list(dict.fromkeys(key.threads for key in keys))
    keys.sort(key=lambda key: thread_order.index(key.threads))  # stable: plan order within
    # A group of keys runs all its repetitions before the next group starts.
    groups = (
        [[key for key in keys if key.threads == threads] for threads in thread_order]
        if fresh_process
        else [[key] for key in keys]
    )
    order: list[Stretch[Work]] = []
    for group in groups:
        for repetition in range(repeat):
            for item in in_order(work, first_block + repetition):
                cells = [
                    (cell, repetition)
                    for key in group
                    for cell in item.cells
                    if cell.key == key and (repetition == 0 or not cell.unsupported_reason)
                ]
                if cells:
                    order.append((item, cells))
    return order


def cells_per_agent(work: Sequence[Work], repeat: int, fresh_process: bool = False) -> list[int]:
    """How many rows each item of `work` will record, in `work`'s order."""
    counts = [0] * len(work)
    for item, cells in stretches(work, repeat, fresh_process):
        counts[next(i for i, other in enumerate(work) if other is item)] += len(cells)
    return counts
