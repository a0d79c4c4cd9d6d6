"""Diagnostic: what every thread of a 2-rank world's processes does during the timed phase,
through the collector and as the bare script (bench_world_overhead.py's two sides), read from
/proc: each thread's CPU ticks, its voluntary and involuntary context switches, the CPUs it may
run on and the one it last ran on, over the same seconds of a long timed phase.

Run from the repository root with the dev environment, on an otherwise idle machine:
    .venv/bin/python tests/benchmarks/world_threads.py [--batch 8] [--settle 10] [--seconds 6]
        [--csv FILE]
Prints one table a side; docs/lab/world-overhead.md records what it found.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
from bench_world_overhead import BARE, COLLECTOR, RANKS, WORKLOAD, free_port

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs

HERE = Path(__file__).parent
TICK = os.sysconf("SC_CLK_TCK")
SCHED_IDLE = 5
ITERATIONS = 1_000_000  # ended by this script long before


def threads_of(pid: int) -> dict[int, dict[str, object]]:
    """Each thread's counters now: {tid: {comm, ticks, voluntary, involuntary, allowed, cpu}}."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            status = dict(
                line.split(":\t", 1)
                for line in (task / "status").read_text().splitlines()
                if ":\t" in line
            )
        except OSError:
            continue  # the thread ended
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(task.name)] = {
            "comm": (task / "comm").read_text().strip() if (task / "comm").exists() else "?",
            "ticks": int(fields[11]) + int(fields[12]),  # utime + stime
            "voluntary": int(status["voluntary_ctxt_switches"]),
            "involuntary": int(status["nonvoluntary_ctxt_switches"]),
            "allowed": status["Cpus_allowed_list"].strip(),
            "cpu": int(fields[36]),
            "policy": int(fields[38]),  # 0 normal, 5 SCHED_IDLE (sched(7))
        }
    return found


def sample(pids: list[int], seconds: float, side: str) -> list[dict[str, object]]:
    before = {pid: threads_of(pid) for pid in pids}
    time.sleep(seconds)
    rows = []
    for rank, pid in enumerate(pids):
        for tid, now in threads_of(pid).items():
            then = before[pid].get(tid)
            if then is None:
                continue
            rows.append(
                {
                    "side": side,
                    "rank": rank,
                    "thread": now["comm"],
                    "tid": tid,
                    "cpu_share": round((now["ticks"] - then["ticks"]) / TICK / seconds, 3),
                    "voluntary_per_s": round((now["voluntary"] - then["voluntary"]) / seconds, 1),
                    "involuntary_per_s": round(
                        (now["involuntary"] - then["involuntary"]) / seconds, 1
                    ),
                    "allowed": now["allowed"],
                    "last_cpu": now["cpu"],
                    "idle_class": now["policy"] == SCHED_IDLE,
                }
            )
    return rows


def rank_pids(parent: int) -> list[int]:
    """The world's rank processes under the collector, by RANK."""
    ranks = {}
    for child in psutil.Process(parent).children(recursive=True):
        try:
            if "fwbench.runtime.cli" in " ".join(child.cmdline()):
                ranks[int(child.environ().get("RANK", "-1"))] = child.pid
        except psutil.Error:
            continue
    return [ranks[r] for r in sorted(ranks) if r >= 0]


def tool_side(batch: int, settle: float, seconds: float) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as folder:
        command = [
            str(COLLECTOR),
            "run",
            "--agents",
            "torch-cpu",
            "--workloads",
            WORKLOAD,
            "--phases",
            "train",
            "--batch-sizes",
            str(batch),
            "--world-sizes",
            str(RANKS),
            "--iterations",
            str(ITERATIONS),
            "--warmup",
            "50",
            "--store",
            f"{folder}/store.sqlite",
            "--out",
            f"{folder}/run",
        ]
        collector = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while len(pids := rank_pids(collector.pid)) < RANKS:
                assert collector.poll() is None, collector.stderr.read() if collector.stderr else ""
                assert time.monotonic() < deadline, "the world did not start in 120 s"
                time.sleep(0.2)
            time.sleep(settle)  # build, first step, warm-up: then the timed loop
            rows = sample([*pids, collector.pid], seconds, "collector")
        finally:
            collector.send_signal(signal.SIGINT)  # Ctrl-C: the ranks are stopped
            collector.wait(120)
    for row in rows:
        if row["rank"] == RANKS:
            row["rank"] = "collector"
    return rows


def bare_side(batch: int, settle: float, seconds: float) -> list[dict[str, object]]:
    manifest = discover_manifests(manifest_dirs())["torch-cpu"]
    python = environment_for(manifest).python
    port = free_port()
    ranks = []
    for rank in range(RANKS):
        env = {
            "PATH": "/usr/bin:/bin",
            "RANK": str(rank),
            "WORLD_SIZE": str(RANKS),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        command = [
            "taskset",
            "-c",
            str(rank % (os.cpu_count() or 1)),
            str(python),
            str(HERE / "bare_ddp.py"),
            WORKLOAD,
            str(batch),
            "50",
            str(ITERATIONS),
            "1",
        ]
        ranks.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env))
    try:
        time.sleep(settle)
        return sample([rank.pid for rank in ranks], seconds, BARE)
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()


COLLECTIVE = ("gloo", "pt_", "tf_", "xla")  # the framework's communication threads, by name


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """A rank's threads in three kinds: the stepping thread (its busiest Python thread), the
    collective's, and the rest (the agent's own: gRPC, /metrics, the relay, the watches), and
    the collector's process, each with its CPU share and its wake-ups (voluntary and
    involuntary switches) a second, all and at the normal class (those that compete with the
    ranks; SCHED_IDLE threads run only on an otherwise idle CPU)."""
    ranks = table.copy()
    stepping = ranks[ranks["thread"] == "python"].groupby(["side", "rank"])["cpu_share"].idxmax()
    ranks["kind"] = "the agent's own"
    ranks.loc[ranks["thread"].str.startswith(COLLECTIVE), "kind"] = "collective"
    ranks.loc[stepping.values, "kind"] = "stepping"
    ranks.loc[(ranks["side"] == BARE) & (ranks["kind"] == "the agent's own"), "kind"] = "other"
    ranks.loc[ranks["rank"] == "collector", "kind"] = "collector"
    ranks["wakeups_per_s"] = ranks["voluntary_per_s"] + ranks["involuntary_per_s"]
    ranks["normal_wakeups_per_s"] = ranks["wakeups_per_s"].where(~ranks["idle_class"], 0.0)
    ranks["rank"] = ranks["rank"].astype(str)
    grouped = ranks.groupby(["side", "rank", "kind"], as_index=False)
    return grouped.agg(
        threads=("tid", "count"),
        cpu_share=("cpu_share", "sum"),
        wakeups_per_s=("wakeups_per_s", "sum"),
        normal_wakeups_per_s=("normal_wakeups_per_s", "sum"),
    ).round(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before sampling")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds sampled")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    environment_for(discover_manifests(manifest_dirs())["torch-cpu"]).ensure()
    rows = bare_side(args.batch, args.settle, args.seconds)
    rows += tool_side(args.batch, args.settle, args.seconds)
    table = pd.DataFrame(rows)
    busy = table[
        (table["cpu_share"] > 0) | (table["voluntary_per_s"] + table["involuntary_per_s"] > 0)
    ]
    print(busy.drop(columns="tid").to_markdown(index=False), file=sys.stdout)
    print(file=sys.stdout)
    print(summary(table).to_markdown(index=False), file=sys.stdout)
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
