"""Benchmark: is the llamacpp-cpu agent's decode llama.cpp's own? Two figures for the generate
workload's decode tokens per second at one shape, batch 1, one thread count:
  A. through fwbench: `collector run --agents llamacpp-cpu --workloads generate` (its default
     mode, flash_attn), the row's decode_tokens_per_second (the median sample's);
  B. llama.cpp's own counter (bare_llamacpp.py in the agent's environment): the same GGUF,
     context and greedy loop, timed by llama_perf_context (t_eval_ms over n_eval one-token
     decodes: llama_decode alone, no argmax, no harness); the median over rounds.
  C. the same bare process's loop by its own clock: llama_decode, the argmax in NumPy and the
     Python between steps, with no harness (no gRPC server, no runtime threads beside it).
A / B is what the agent's path costs beside llama.cpp's decode (the done-when of issue 57: within
5%); A / C is the harness's share of it, C / B the plugin's loop's. The agent and the bare
process alternate, A B A B, `--rounds` times, so that the machine's drift spreads over both;
each figure is the median of its rounds. `--json FILE` keeps every round.

Run from the repository root with the dev environment (builds llamacpp-cpu's environment on
first use; FWBENCH_ENV_DIR is honoured):
    .venv/bin/python tests/benchmarks/bench_llamacpp_anchor.py [--threads 2] [--layers 12 ...]
        [--rounds 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
AGENT = "llamacpp-cpu"
SHAPE = ("layers", "hidden", "heads", "vocab", "context", "prompt_len", "new_tokens")


def agent_figure(args: argparse.Namespace, out: Path) -> float:
    """The row's decode tokens per second from one `collector run`."""
    command = [sys.executable, "-m", "fwbench.collector.cli", "run", "--agents", AGENT]
    command += ["--workloads", "generate", "--phases", "infer", "--batch-sizes", "1"]
    command += ["--threads", str(args.threads), "--iterations", str(args.iterations)]
    command += ["--out", str(out)]
    for name in SHAPE:
        command += ["--param", f"{name}={getattr(args, name)}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print(done.stdout[-2000:], file=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(f"collector run exited {done.returncode}: {done.stderr[-2000:]}")
    rows = pd.read_parquet(out / "results.parquet")
    row = rows[(rows["agent"] == AGENT) & (rows["workload"] == "generate")].iloc[0]
    return float(row["decode_tokens_per_second"])


def llamacpp_figures(args: argparse.Namespace) -> tuple[float, float]:
    """llama.cpp's own decode tokens per second and the bare loop's by its clock: the medians
    of one bare process's rounds."""
    environment = environment_for(discover_manifests(manifest_dirs())[AGENT])
    environment.ensure()
    command = [str(environment.python), str(HERE / "bare_llamacpp.py")]
    command += ["--threads", str(args.threads), "--rounds", str(args.bare_rounds)]
    command += ["--generations", str(args.generations)]
    for name in SHAPE:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    sources = [ROOT / "agents" / "runtime", ROOT / "agents" / "llamacpp", ROOT / "proto"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, sources))}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    found = re.search(r"^\{.*\}$", done.stdout, re.MULTILINE)
    assert found, done.stdout + done.stderr
    figures = json.loads(found.group(0))
    counted = statistics.median(figures["decode_tokens_per_second"])
    return counted, statistics.median(figures["loop_tokens_per_second"])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    defaults = {"layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "context": 1024}
    defaults |= {"prompt_len": 128, "new_tokens": 128}
    for name in SHAPE:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=defaults[name])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iterations", type=int, default=10, help="the agent's timed generations")
    p.add_argument("--rounds", type=int, default=3, help="A B rounds, alternating")
    p.add_argument("--bare-rounds", type=int, default=3, help="llama.cpp's rounds per process")
    p.add_argument("--generations", type=int, default=5, help="per llama.cpp round")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    agent, own, loop = [], [], []
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="fwbench-anchor-") as folder:
            agent.append(agent_figure(args, Path(folder) / f"run-{round_}"))
        counted, looped = llamacpp_figures(args)
        own.append(counted)
        loop.append(looped)
    a, b, c = (statistics.median(rounds) for rounds in (agent, own, loop))
    print(
        "| figure | fwbench (agent) | llama.cpp's own counter | bare loop | agent / llama.cpp "
        "| agent / bare loop |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| decode tokens/s | {a:.1f} | {b:.1f} | {c:.1f} | {a / b:.3f} | {a / c:.3f} |")
    print(f"rounds: agent {agent}, llama.cpp {own}, bare loop {loop}", file=sys.stderr)
    shape = {name: getattr(args, name) for name in (*SHAPE, "threads")}
    record = {"shape": shape, "agent": agent, "llamacpp": own, "bare_loop": loop}
    record |= {"ratio": a / b, "harness_ratio": a / c}
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
