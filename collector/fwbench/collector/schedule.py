"""The order cells run in. Without repetition: agent by agent, each agent's cells in plan order
(as before `--repeat`). With `--repeat N`: for each cell key (threads, workload, phase, batch
size, dtype), every agent in turn, N times over (A B A B ...), so slow drift of the machine
spreads evenly over the agents instead of landing on whichever ran last. The thread count is
the outermost loop, so an agent that sizes its thread pools at start-up is restarted once per
count, as without repetition. An agent's modes of one key run together, in plan order. Cells
an agent cannot run are recorded once, not once per repetition."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from fwbench.collector.plan import Cell


class HasCells(Protocol):
    cells: list[Cell]


Work = TypeVar("Work", bound=HasCells)
# One agent's consecutive cells: (the agent's work, [(cell, repetition), ...]).
Stretch = tuple[Work, list[tuple[Cell, int]]]


def cell_key(cell: Cell) -> tuple[int, str, str, int, str]:
    return (cell.threads, cell.workload, cell.phase, cell.batch_size, cell.dtype)


def stretches(work: Sequence[Work], repeat: int = 1) -> list[Stretch[Work]]:
    """Execution order as runs of consecutive cells of one agent."""
    if repeat <= 1:
        return [(item, [(cell, 0) for cell in item.cells]) for item in work]
    keys = list(dict.fromkeys(cell_key(cell) for item in work for cell in item.cells))
    thread_order = list(dict.fromkeys(key[0] for key in keys))
    keys.sort(key=lambda key: thread_order.index(key[0]))  # stable: plan order within
    order: list[Stretch[Work]] = []
    for key in keys:
        for repetition in range(repeat):
            for item in work:
                cells = [
                    (cell, repetition)
                    for cell in item.cells
                    if cell_key(cell) == key and (repetition == 0 or not cell.unsupported_reason)
                ]
                if cells:
                    order.append((item, cells))
    return order


def cells_per_agent(work: Sequence[Work], repeat: int) -> list[int]:
    """How many rows each item of `work` will record, in `work`'s order."""
    counts = [0] * len(work)
    for item, cells in stretches(work, repeat):
        counts[next(i for i, other in enumerate(work) if other is item)] += len(cells)
    return counts
