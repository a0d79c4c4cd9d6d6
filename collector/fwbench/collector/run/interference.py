"""Interference: when other processes (or other guests of a VM) took enough of the agent's CPUs
while a cell was timed that its row cannot stand for the agent, and waiting for a quiet host
before a cell (`--quiet-host`). The figures come from the agent's /metrics (telemetry.py's
cpu_load); docs/telemetry.md, "Interference", says how they are measured.

A row above the threshold is kept, stored and shown, marked `interfered` with the reason in
words: the progress line and the summary say so, comparisons leave it out (contenders.py) and
`--until-decided` measures its cell again instead of deciding on it (decide.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from fwbench.collector.run.cpu_load import cpu_load, load_columns
from fwbench.collector.run.defaults import DEFAULT_THRESHOLD_PERCENT as DEFAULT_THRESHOLD_PERCENT
from fwbench.collector.run.telemetry import Scraper

# --quiet-host: each look at the host takes this long (a shorter one reads ticks, not use).
QUIET_LOOK_SECONDS = 1.0
MAX_QUIET_SECONDS = 3600.0


class InterferenceSettingsError(ValueError):
    """A threshold or wait out of range."""


def check_settings(threshold: float, quiet_seconds: float) -> None:
    """Refuses, before anything starts, what no run could use."""
    if not 0 < threshold <= 100 or math.isnan(threshold):
        raise InterferenceSettingsError(
            f"--interference-threshold {threshold:g}: give a percent of the agent's CPUs in "
            f"(0, 100], e.g. {DEFAULT_THRESHOLD_PERCENT:g}"
        )
    if not 0 <= quiet_seconds <= MAX_QUIET_SECONDS or math.isnan(quiet_seconds):
        raise InterferenceSettingsError(
            f"--quiet-host {quiet_seconds:g}: give the most seconds to wait before each cell, "
            f"0 (do not wait) to {MAX_QUIET_SECONDS:g}"
        )


def _number(value: object) -> float | None:
    """A figure of a row, None where it is missing (None, pandas' NA, NaN)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def interference_text(columns: Mapping[str, Any], threshold: float) -> str:
    """Why a row's figures are interfered, in words; "" when they are not (or are unknown)."""
    others = _number(columns.get("others_cpu_percent"))
    steal = _number(columns.get("steal_percent"))
    cpus = _number(columns.get("agent_cpus"))
    of = f"the agent's {cpus:.0f} CPUs" if cpus is not None else "the agent's CPUs"
    reasons = []
    if others is not None and others > threshold:
        reasons.append(f"other processes used {others:.0f}% of {of}")
    if steal is not None and steal > threshold:
        reasons.append(f"the hypervisor gave {steal:.0f}% of {of}' time to other guests (steal)")
    return "; ".join(reasons)


def judge(columns: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    """The row's `interfered` and `interference`: unknown (None) without the figures."""
    if _number(columns.get("others_cpu_percent")) is None:
        return {"interfered": None, "interference": None}
    text = interference_text(columns, threshold)
    return {"interfered": bool(text), "interference": text or None}


def others_now(address: str, seconds: float = QUIET_LOOK_SECONDS) -> dict[str, Any]:
    """The interference columns of an agent's CPUs over the next `seconds`, while the agent
    is idle (two scrapes of its /metrics): what others are doing on them now."""
    scraper = Scraper(address, interval=0)
    scraper.scrape_once()
    started = time.time()
    time.sleep(seconds)
    scraper.scrape_once()
    load = cpu_load(scraper.scrapes, started, time.time()) if len(scraper.scrapes) == 2 else None
    return load_columns([load] if load else [])


def wait_for_quiet(
    address: str,
    most_seconds: float,
    threshold: float,
    say: Callable[[str], None],
    look: Callable[[str], dict[str, Any]] = others_now,
) -> str:
    """Waits, at most `most_seconds`, until the agent's CPUs are quiet (another process's use
    and steal at or below the threshold), telling `say` what it waits for. Returns "" once
    quiet (or when the figures cannot be read: nothing to wait for), else what was still
    going on when the wait ended."""
    deadline = time.monotonic() + most_seconds
    while True:
        busy = interference_text(look(address), threshold)
        if not busy:
            return ""
        left = max(deadline - time.monotonic(), 0.0)
        say(f"waiting for a quiet host ({busy}; {left:.0f} s left)")
        if left <= 0:
            return busy


def quiet_before_cell(
    address: str,
    most_seconds: float,
    threshold: float,
    note: Callable[[str], None],
    stage: Callable[[str], None],
) -> None:
    """--quiet-host before a cell: wait_for_quiet, with a line (`note`) when the wait starts
    and one saying how it ended; `stage` shows each look meanwhile."""
    started, said = time.monotonic(), list[str]()

    def say(text: str) -> None:
        if not said:
            note(f"{text[0].upper()}{text[1:]}")
        said.append(text)
        stage(text)

    busy = wait_for_quiet(address, most_seconds, threshold, say)
    if said:
        waited = time.monotonic() - started
        note(
            f"the host is still busy after {waited:.0f} s ({busy}): measuring anyway"
            if busy
            else f"the host is quiet after {waited:.0f} s"
        )
