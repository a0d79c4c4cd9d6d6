"""What an agent process's telemetry says about why its measurements differ from another's
process of the same agent: a lead for a comparison left undecided (run/decide.py)."""

from __future__ import annotations

import math
from typing import Any

# How far apart two processes of one agent's cell may be in the share of their CPU spent in the
# kernel before a comparison left open names it: the torch-cpu conv2d processes of
# docs/report.md spent under 1% (fast) or 16-23% (slow). A share that is high in every
# process (JAX waiting on a GPU: 20-75%; OpenMP threads yielding) is no lead.
KERNEL_SPREAD = 0.10
# A process using less CPU than this (percent of one core) is waiting, not computing: its
# kernel share is noise.
BUSY_PERCENT = 50.0


def kernel_share(row: dict[str, Any]) -> float | None:
    """The share of an agent process's CPU time spent in the kernel over a cell (telemetry);
    None where it was not scraped, the process was mostly waiting, or the cell ran on an
    accelerator (its host process then waits in the driver: no lead)."""
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
    faulting pages in for some processes and not others: docs/report.md)."""
    leads = [
        f"{agent}'s processes spent {min(seen):.0%} to {max(seen):.0%} of their CPU in the kernel"
        for agent, seen in shares.items()
        if len(seen) > 1 and max(seen) - min(seen) >= KERNEL_SPREAD
    ]
    if not leads:
        return ""
    return (
        f"; {'; '.join(leads)} (pages faulted in by some processes and not others? "
        "docs/report.md, 'glibc's mmap threshold')"
    )
