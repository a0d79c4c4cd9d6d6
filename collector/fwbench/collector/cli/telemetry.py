"""`collector run`'s telemetry options: scraping (run/telemetry.py) and interference
(run/interference.py; docs/telemetry.md, "Interference"), with their check before anything
starts."""

from __future__ import annotations

from typing import Annotated

import typer

from fwbench.collector.cli.common import fail
from fwbench.collector.run.defaults import DEFAULT_INTERVAL_SECONDS, DEFAULT_THRESHOLD_PERCENT

__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "DEFAULT_THRESHOLD_PERCENT",
    "InterferenceThreshold",
    "QuietHost",
    "ScrapeInterval",
    "check_interference",
]

ScrapeInterval = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="Seconds between scrapes of each agent's /metrics during a cell, 0 = no telemetry.",
    ),
]
InterferenceThreshold = Annotated[
    float,
    typer.Option(
        help="Percent of the agent's CPUs that other processes (or, on a VM, steal) may take "
        "while a cell is timed before its row is `interfered`: kept and marked, left out of "
        "every verdict, measured again by --until-decided (docs/telemetry.md).",
    ),
]
QuietHost = Annotated[
    float,
    typer.Option(
        metavar="SECONDS",
        help="Before each cell, wait up to SECONDS until other processes use at most "
        "--interference-threshold of the agent's CPUs (0 = do not wait).",
    ),
]


def check_interference(threshold: float, quiet_seconds: float) -> None:
    """Exits 2 with one line for a threshold or wait out of range."""
    from fwbench.collector.run.interference import InterferenceSettingsError, check_settings

    try:
        check_settings(threshold, quiet_seconds)
    except InterferenceSettingsError as error:
        fail(str(error))
