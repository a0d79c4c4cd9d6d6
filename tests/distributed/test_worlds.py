"""Distributed worlds through `collector run --world-sizes`, with ranks of the framework-free
fake agent as real processes over real gRPC: one agent per world, as slow as its slowest rank
(rank speeds the test sets, whatever the CPU), every rank's own figures kept, and a failing
rank failing its cell, never the run. tests/distributed/test_torch_world.py runs PyTorch's own
engine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from fake_agent import write_fake_agents

from fwbench.collector.agents.specs import Instance
from fwbench.collector.analysis.scaling import scaling_table

pytestmark = pytest.mark.timing  # its verdicts and hang timeouts come from measured times

COLLECTOR = Path(sys.executable).with_name("collector")


def _run(
    tmp_path: Path, env: dict[str, str], *extra: str
) -> tuple[subprocess.CompletedProcess, Path]:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": env})
    out = tmp_path / "run"
    command = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "train",
        "--world-sizes",
        "1,2",
        "--param",
        "m=20000",
        "--iterations",
        "6",
        "--warmup",
        "1",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(out),
        *extra,
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    return done, out


def test_a_world_is_as_slow_as_its_slowest_rank_and_its_efficiency_is_shown_everywhere(
    tmp_path: Path,
) -> None:
    """Three processes of each world (--repeat 3), rank 1 three times as slow: each world is
    one agent as slow as its slowest rank, every rank's figures and telemetry kept; efficiency
    about 1/3 with its interval, called sub-linear in the world table, in `collector
    results`, in `compare` (efficiency, not "speedup 0.33x") and in the report, which shows
    the worlds as the CLI does and plots their scaling."""
    # The test checks the verdicts, not the machine: nothing is left out as interfered.
    extra = ["--batch-sizes", "4", "--repeat", "3", "--interference-threshold", "100"]
    done, out = _run(tmp_path, {"FAKE_RANK1_SCALE": "3"}, *extra)
    assert done.returncode == 0, done.stderr
    results = pd.read_parquet(out / "results.parquet")
    assert sorted(results["agent"]) == ["fake~w1"] * 3 + ["fake~w2"] * 3
    series = pd.read_parquet(out / "telemetry.parquet")
    for repetition, rows in results.groupby("repetition"):
        by_agent = rows.set_index("agent")
        alone, pair = by_agent.loc["fake~w1"], by_agent.loc["fake~w2"]
        assert (alone["world_size"], pair["world_size"]) == (1, 2), repetition
        assert pair["strategy"] == "ddp" and pair["items_per_sample"] == 8  # 4 per rank, 2 ranks
        per_rank = json.loads(pair["rank_step_median_seconds"])
        assert per_rank[1] > 2 * per_rank[0]  # rank 1 sleeps 3x as long
        assert abs(pair["median_seconds"] - per_rank[1]) < 0.2 * per_rank[1]  # the world waits
        assert [len(s) for s in json.loads(pair["rank_samples_ns"])] == [6, 6]
        cpus = pair["rank_cpus"].split(";")
        assert len(cpus) == 2 and (cpus[0] != cpus[1] or len(os.sched_getaffinity(0)) == 1)
        assert pair["communication_seconds"] == 1e-6  # the fake engine's 1000 ns a step
        # Telemetry from every rank: the raw series carry each rank's, the row the world's.
        labels = set(series[series["cell"] == int(pair["cell"])]["label"])
        assert {"rank0", "rank1"} <= labels and "rank1:user" in labels, repetition
        assert pd.isna(pair["telemetry_error"])
        assert pair["rss_peak_bytes"] > alone["rss_peak_bytes"], repetition
    table = scaling_table(results)
    efficiency = table.set_index("ranks")["scaling_efficiency"]
    # 2 ranks, one 1/3 as fast: the world's items/s (median of the processes) over twice the
    # lone rank's, about 1/3; a step's own overhead (a few ms on a busy host, beside 20 ms of
    # sleep) lifts it.
    median = results.groupby("agent")["items_per_second"].median()
    assert efficiency[1] == 1.0
    assert efficiency[2] == pytest.approx(median["fake~w2"] / median["fake~w1"] / 2)
    assert 0.2 < efficiency[2] < 0.5
    assert "efficiency" in done.stdout and "distributed" in done.stdout
    store = ["--store", str(tmp_path / "store.sqlite")]
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert "sub-linear │" in done.stdout
    wide = {**os.environ, "COLUMNS": "250"}
    shown = subprocess.run(
        [str(COLLECTOR), "results", run_id, *store],
        capture_output=True,
        text=True,
        timeout=120,
        env=wide,
    )
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if "sub-linear │" in x)
    assert "% [" in line  # the interval beside the efficiency
    compared = subprocess.run(
        [str(COLLECTOR), "compare", run_id, *store, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compared.returncode == 0, compared.stderr
    (comparison,) = json.loads(compared.stdout)["comparisons"]
    assert comparison["measure"] == "efficiency" and comparison["agent"] == "fake~w2"
    assert 0.2 < comparison["speedup"] < 0.5 and comparison["speedup_ci_high"] < 0.6
    assert comparison["verdict"] == "slower" and comparison["scaling_verdict"] == "sub-linear"
    table = subprocess.run(
        [str(COLLECTOR), "compare", run_id, *store],
        capture_output=True,
        text=True,
        timeout=120,
        env=wide,
    )
    assert "eff 3" in table.stdout and "scales sub-linearly from fake~w1" in table.stdout
    report = subprocess.run(
        [str(COLLECTOR), "report", run_id, *store, "--out", str(tmp_path / "report")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'id="distributed-table"' in html and 'id="fig-scaling"' in html
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Distributed worlds" in markdown and "| fake | gemm | 4 | ddp | 2 |" in markdown
    assert "gemm train bs=4 float32 ddp" in markdown  # the strategy names the compared cell
    assert "| sub-linear |" in markdown and "scales sub-linearly" in markdown


def test_a_failing_rank_fails_its_cell_and_a_fresh_world_measures_the_rest(
    tmp_path: Path,
) -> None:
    env = {"FAKE_RANK1_FAIL_AT": "3", "FAKE_FAIL_ONCE": str(tmp_path / "failed-once")}
    done, out = _run(tmp_path, env, "--batch-sizes", "1,2", "--world-sizes", "2")
    assert done.returncode == 1, done.stderr  # a failed cell: the run says failed
    rows = pd.read_parquet(out / "results.parquet").sort_values("cell")
    assert list(rows["status"]) == ["failed", "ok"]
    error = rows["error"].iloc[0]
    assert "rank 1" in error and "rank failed at step 3" in error
    assert "started again" in error
    assert rows["agent_pid"].iloc[0] != rows["agent_pid"].iloc[1]  # a fresh world
    assert json.loads((out / "run.json").read_text())["status"] == "failed"


def test_a_rank_dying_at_start_up_ends_the_world_start_at_once(tmp_path: Path) -> None:
    """Rank 1 fails at start-up while rank 0 is still starting (60 s, as in a rendezvous that
    waits for rank 1): the world gives rank 0's start up instead of waiting it out, and the
    run says why, naming the rank that failed."""
    env = {"FAKE_START_FAILS_ON_RANK": "1", "FAKE_START_SECONDS": "60"}
    began = time.monotonic()
    done, _ = _run(tmp_path, env, "--batch-sizes", "1", "--world-sizes", "2")
    assert time.monotonic() - began < 45, done.stderr  # rank 0 alone would take 60 s
    assert done.returncode == 2, done.stderr  # no agent could start: the run could not begin
    assert "world fake~w2 of 2 ranks: agent fake~w2-rank1 failed to start" in done.stderr
    assert "fake rank 1 fails at start-up" in done.stderr


def test_a_world_whose_port_was_taken_before_its_rank_bound_it_is_placed_again(
    tmp_path: Path,
) -> None:
    """The ports of a world are chosen free, then bound by its ranks: another process can take
    one in between. The first world's rank 0 finds its port taken (the fake stages that); the
    world is placed on fresh ports and started again, and the run measures as if nothing
    happened."""
    taken = tmp_path / "taken"
    done, out = _run(tmp_path, {"FAKE_PORT_TAKEN_ONCE": str(taken)}, "--batch-sizes", "1")
    assert done.returncode == 0, done.stderr
    assert taken.exists()  # a start did fail on its port
    rows = pd.read_parquet(out / "results.parquet")
    assert sorted(rows["agent"]) == ["fake~w1", "fake~w2"]
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]


def test_a_process_of_two_devices_is_a_world_of_two_replicas(tmp_path: Path) -> None:
    """--world-sizes 1,1x2: one process told FWBENCH_LOCAL_DEVICES=2 (the fake's step then
    takes 1.5x as long: FAKE_DEVICES_SCALE), given a replica's CPUs twice, covering two
    batches per step; its efficiency is against the same agent's one-device world."""
    env = {"FAKE_DEVICES_SCALE": "1.5"}
    done, out = _run(tmp_path, env, "--batch-sizes", "4", "--world-sizes", "1,1x2")
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    alone, devices = rows.loc["fake~w1"], rows.loc["fake~w1x2"]
    assert (devices["world_size"], devices["local_devices"]) == (1, 2)
    assert (alone["world_size"], alone["local_devices"]) == (1, 1)
    assert devices["items_per_sample"] == 8 and alone["items_per_sample"] == 4
    cpus = len(os.sched_getaffinity(0))
    assert len(devices["rank_cpus"].split(",")) == 2 * len(alone["rank_cpus"].split(","))
    assert len(alone["rank_cpus"].split(",")) == max(cpus // 2, 1)
    table = scaling_table(pd.read_parquet(out / "results.parquet"))
    efficiency = table.set_index("devices")["scaling_efficiency"]
    # 2 batches in 1.5x the time: about 2/3; a step's own overhead (a few ms on a busy
    # host, beside 20 ms of sleep) lifts it (0.74 with 4 ms of sleep on a loaded CI host).
    assert efficiency[1] == 1.0
    expected = devices["items_per_second"] / alone["items_per_second"] / 2
    assert efficiency[2] == pytest.approx(expected)
    assert 0.55 < efficiency[2] < 0.8
    assert "1x2" in done.stdout


def test_world_sizes_are_checked_before_anything_starts(tmp_path: Path) -> None:
    for index, (extra, said) in enumerate(
        (
            (("--world-sizes", "0"), "invalid world size '0'"),
            (("--world-sizes", "1x0"), "D in NxD is the devices of each process"),
            (("--world-sizes", "2x2"), "several devices in each of several processes"),
            (("--min-seconds", "1"), "give --iterations instead"),
            (("--threads", "2"), "--threads cannot be used with worlds"),
            (("--agents", "fake@127.0.0.1:1"), "an attached agent is one process"),
        )
    ):
        done, out = _run(tmp_path / str(index), {}, "--batch-sizes", "1", *extra)
        assert done.returncode == 2, (extra, done.stderr)
        assert said in done.stderr, done.stderr
        assert not out.exists()


def test_a_stopped_rank_silences_the_world_which_is_hung_and_replaced(tmp_path: Path) -> None:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    out = tmp_path / "run"
    command = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "train",
        "--world-sizes",
        "2",
        "--batch-sizes",
        "1,2",
        "--param",
        "m=20000",
        "--iterations",
        "200",
        "--hang-timeout",
        "5",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(out),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (out / "run.json").exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    ranks = json.loads((out / "run.json").read_text())["agents"]["fake~w2"]["ranks"]
    time.sleep(1.5)  # into the first cell's timed loop (4 s of 20 ms steps)
    os.kill(ranks[1]["pid"], signal.SIGSTOP)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr.decode()
    rows = pd.read_parquet(out / "results.parquet").sort_values("cell")
    assert list(rows["status"]) == ["failed", "ok"]
    # silent from the start, or after a heartbeat that came before the stop: both true
    error = rows["error"].iloc[0]
    assert re.search(r"sent nothing for (the last )?\d+ s", error), error
    assert "hung, stopped or frozen" in error
    for rank in ranks:  # the stopped rank and its peer: both stopped, none left behind
        assert not Path(f"/proc/{rank['pid']}").exists()


def test_rank_threads_share_this_host_unless_a_scheduler_is_told_the_cpus() -> None:
    from fwbench.collector.launchers import LauncherKind, launcher_options
    from fwbench.collector.run.launch import rank_threads
    from fwbench.collector.run.options import Launch, RunOptions

    def options(launcher: LauncherKind, **given: list[str]) -> RunOptions:
        own = launcher_options(launcher, given)  # as `collector run` parses them
        return RunOptions((w2,), None, Path(), "", launch=Launch(launcher, own))

    fake = Instance("fake")
    w1, w2, w1x2 = fake.as_world(1), fake.as_world(2), fake.as_world(1, 2)
    cpus = len(os.sched_getaffinity(0))
    assert rank_threads([w1, w2]) == max(cpus // 2, 1)
    assert rank_threads([fake]) == cpus
    assert rank_threads([w1, w1x2]) == max(cpus // 2, 1)  # per device
    slurm = options(LauncherKind.SLURM, slurm=["partition=cpu", "cpus-per-task=3"])
    assert rank_threads([w2], slurm) == 3
    zero = options(LauncherKind.SLURM, slurm=["cpus-per-task=0"])
    assert rank_threads([w2], zero) == max(cpus // 2, 1)
    assert rank_threads([w2], options(LauncherKind.KUBERNETES)) == 1  # a pod's default
    pods = options(LauncherKind.KUBERNETES, k8s=["cpus=4"])
    assert rank_threads([w2], pods) == 4


def test_a_local_world_gets_distinct_ports_that_are_free() -> None:
    import socket

    from fwbench.collector.launchers.base import free_ports
    from fwbench.collector.launchers.local import LocalLauncher

    world = Instance("fake", ranks=64, devices=1)
    placement = LocalLauncher(None).place_world(None, world, 1)  # type: ignore[arg-type]
    ports = [placement.port, *(int(peer.rsplit(":", 1)[1]) for peer in placement.peers)]
    assert len(set(ports)) == 65 and placement.address == "127.0.0.1"
    chosen = free_ports(64)
    assert len(set(chosen)) == 64
    for port in chosen:  # free once returned: a rank can bind each
        with socket.socket() as rank:
            rank.bind(("127.0.0.1", port))


def test_a_worlds_timed_phase_is_scraped_at_its_edges_only(tmp_path: Path) -> None:
    """A rank serves its scrapes on its own CPUs, and the world waits for its slowest rank: a
    rank is never scraped on a timer, only as the cell and each of its four stages begin and
    after the result (6 scrapes at most), whatever the interval; so at most the four stage
    scrapes, where the collector heard of them late, fall inside the timed phase, not one every
    interval (9 here on a loaded host when a timer ran until the timed loop was heard of); the
    rows still have their figures."""
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    out = tmp_path / "run"
    command = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "train",
        "--world-sizes",
        "1,2",
        "--batch-sizes",
        "4",
        "--param",
        "m=30000",
        "--iterations",
        "16",
        "--warmup",
        "1",
        "--scrape-interval",
        "0.05",
        "--store",
        str(tmp_path / "s.sqlite"),
        "--out",
        str(out),
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    series = pd.read_parquet(out / "telemetry.parquet")
    seconds = (series["time"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()

    def scraped(row: pd.Series, label: str) -> tuple[int, int]:
        """(scrapes of the cell, of them inside its timed phase)."""
        start, end = (row[f"measure_{edge}_at"].timestamp() for edge in ("started", "ended"))
        mine = series[
            (series["cell"] == int(row["cell"]))
            & (series["metric"] == "fwbench_process_cpu_seconds_total")
            & (series["label"] == label)
        ]
        times = seconds[mine.index]
        return len(times), int(((times > start) & (times < end)).sum())

    for world in ("fake~w1", "fake~w2"):
        row = rows.loc[world]
        phase = (row["measure_ended_at"] - row["measure_started_at"]).total_seconds()
        assert phase > 8 * 0.05  # 16 steps of 30 ms: eight intervals or more
        for rank in range(int(row["world_size"])):
            total, inside = scraped(row, f"rank{rank}:user")
            # The cell's first scrape comes before the rank is asked to run, its last after the
            # result: only the four stage scrapes can fall inside, all four on a host loaded
            # enough that the collector heard of every stage late (a cold CI run: 4).
            assert 2 <= total <= 6 and inside <= 4, (world, rank, total, inside)
        assert pd.isna(row["telemetry_error"]) and row["cpu_user_percent"] >= 0
