"""Benchmark: how far apart fresh processes of one cell measure, per memory allocator.

tf-eigen's conv2d training processes differ by about 8% on the 2-vCPU hosts (process_spread.py:
the framework's, not the harness's), which is what keeps an A/A pair from "equivalent within
5%" in ten minutes. This times the same cell in fresh bare processes (process_spread.py's bare
script: the plugin's step in a plain loop, 1 warm-up, at least 3 steps and 0.5 s) under each
condition, interleaved (one process of each condition per round, so drift spreads evenly):
  glibc     as shipped;
  no-aslr   glibc with address-space randomisation off (setarch -R): is it the layout?
  tcmalloc  LD_PRELOAD of gperftools' libtcmalloc_minimal (Debian libtcmalloc-minimal4);
  jemalloc  LD_PRELOAD of libjemalloc (Debian libjemalloc2).
A condition whose library is not installed is left out (said so). Prints each condition's
median of process medians, range and SD of the log medians.

    .venv/bin/python tests/benchmarks/allocator_spread.py --agent tf-eigen --workload conv2d \
        --phase train --batch 8 --processes 12
The same choice in a real run: `collector run --agent-env LD_PRELOAD=...` (docs/report.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from process_spread import BARE, bare_result, cell_arguments

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs

LIBRARIES = Path("/usr/lib/x86_64-linux-gnu")
CONDITIONS: dict[str, tuple[list[str], dict[str, str]]] = {
    "glibc": ([], {}),
    "no-aslr": (["setarch", os.uname().machine, "-R"], {}),
    "tcmalloc": ([], {"LD_PRELOAD": str(LIBRARIES / "libtcmalloc_minimal.so.4")}),
    "jemalloc": ([], {"LD_PRELOAD": str(LIBRARIES / "libjemalloc.so.2")}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_arguments(parser, 12)
    parser.add_argument("--json", type=Path, help="also write every process's samples here")
    args = parser.parse_args()
    if args.processes < 2:
        parser.error("--processes: 2 or more (a spread needs two processes a condition)")
    manifest = discover_manifests(manifest_dirs())[args.agent]
    env = environment_for(manifest)
    env.ensure(print)
    base = {"PATH": "/usr/bin:/bin", **manifest.env}
    conditions = {}
    for name, (prefix, extra) in CONDITIONS.items():
        preload = extra.get("LD_PRELOAD")
        if preload and not Path(preload).exists():
            print(f"{name}: {preload} is not installed here; left out")
            continue
        conditions[name] = (prefix, extra)
    samples: dict[str, list[list[int]]] = {name: [] for name in conditions}
    started = time.monotonic()
    for index in range(args.processes):
        for name, (prefix, extra) in conditions.items():
            command = [
                *prefix,
                str(env.python),
                "-c",
                BARE,
                manifest.plugin,
                args.workload,
                args.phase,
                str(args.batch),
                "3",
                "0.5",
            ]
            done = subprocess.run(
                command, capture_output=True, text=True, check=True, env={**base, **extra}
            )
            samples[name].append(bare_result(done.stdout)["samples"])
        medians = {n: f"{statistics.median(s[-1]) / 1e6:.2f}" for n, s in samples.items()}
        print(f"round {index + 1}: " + ", ".join(f"{n} {m} ms" for n, m in medians.items()))
    print(
        f"\n{args.agent} {args.workload} {args.phase} bs={args.batch}, {args.processes} "
        f"processes per condition, {time.monotonic() - started:.0f} s, {os.uname().nodename}"
    )
    for name, runs in samples.items():
        medians = [statistics.median(r) / 1e6 for r in runs]
        spread = statistics.stdev(math.log(m) for m in medians)
        print(
            f"{name}: median {statistics.median(medians):.2f} ms, range {min(medians):.2f}.."
            f"{max(medians):.2f}, SD of log medians {spread:.1%}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "samples_ns": samples})
        )


if __name__ == "__main__":
    main()
