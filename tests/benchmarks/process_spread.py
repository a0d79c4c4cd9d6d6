"""Benchmark: does the harness add process-to-process spread?

With the process as the unit (docs/report.md), what decides how fast a comparison settles is
how far apart fresh processes of one agent measure the same cell. This times one cell in N
fresh processes two ways, interleaved (bare, agent, bare, agent, ...) so drift spreads evenly:
  bare:  the agent environment's python runs the plugin's own step in a plain loop (the
         runtime's measure(), in the main thread): no gRPC server, no metrics, no collector;
  agent: a fresh agent process (the local launcher), driven over gRPC as `collector run` does.
Both: 1 warm-up iteration, then at least --iterations steps and --min-seconds (the
--until-decided defaults). Prints each process's median and, per side, the SD of the
per-process log medians (the spread the sequential rules see), with the within-process part
a median of n samples carries (1.2533 x SD / sqrt(n)) taken out, and for the bare side each
process's minor page faults and kernel CPU a timed step (getrusage over build, warm-up and
steps) with the faults' correlation to the log medians.

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/process_spread.py --agent tf-eigen --workload conv2d \
        --phase train --batch 8 --processes 10
`--env NAME=VALUE` (repeatable) sets a variable in both sides' processes (e.g.
MALLOC_ARENA_MAX=1), to see what it does to the spread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.launchers.local import start_local

BARE = """
import json, resource, sys, threading
from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import context_from_environment
from fwbench.runtime.registry import load_plugin
from fwbench.runtime.requests import workload_spec
from fwbench.runtime.service import capabilities
from fwbench.runtime.timing import LoopPlan, measure
from fwbench.spec import load_catalogue

plugin_name, workload, phase, batch, iterations, seconds = sys.argv[1:7]
plugin = load_plugin(plugin_name, context_from_environment())
catalogue = load_catalogue()
request = agent_pb2.RunRequest(
    workload=workload, phase=agent_pb2.PHASE_TRAIN if phase == "train" else agent_pb2.PHASE_INFER,
    batch_size=int(batch), dtype=agent_pb2.DTYPE_FLOAT32,
)
spec = workload_spec(request, catalogue, capabilities(plugin, plugin.describe(), catalogue))
plan = LoopPlan(1, int(iterations), float(seconds), 100000, progress_interval_seconds=1.0)
before = resource.getrusage(resource.RUSAGE_SELF)
result = measure(lambda: plugin.build(spec), plugin.synchronize, plan, threading.Event(),
                 lambda *_: None)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"samples": result.samples_ns, "minflt": after.ru_minflt - before.ru_minflt,
                  "stime": after.ru_stime - before.ru_stime}))
"""


def bare_samples(python: Path, plugin: str, args: argparse.Namespace, env: dict) -> dict:
    """The bare loop's samples, with its minor page faults and kernel CPU seconds
    (getrusage over build, warm-up and timed steps)."""
    out = subprocess.run(
        [
            str(python),
            "-c",
            BARE,
            plugin,
            args.workload,
            args.phase,
            str(args.batch),
            str(args.iterations),
            str(args.min_seconds),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return bare_result(out.stdout)


def bare_result(stdout: str) -> dict:
    """What BARE printed last: {"samples": [ns, ...], "minflt": faults, "stime": seconds}."""
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def agent_samples(manifest, args: argparse.Namespace, extra: dict) -> list[int]:
    handle = start_local(manifest, Path(tempfile.mkdtemp()), extra_environment=extra)
    try:
        request = agent_pb2.RunRequest(
            workload=args.workload,
            phase=agent_pb2.PHASE_TRAIN if args.phase == "train" else agent_pb2.PHASE_INFER,
            batch_size=args.batch,
            dtype=agent_pb2.DTYPE_FLOAT32,
            warmup_iterations=1,
            min_iterations=args.iterations,
            max_iterations=100000,
            min_seconds=args.min_seconds,
        )
        return list(list(handle.client.run(request, 600))[-1].result.sample_nanoseconds)
    finally:
        handle.stop()


def summary(medians: list[float], counts: list[int], within: list[float]) -> str:
    logs = [math.log(m) for m in medians]
    sd = statistics.stdev(logs)
    # what n samples' median carries of the within-process SD, on average
    carried = statistics.fmean(
        1.2533 * w / math.sqrt(n) for w, n in zip(within, counts, strict=True)
    )
    between = math.sqrt(max(sd**2 - carried**2, 0.0))
    return (
        f"median of medians {statistics.median(medians) * 1e3:.2f} ms, range "
        f"{min(medians) * 1e3:.2f}..{max(medians) * 1e3:.2f}, SD of log medians {sd:.1%} "
        f"(within-process part {carried:.1%}, between {between:.1%}), "
        f"samples a process {min(counts)}..{max(counts)}"
    )


def cell_arguments(parser: argparse.ArgumentParser, processes: int) -> None:
    """The cell and the processes a side (also allocator_spread.py's)."""
    parser.add_argument("--agent", default="tf-eigen")
    parser.add_argument("--workload", default="conv2d")
    parser.add_argument("--phase", default="train", choices=("train", "infer"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--processes", type=int, default=processes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_arguments(parser, 10)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE, both sides")
    parser.add_argument("--json", type=Path, help="also write every process's samples here")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    manifest = discover_manifests(manifest_dirs())[args.agent]
    env = environment_for(manifest)
    env.ensure(print)
    bare_env = {"PATH": "/usr/bin:/bin", **manifest.env, **extra}
    sides: dict[str, list[list[int]]] = {"bare": [], "agent": []}
    faults: list[float] = []  # the bare processes' minor page faults per timed step
    started = time.monotonic()
    for i in range(args.processes):
        bare = bare_samples(env.python, manifest.plugin, args, bare_env)
        sides["bare"].append(bare["samples"])
        faults.append(bare["minflt"] / len(bare["samples"]))
        sides["agent"].append(agent_samples(manifest, args, extra))
        b, a = (statistics.median(sides[s][-1]) / 1e6 for s in ("bare", "agent"))
        kernel = bare["stime"] / len(bare["samples"]) * 1e3
        print(
            f"process {i + 1}: bare {b:.2f} ms ({faults[-1]:.0f} minor faults, {kernel:.1f} ms "
            f"kernel CPU a step), agent {a:.2f} ms",
            flush=True,
        )
    print(
        f"\n{args.agent} {args.workload} {args.phase} bs={args.batch} {extra or ''}, "
        f"{time.monotonic() - started:.0f} s, {os.uname().nodename}"
    )
    for side, runs in sides.items():
        medians = [statistics.median(r) / 1e9 for r in runs]
        within = [statistics.stdev(math.log(s) for s in r) for r in runs]
        print(f"{side}: {summary(medians, [len(r) for r in runs], within)}")
    bare_logs = [math.log(statistics.median(r)) for r in sides["bare"]]
    if len(set(faults)) > 1 and len(set(bare_logs)) > 1:
        # Pages faulted in by some processes and not others (docs/report.md, "Where
        # tf-eigen's spread comes from"): how closely a process's faults follow its median.
        r = statistics.correlation(faults, bare_logs)
        print(f"bare: minor faults a step {min(faults):.0f}..{max(faults):.0f}, r = {r:.2f}")
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "samples_ns": sides})
        )


if __name__ == "__main__":
    main()
