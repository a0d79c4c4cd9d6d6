"""The order cells run in. Without repetition: agent by agent, each agent's cells in plan order
(as before `--repeat`). With `--repeat N`, agents alternate (A B A B ...) so slow drift of the
machine spreads evenly over the agents instead of landing on whichever ran last:

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


def cell_key(cell: Cell) -> tuple[int, str, str, int, str, str]:
    return (cell.threads, cell.workload, cell.phase, cell.batch_size, cell.dtype, cell.strategy)


def stretches(
    work: Sequence[Work], repeat: int = 1, fresh_process: bool = False
) -> list[Stretch[Work]]:
    """Execution order as runs of consecutive cells of one agent. With `fresh_process`, a
    stretch never spans two repetitions (the runner starts a new process between them)."""
    if repeat <= 1:
        return [(item, [(cell, 0) for cell in item.cells]) for item in work]
    keys = list(dict.fromkeys(cell_key(cell) for item in work for cell in item.cells))
    thread_order = list(dict.fromkeys(key[0] for key in keys))
    keys.sort(key=lambda key: thread_order.index(key[0]))  # stable: plan order within
    # A group of keys runs all its repetitions before the next group starts.
    groups = (
        [[key for key in keys if key[0] == threads] for threads in thread_order]
        if fresh_process
        else [[key] for key in keys]
    )
    order: list[Stretch[Work]] = []
    for group in groups:
        for repetition in range(repeat):
            for item in work:
                cells = [
                    (cell, repetition)
                    for key in group
                    for cell in item.cells
                    if cell_key(cell) == key and (repetition == 0 or not cell.unsupported_reason)
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
