"""One agent's sweeps over batch sizes and thread counts: a cell far off its own trend
(off-own-trend) and scaling that goes backwards (batch-backwards, threads-backwards)."""

from __future__ import annotations

import json
from itertools import combinations
from typing import Any

from fwbench.collector.analysis.findings.cells import (
    Cell,
    Named,
    apart,
    mode_text,
    name_of,
    sweep_label,
    without,
)
from fwbench.collector.analysis.findings.model import (
    BATCH_BACKWARDS,
    OFF_TREND,
    OFF_TREND_FACTOR,
    THREADS_BACKWARDS,
    Finding,
)
from fwbench.collector.store.cell_key import CellKey


def _batch_sweeps(measured: list[Cell]) -> list[list[Cell]]:
    sweeps: dict[tuple[str, str, CellKey], list[Cell]] = {}
    for cell in measured:
        sweeps.setdefault((cell.agent, cell.mode, without(cell.key, "batch_size")), []).append(cell)
    return [
        sorted(s, key=lambda c: c.batch)
        for _, s in sorted(sweeps.items(), key=_order)
        if len(s) > 1
    ]


def _order(item: tuple[tuple[str, str, CellKey], Any]) -> str:
    agent, mode, key = item[0]
    return f"{agent}\0{mode}\0{json.dumps(key, default=str)}"


def trend_findings(measured: list[Cell], shown: set[str]) -> tuple[list[Finding], Named]:
    """off-own-trend findings, and the cells they name as off their agent's trend."""
    found: list[Finding] = []
    named: Named = set()
    for sweep in _batch_sweeps(measured):
        off: dict[int, tuple[int, int]] = {}  # index of the cell off -> the pair that showed it
        for i in range(len(sweep) - 1):
            small, large = sweep[i], sweep[i + 1]
            # Only where the larger batch's sample does more work: an accuracy workload's
            # sample is an epoch, as many items at any batch size, and smaller batches
            # rightly take longer over it.
            if large.items > small.items and small.low > OFF_TREND_FACTOR * large.high:
                # The larger batch is the odd one when it is also far faster per item than the
                # batch after it (by the same factor); otherwise the smaller one is (a slow
                # kernel path, usually).
                fast = (
                    i + 2 < len(sweep)
                    and sweep[i + 2].per_item()[1] > OFF_TREND_FACTOR * large.per_item()[2]
                )
                off[i + 1 if fast else i] = (i, i + 1)
        for index, (i, j) in sorted(off.items()):
            found.append(_off_trend(sweep, index, (i, j), set(off), shown))
            named.add(name_of(sweep[index]))
    return found, named


def backwards_findings(measured: list[Cell], shown: set[str], odd: Named) -> list[Finding]:
    """batch-backwards findings, one per sweep (its worst pair), the cells `odd` left out:
    an odd cell has its finding already, and would otherwise give a second one."""
    found: list[Finding] = []
    for sweep in _batch_sweeps(measured):
        kept = [c for c in sweep if name_of(c) not in odd]
        pairs = [
            (large.per_item()[0] / small.per_item()[0], small, large)
            for small, large in combinations(kept, 2)
            if apart(large.per_item(), small.per_item())
        ]
        if not pairs:
            continue
        ratio, small, large = max(pairs, key=lambda p: (p[0], -p[1].batch, -p[2].batch))
        label = sweep_label(small.key, shown, "bs")
        found.append(
            Finding(
                BATCH_BACKWARDS,
                f"{small.agent} {label}{mode_text(small)}: time per item rises with batch size, "
                f"{ratio:.2f}x at bs={large.batch} against bs={small.batch} (beyond both 95% "
                f"intervals): larger batches cost more per item here; use bs={small.batch} "
                "or look for why (memory, caches, another kernel)",
                tuple(c.evidence(f"bs={c.batch}", shown) for c in sweep),
                ratio,
            )
        )
    return found


def _off_trend(
    sweep: list[Cell], index: int, pair: tuple[int, int], off: set[int], shown: set[str]
) -> Finding:
    odd, (i, j) = sweep[index], pair
    small, large = sweep[i], sweep[j]
    step = small.median / large.median
    per_item = small.per_item()[0] / large.per_item()[0]
    label = sweep_label(odd.key, shown, "bs")
    work = large.items / small.items
    if index == i:
        what = (
            f"bs={small.batch} is far off its own batch trend: a step takes {step:.1f}x as long "
            f"as at bs={large.batch}, which does {work:g}x the items ({per_item:.1f}x the time "
            f"per item); look at bs={small.batch} (another code path, a slow kernel)"
        )
    else:
        what = (
            f"bs={large.batch} is far off its own batch trend: its step takes 1/{step:.1f} of "
            f"bs={small.batch}'s with {work:g}x the items; check that it does the work"
        )
    others = len(sweep) - len(off)
    normal = "; its other batch sizes scale normally" if others > 1 and len(off) == 1 else ""
    return Finding(
        OFF_TREND,
        f"{odd.agent} {label}{mode_text(odd)}: {what}{normal}",
        tuple(c.evidence(f"bs={c.batch}", shown) for c in sweep),
        step,
    )


def thread_findings(measured: list[Cell], shown: set[str], odd: Named) -> list[Finding]:
    """threads-backwards findings, one per sweep (its worst pair), the cells `odd` left out."""
    sweeps: dict[tuple[str, str, CellKey], list[Cell]] = {}
    for cell in measured:
        # 0 asks for the agent's default: no count to scale.
        if cell.threads > 0 and name_of(cell) not in odd:
            sweeps.setdefault((cell.agent, cell.mode, without(cell.key, "threads")), []).append(
                cell
            )
    found: list[Finding] = []
    for _, unsorted in sorted(sweeps.items(), key=_order):
        sweep = sorted(unsorted, key=lambda c: c.threads)
        steps = [(c.median, c.low, c.high) for c in sweep]
        pairs = [
            (steps[j][0] / steps[i][0], sweep[i], sweep[j])
            for i, j in combinations(range(len(sweep)), 2)
            if apart(steps[j], steps[i])
        ]
        if not pairs:
            continue
        ratio, few, many = max(pairs, key=lambda p: (p[0], -p[1].threads, -p[2].threads))
        cores = many.cores
        over = (
            f"; t={many.threads} is more than its {cores} usable cores"
            if cores and many.threads > cores
            else ""
        )
        label = sweep_label(few.key, shown, "t")
        found.append(
            Finding(
                THREADS_BACKWARDS,
                f"{few.agent} {label}{mode_text(few)}: more threads are slower, a step takes "
                f"{ratio:.2f}x as long at t={many.threads} as at t={few.threads} (beyond both "
                f"95% intervals){over}; use t={few.threads} or look for contention",
                tuple(c.evidence(f"t={c.threads}", shown) for c in sweep),
                ratio,
            )
        )
    return found
