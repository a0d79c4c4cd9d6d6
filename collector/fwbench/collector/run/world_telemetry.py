"""Telemetry of a world: every rank's /metrics scraped during a cell, as one agent's is
(telemetry.py), but at its stages' edges only, never on a timer (a scrape is served on the
rank's own CPUs: WorldScraper), and the row's columns combined over ranks: CPU time and memory
summed (the world's use of the machine: two ranks at one core each show 200%), GPU power and
energy summed, peaks the highest rank's, host-wide figures from rank 0's host; what other
processes used of the ranks' CPUs from every rank's (telemetry.load_columns). The raw series
keep every rank's, each label prefixed with the rank (`rank1` or `rank1:user`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from fwbench.collector.run.cpu_load import cpu_load, load_columns
from fwbench.collector.run.telemetry import Scraper, summarize

SUMMED = (
    "cpu_user_percent",
    "cpu_system_percent",
    "rss_mean_bytes",
    "rss_peak_bytes",
    "gpu_power_mean_watts",
    "gpu_energy_joules",
)
HIGHEST = ("gpu_utilization_peak_percent", "gpu_memory_peak_bytes")


class WorldScraper:
    """Scrapers of every rank, used as one: `with WorldScraper(addresses) as s`. A rank is
    never scraped on a timer: once as the cell begins, once as each stage before the timed
    loop begins, once as the timed loop begins, once after the result. A scrape
    is served by the rank's own process on the rank's own CPUs, and a synchronous step waits
    for the slowest rank; a timer stopped when the collector hears that the timed loop began
    would still fire inside it whenever the collector hears late (a loaded host: 9 scrapes
    of 50 ms inside 16 steps of 30 ms, seen)."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self.scrapers = [Scraper(address, interval=0) for address in addresses]
        self._stage = ""

    def __enter__(self) -> WorldScraper:
        for scraper in self.scrapers:
            scraper.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for scraper in self.scrapers:
            scraper.__exit__(*exc)

    def on_stage(self, stage: str) -> None:
        """Hears the cell's progress: every rank is scraped once as each stage begins, the
        timed loop's included, and not again until the cell ends."""
        if stage == self._stage or self._stage == "measure":
            return  # a progress count or a heartbeat, or the timed loop under way
        self._stage = stage
        for scraper in self.scrapers:
            scraper.scrape_once()

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.scrapers)

    @property
    def last_error(self) -> str:
        return next((s.last_error for s in reversed(self.scrapers) if s.last_error), "")

    def summary(self, start: float, end: float, device: str = "") -> dict[str, Any]:
        ranks = [summarize(s.scrapes, start, end, device) for s in self.scrapers]
        columns = dict(ranks[0])
        for name in SUMMED:
            values = [rank[name] for rank in ranks]
            columns[name] = math.nan if any(_missing(v) for v in values) else sum(values)
        for name in HIGHEST:
            values = [rank[name] for rank in ranks if not _missing(rank[name])]
            columns[name] = max(values) if values else math.nan
        loads = [cpu_load(s.scrapes, start, end) for s in self.scrapers]
        if all(load is not None for load in loads):  # else rank 0's, as for host-wide figures
            columns.update(load_columns([load for load in loads if load is not None]))
        columns["telemetry_scrapes"] = min(rank["telemetry_scrapes"] for rank in ranks)
        errors = [
            f"rank {i}: {r['telemetry_error']}" for i, r in enumerate(ranks) if r["telemetry_error"]
        ]
        columns["telemetry_error"] = "; ".join(errors) or None
        return columns

    def series(self) -> pd.DataFrame:
        frames = []
        for rank, scraper in enumerate(self.scrapers):
            frame = scraper.series()
            prefix = f"rank{rank}"
            frame["label"] = [f"{prefix}:{label}" if label else prefix for label in frame["label"]]
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
