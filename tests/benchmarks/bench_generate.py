"""Benchmark: does the harness distort generation? The generate workload timed three ways,
interleaved A B C A B C so that machine drift spreads evenly over all:
  A. through fwbench: the torch-cpu agent process (eager mode), driven over gRPC by the
     collector's client, its figures computed as the collector computes a row's;
  B. bare_generate.py --implementation plugin: the agent's own model and decoding, timed by
     hand in a bare script (A / B is the harness's cost);
  C. bare_generate.py --implementation own: a functional PyTorch greedy decoder written apart
     (A / C is what the idiomatic nn.Module model costs against a hand-tuned script);
  D. with --huggingface: bare_generate.py --implementation huggingface, Hugging Face
     transformers' GPT2LMHeadModel.generate (greedy, its default cache) on C's weights and
     prompt, the outside anchor (A / D: fwbench's torch-cpu against what most people run).
     transformers is installed once into an overlay folder beside the agent environments
     (HF_OVERLAY below); D's tokens must equal C's, which the record says (tokens_agree).
All in the same environment at the same shape, batch and thread count (torch's default); each
round is a fresh measurement of `--iterations` generations after `--warmup`. --fixed-malloc
gives all three glibc's thresholds fixed (MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_
=4 GiB, as docs/report.md): without, a process's allocation history moves torch-cpu's speed.

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/bench_generate.py [--rounds 5] [--layers 12 ...]
Prints a Markdown table of time to first token, inter-token latency and decode tokens per
second, each side's median over rounds and their ratio; --json FILE also writes the rounds.
docs/transformers.md records the figures and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

import numpy as np

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.launchers.local import start_local
from fwbench.collector.places import cache_path

HERE = Path(__file__).parent
TRANSFORMERS = "transformers==5.25.0"
HF_OVERLAY = cache_path("bench-overlays") / TRANSFORMERS.replace("==", "-")
SHAPE = ("layers", "hidden", "heads", "vocab", "context", "prompt_len", "new_tokens")


def figures(prefill_ns: list[int], decode_ns: list[int], steps: int, batch: int) -> dict:
    """Time to first token, inter-token latency (medians) and decode tokens per second (the
    median sample's), as run/generation.py computes a row's."""
    per_sample = np.asarray(decode_ns, dtype=float).reshape(-1, steps).sum(axis=1) / 1e9
    return {
        "ttft_ms": statistics.median(prefill_ns) / 1e6,
        "itl_ms": statistics.median(decode_ns) / 1e6,
        "decode_tokens_per_second": float(np.median(batch * steps / per_sample)),
    }


def agent_round(client, args: argparse.Namespace) -> dict:  # type: ignore[no-untyped-def]
    request = agent_pb2.RunRequest(
        workload="generate",
        phase=agent_pb2.PHASE_INFER,
        batch_size=args.batch,
        params={name: getattr(args, name) for name in SHAPE},
        warmup_iterations=args.warmup,
        min_iterations=args.iterations,
        max_iterations=args.iterations,
        min_seconds=0.0,
        mode="eager",
    )
    parts = list(client.run(request, 3600))[-1].result.generation
    steps = parts.decode_steps_per_sample
    return figures(
        list(parts.prefill_nanoseconds), list(parts.decode_step_nanoseconds), steps, args.batch
    )


FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def hf_overlay(python: Path) -> Path:
    """transformers and what it needs, installed once by the environment's pip into a folder
    that bare_generate.py appends to sys.path (after the environment's torch and numpy)."""
    if not (HF_OVERLAY / ".complete").is_file():
        command = [str(python), "-m", "pip", "install", "-q", "--target", str(HF_OVERLAY)]
        subprocess.run([*command, TRANSFORMERS], check=True)
        (HF_OVERLAY / ".complete").touch()
    return HF_OVERLAY


def bare_round(
    python: Path, args: argparse.Namespace, implementation: str, tokens: dict | None = None
) -> dict:
    command = [str(python), str(HERE / "bare_generate.py"), "--implementation", implementation]
    for name in (*SHAPE, "batch", "warmup", "iterations"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if implementation == "huggingface":
        command += ["--overlay", str(HF_OVERLAY)]
    environment = {**os.environ, **(FIXED_MALLOC if args.fixed_malloc else {})}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=environment)
    out = json.loads(done.stdout)
    if tokens is not None:
        tokens[implementation] = out["tokens"]
    return figures(out["prefill_ns"], out["decode_ns"], args.new_tokens - 1, args.batch)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = dict(
        layers=12,
        hidden=768,
        heads=12,
        vocab=50257,
        context=1024,
        prompt_len=128,
        new_tokens=64,
        batch=1,
        warmup=1,
        iterations=3,
    )
    for name, value in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=value)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--fixed-malloc", action="store_true", help="glibc's thresholds fixed")
    parser.add_argument("--huggingface", action="store_true", help="D: transformers' generate")
    args = parser.parse_args(argv)
    manifest = discover_manifests(manifest_dirs())["torch-cpu"]
    environment = environment_for(manifest)
    environment.ensure()
    if args.huggingface:
        hf_overlay(environment.python)
    extra = FIXED_MALLOC if args.fixed_malloc else None
    handle = start_local(manifest, Path("/tmp"), extra_environment=extra)
    rounds: dict[str, list[dict]] = {"fwbench": [], "bare (same model)": [], "bare (own)": []}
    if args.huggingface:
        rounds["Hugging Face"] = []
    tokens: dict[str, list] = {}
    try:
        for _ in range(args.rounds):
            rounds["fwbench"].append(agent_round(handle.client, args))
            rounds["bare (same model)"].append(bare_round(environment.python, args, "plugin"))
            rounds["bare (own)"].append(bare_round(environment.python, args, "own", tokens))
            if args.huggingface:
                python = environment.python
                rounds["Hugging Face"].append(bare_round(python, args, "huggingface", tokens))
    finally:
        handle.stop()
    summary = {
        side: {key: statistics.median(r[key] for r in values) for key in values[0]}
        for side, values in rounds.items()
    }
    sides = list(rounds)
    print(
        "| figure | "
        + " | ".join(sides)
        + " | "
        + " | ".join(f"fwbench / {s}" for s in sides[1:])
        + " |"
    )
    print("| --- " * (2 * len(sides)) + "|")
    for key in summary["fwbench"]:
        values = [summary[side][key] for side in sides]
        ratios = [values[0] / value for value in values[1:]]
        cells = [f"{v:.4g}" for v in values] + [f"{r:.3f}" for r in ratios]
        print(f"| {key} | " + " | ".join(cells) + " |")
    record = {
        "shape": {n: getattr(args, n) for n in (*SHAPE, "batch")},
        "rounds": rounds,
        "summary": summary,
        "fixed_malloc": args.fixed_malloc,
    }
    if args.huggingface:
        record["tokens_agree"] = tokens["huggingface"] == tokens["own"]
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
