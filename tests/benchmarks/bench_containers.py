"""Benchmark: what does running an agent in a container cost?

The same agent (same framework build, same workload requests) two ways at once: a local
process in its virtual environment and a container from its image (Docker launcher, ports
published on loopback). Only one measures at a time; requests alternate A B / B A per round so
drift spreads evenly. Per round the ratio container / local of the median step time; across
rounds the median ratio, its range, and each side's own round-to-round spread (the noise the
ratio has to be read against). Also the time each launcher takes to bring an agent to healthy.

Run from the repository root with the dev environment and a Docker daemon:
    .venv/bin/python tests/benchmarks/bench_containers.py [--rounds 7] [--agents torch-cpu,tf-eigen]
With --aa the container is replaced by a second local process: the same table for two
identical agents, which is what a ratio of 1 looks like on this machine.
Prints Markdown; docs/containers.md records the figures and how they were taken.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.docker_engine import docker_client
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests, manifest_dirs
from fwbench.collector.agents.specs import Instance
from fwbench.collector.images.build import ensure_image
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.launchers.docker import remove_run_containers, start_docker
from fwbench.collector.launchers.local import start_local

# (label, workload, phase, batch, params, timed iterations)
CASES = [
    ("gemm 2048 infer bs1", "gemm", agent_pb2.PHASE_INFER, 1, {}, 30),
    ("resnet18 128px train bs8", "resnet18", agent_pb2.PHASE_TRAIN, 8, {"image_size": 128}, 10),
]
RUN_ID = f"bench-containers-{os.getpid()}"


def median_seconds(client: AgentClient, case: tuple, warmup: int) -> float:
    _, workload, phase, batch, params, iterations = case
    request = agent_pb2.RunRequest(
        workload=workload,
        phase=phase,
        batch_size=batch,
        params=params,
        warmup_iterations=warmup,
        min_iterations=iterations,
        max_iterations=iterations,
        min_seconds=0.0,
    )
    result = list(client.run(request, 900))[-1].result
    return statistics.median(result.sample_nanoseconds) / 1e9


def start_time(start: Callable[[], AgentHandle]) -> tuple[AgentHandle, float]:
    began = time.perf_counter()
    handle = start()
    return handle, time.perf_counter() - began


def bench_agent(
    manifest: AgentManifest, rounds: int, warmup: int, logs: Path, aa: bool
) -> list[str]:
    starters = {
        "local": lambda: start_local(manifest, logs),
        "docker": lambda: start_docker(
            manifest, ensure_image(docker_client(), manifest), RUN_ID, logs
        ),
    }
    if aa:  # A/A: the "docker" side is a second local process, to calibrate the ratio
        starters["docker"] = lambda: start_local(
            manifest, logs, instance=Instance(manifest.name, copy=2)
        )
    # Start-up: alternate, three each, after one of each to warm caches.
    startup: dict[str, list[float]] = {"local": [], "docker": []}
    for index in range(4):
        for launcher in ("local", "docker") if index % 2 else ("docker", "local"):
            handle, seconds = start_time(starters[launcher])
            handle.stop()
            if index:
                startup[launcher].append(seconds)
    handles = {launcher: start() for launcher, start in starters.items()}
    lines = []
    try:
        for case in CASES:
            medians: dict[str, list[float]] = {"local": [], "docker": []}
            for index in range(rounds):
                order = ("local", "docker") if index % 2 == 0 else ("docker", "local")
                for launcher in order:
                    medians[launcher].append(median_seconds(handles[launcher].client, case, warmup))
            lines.append(row(manifest.name, case[0], medians))
    finally:
        for handle in handles.values():
            handle.stop()
    for launcher, values in startup.items():
        lines.append(
            f"| {manifest.name} | start to healthy ({launcher}) | "
            f"{statistics.median(values):.2f} s | {min(values):.2f}-{max(values):.2f} s | |"
        )
    return lines


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) * 100


def row(agent: str, label: str, medians: dict[str, list[float]]) -> str:
    local, docker = medians["local"], medians["docker"]
    ratios = [d / lo for d, lo in zip(docker, local, strict=True)]
    return (
        f"| {agent} | {label} | local {statistics.median(local) * 1e3:.1f} ms "
        f"(CV {_cv(local):.1f}%), docker {statistics.median(docker) * 1e3:.1f} ms "
        f"(CV {_cv(docker):.1f}%) | ratio {statistics.median(ratios):.3f} | "
        f"{min(ratios):.3f}-{max(ratios):.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--agents", default="torch-cpu,tf-eigen")
    parser.add_argument(
        "--aa", action="store_true", help="compare two local processes instead (noise floor)"
    )
    args = parser.parse_args()
    manifests = discover_manifests(manifest_dirs())
    print(f"load average at start: {os.getloadavg()}")
    print("| agent | case | medians over rounds (round-to-round CV) | container/local | range |")
    print("| --- | --- | --- | --- | --- |")
    try:
        with tempfile.TemporaryDirectory(prefix="fwbench-bench-") as logs:
            for name in args.agents.split(","):
                for line in bench_agent(
                    manifests[name], args.rounds, args.warmup, Path(logs), args.aa
                ):
                    print(line, flush=True)
    finally:
        remove_run_containers(RUN_ID)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
