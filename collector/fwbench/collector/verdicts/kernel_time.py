"""How much of an agent process's CPU went to the kernel over a cell (telemetry), and what that
says about a comparison.

On a CPU, a framework step that faults in fresh pages every time (glibc's malloc unmapping and
mapping again the blocks of a few MiB a step frees and allocates, depending on the process's
history and its malloc arenas) spends a large share of its CPU in the kernel and runs up to
1.9x slower than the same step reusing its memory (docs/report.md, "glibc's mmap threshold").
The share is a lead, not a verdict: a comparison keeps its call and says which side spent it,
or whose processes differed in it (an until-decided comparison left open, run/decide.py; any
comparison of `compare`, analysis/compare.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

# How far apart two processes (or the two sides of a comparison) may be in the share of their
# CPU spent in the kernel before it is named: the torch-cpu conv2d processes of docs/report.md
# spent under 1% (fast) or 16-23% (slow).
KERNEL_SPREAD = 0.10
# A side spending this share or more in the kernel, and KERNEL_SPREAD more than the other side,
# is named even when its processes agree: torch-cpu's conv2d inference here, 31% against
# TensorFlow's 1-4% (2026-11-27, AMD EPYC, 2 vCPUs); a framework computing spends a few %.
KERNEL_HEAVY = 0.20
# A process using less CPU than this (percent of one core) is waiting, not computing: its
# kernel share is noise.
BUSY_PERCENT = 50.0
GLIBC = "docs/report.md, 'glibc's mmap threshold'"


def kernel_share(row: dict[str, Any]) -> float | None:
    """The share of an agent process's CPU time spent in the kernel over a cell (telemetry);
    None where it was not scraped, the process was mostly waiting, or the cell ran on an
    accelerator (its host process then waits in the driver: 20-75% for JAX, no lead)."""
    if "cpu" not in str(row.get("device") or "cpu").lower():
        return None
    user, system = row.get("cpu_user_percent"), row.get("cpu_system_percent")
    if not isinstance(user, float | int) or not isinstance(system, float | int):
        return None
    total = user + system
    return system / total if total >= BUSY_PERCENT and math.isfinite(total) else None


def kernel_lead(shares: dict[str, list[float]]) -> str:
    """For a comparison left open (agent -> its processes' kernel shares): an agent whose
    processes differed much in kernel time is a lead (on the CPU, most often the allocator
    faulting pages in for some processes and not others). A share high in every process is
    how that agent runs, no lead for an open comparison."""
    leads = [
        f"{agent}'s processes spent {min(seen):.0%} to {max(seen):.0%} of their CPU in the kernel"
        for agent, seen in shares.items()
        if len(seen) > 1 and max(seen) - min(seen) >= KERNEL_SPREAD
    ]
    if not leads:
        return ""
    return f"; {'; '.join(leads)} (pages faulted in by some processes and not others? {GLIBC})"


def by_cell(results: Any) -> dict[int, float]:
    """Each row's kernel share by its cell index, where it has one (a results DataFrame)."""
    needed = ("cell", "cpu_user_percent", "cpu_system_percent")
    if any(column not in getattr(results, "columns", ()) for column in needed):
        return {}
    shares = {}
    read = [c for c in (*needed, "device") if c in results]  # a whole row costs far more
    for row in results[read].to_dict("records"):
        share = kernel_share(row)
        if share is not None:
            shares[int(row["cell"])] = share
    return shares


def _said(shares: Sequence[float]) -> str:
    low, high = min(shares), max(shares)
    return f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%} to {high:.0%}"


def compared(label: str, mine: Sequence[float], other: str, theirs: Sequence[float]) -> str:
    """A note for a comparison of `label`'s processes against `other`'s (each side's kernel
    shares, one a process): "" unless one side's processes differed by KERNEL_SPREAD or more,
    or one side spent KERNEL_HEAVY or more (its median) and KERNEL_SPREAD more than the other."""
    sides = [(name, list(seen)) for name, seen in ((label, mine), (other, theirs)) if seen]
    if not sides:
        return ""
    spread = [name for name, seen in sides if max(seen) - min(seen) >= KERNEL_SPREAD]
    middle = {name: statistics.median(seen) for name, seen in sides}
    heavy = len(sides) == 2 and any(
        middle[a] >= KERNEL_HEAVY and middle[a] - middle[b] >= KERNEL_SPREAD
        for a, b in ((label, other), (other, label))
    )
    if not spread and not heavy:
        return ""
    said = ", ".join(f"{name} {_said(seen)}" for name, seen in sides)
    why = "some processes and not others" if spread and not heavy else "every step"
    return f"CPU in the kernel: {said} (pages faulted in {why}? {GLIBC})"


def between(
    label: str,
    mine: dict[int, float],
    cells: Sequence[int],
    other: str,
    theirs: dict[int, float],
    their_cells: Sequence[int],
) -> str:
    """compared() for two sides given as their rows' cell indices (by_cell's shares)."""
    return compared(
        label,
        [mine[c] for c in cells if c in mine],
        other,
        [theirs[c] for c in their_cells if c in theirs],
    )
