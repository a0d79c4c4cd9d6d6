"""Benchmark: does scraping an agent's /metrics during a cell slow the cell down?

The same cell on the same torch-cpu agent process, with the collector's Scraper off, at the
default interval (0.25 s) and at an aggressive one (0.05 s), in rotating order (off, on,
fast, on, fast, off, ...) so that machine drift spreads evenly over the three. Each round's
figure is the median step time of one Run; the ratio on/off is taken per round and
summarised as median (min..max). Workloads: lenet train at batch 8 (about 2 ms a step, many
Python-level framework calls: where a scrape handled by the agent's HTTP thread would compete
for the GIL) and gemm 1024^3 infer (about 10 ms of BLAS).

Because step-time ratios on a shared 2-core VM spread widely, the benchmark also measures the
cost of one scrape directly, which bounds the overhead from above: the agent's CPU time (user
+ system, from psutil) over 500 back-to-back scrapes of the idle agent, and the collector's own
CPU time for them (HTTP and parsing). The agent's CPU per scrape divided by the interval is
the share of one core scraping takes from the agent's process.

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/bench_scraping.py [--rounds 9] [--seconds 3]
Prints a Markdown table; docs/telemetry.md records the figures and how they were taken.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.launchers.local import start_local
from fwbench.collector.run.telemetry import DEFAULT_INTERVAL_SECONDS, Scraper

CASES = [
    ("lenet", agent_pb2.PHASE_TRAIN, 8, {}),
    ("gemm", agent_pb2.PHASE_INFER, 1, {"m": 1024, "n": 1024, "k": 1024}),
]
SETTINGS = {"off": None, "default": DEFAULT_INTERVAL_SECONDS, "fast": 0.05}


def cell_median(
    client: AgentClient,
    metrics: str,
    case: tuple[str, int, int, dict[str, int]],
    interval: float | None,
    seconds: float,
) -> tuple[float, int]:
    """Median step seconds of one Run, and the number of scrapes taken during it."""
    workload, phase, batch, params = case
    request = agent_pb2.RunRequest(
        workload=workload,
        phase=phase,
        batch_size=batch,
        params=params,
        warmup_iterations=20,
        min_seconds=seconds,
    )
    scraper = Scraper(metrics, interval) if interval is not None else None
    with scraper or contextlib.nullcontext():
        result = list(client.run(request, 600))[-1].result
    return statistics.median(result.sample_nanoseconds) / 1e9, len(
        scraper.scrapes
    ) if scraper else 0


def scrape_cost(metrics: str, pid: int, count: int = 500) -> tuple[float, float]:
    """CPU seconds per scrape: the agent's, and the collector's (this process)."""
    agent = psutil.Process(pid)
    scraper = Scraper(metrics, interval=0)
    scraper.scrape_once()  # first-scrape set-up (NVML probe) is not the steady cost
    before, own = sum(agent.cpu_times()[:2]), time.process_time()
    for _ in range(count):
        scraper.scrape_once()
    agent_seconds = sum(agent.cpu_times()[:2]) - before
    assert scraper.errors == 0, scraper.last_error
    return agent_seconds / count, (time.process_time() - own) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per Run")
    parser.add_argument("--cost-only", action="store_true", help="only the cost of one scrape")
    args = parser.parse_args()
    manifest = discover_manifests(manifest_dirs())["torch-cpu"]
    environment_for(manifest).ensure(print)
    handle = start_local(manifest, Path(tempfile.mkdtemp()))
    names = list(SETTINGS)
    try:
        print(
            "| workload | scraping | median step | ratio to off, median (min..max) | scrapes/run |"
        )
        print("| --- | --- | --- | --- | --- |")
        for case in [] if args.cost_only else CASES:
            medians: dict[str, list[float]] = {name: [] for name in names}
            scrapes: dict[str, list[int]] = {name: [] for name in names}
            for round_index in range(args.rounds):
                shift = round_index % len(names)
                for name in names[shift:] + names[:shift]:
                    median, count = cell_median(
                        handle.client, handle.metrics_address, case, SETTINGS[name], args.seconds
                    )
                    medians[name].append(median)
                    scrapes[name].append(count)
            for name in names:
                ratios = [m / o for m, o in zip(medians[name], medians["off"], strict=True)]
                interval = SETTINGS[name]
                label = "off" if interval is None else f"every {interval:g} s"
                print(
                    f"| {case[0]} {'train' if case[1] == agent_pb2.PHASE_TRAIN else 'infer'} "
                    f"bs={case[2]} | {label} | {statistics.median(medians[name]) * 1e3:.3f} ms | "
                    f"{statistics.median(ratios):.4f} ({min(ratios):.3f}..{max(ratios):.3f}) | "
                    f"{statistics.median(scrapes[name]):.0f} |"
                )
        agent_cpu, collector_cpu = scrape_cost(handle.metrics_address, handle.client.describe().pid)
        print(
            f"\none scrape of an idle agent: {agent_cpu * 1e3:.2f} ms agent CPU, "
            f"{collector_cpu * 1e3:.2f} ms collector CPU; at the default interval "
            f"({DEFAULT_INTERVAL_SECONDS:g} s) that is "
            f"{agent_cpu / DEFAULT_INTERVAL_SECONDS * 100:.2f}% of one core in the agent"
        )
    finally:
        handle.stop()


if __name__ == "__main__":
    main()
