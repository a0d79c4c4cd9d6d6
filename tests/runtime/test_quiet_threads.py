"""The agent's own threads sleep until there is work for them: every wake-up of an agent thread
lands on the CPU a world's rank steps on, beside the collective's threads
(docs/lab/world-overhead.md). The /metrics server sleeps until a scrape comes, the parent
watch until the parent ends, and a world's rank sends its growing count every
WORLD_PROGRESS_SECONDS (under the heartbeat interval) instead of twice a second. Wake-ups are a
thread's context switches, read from /proc/PID/task/TID/status (Linux)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from fake_plugin import FakePlugin
from plugin_dist import write_entry_points

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime.metrics import AgentMetrics
from fwbench.runtime.plugin import PluginContext
from fwbench.runtime.server import create_server
from fwbench.runtime.timing import PROGRESS_SECONDS, WORLD_PROGRESS_SECONDS
from fwbench.runtime.world import World
from fwbench.spec import HEARTBEAT_SECONDS

HERE = Path(__file__).parent


def switches(pid: int, tid: int) -> int:
    """A thread's context switches so far, voluntary and not."""
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
    )
    return int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])


def test_the_metrics_server_sleeps_until_a_scrape_comes() -> None:
    running = set(threading.enumerate())  # other tests' agents serve in this process too
    port = AgentMetrics({"agent_name": "quiet"}).serve("127.0.0.1", 0)
    (thread,) = [t for t in threading.enumerate() if t not in running]
    assert thread.name == "fwbench-metrics" and thread.native_id is not None
    time.sleep(0.3)  # into its select
    before = switches(os.getpid(), thread.native_id)
    time.sleep(1.5)  # prometheus_client's own server would have woken three times
    assert switches(os.getpid(), thread.native_id) == before
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert b"fwbench_agent_info" in reply.read()
    assert switches(os.getpid(), thread.native_id) > before  # a scrape is seen: the count works


WATCHER = """
import os, sys, threading, time
from pathlib import Path
from fwbench.runtime.cli import _watch_parent
from test_quiet_threads import switches
stop = threading.Event()
thread = threading.Thread(target=_watch_parent, args=(os.getppid(), stop), daemon=True)
thread.start()
time.sleep(0.3)
before = switches(os.getpid(), thread.native_id)
time.sleep(1.5)
report = Path(sys.argv[1])
report.write_text(f"{switches(os.getpid(), thread.native_id) - before}\\n")
with report.open("a") as out:
    out.write("stopped\\n" if stop.wait(30) else "still waiting\\n")
"""


def test_the_parent_watch_sleeps_until_the_parent_ends(tmp_path: Path) -> None:
    report = tmp_path / "report"
    middle = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {WATCHER!r}, {str(report)!r}])
        time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    parent = subprocess.Popen([sys.executable, "-c", middle], env=env)
    try:
        deadline = time.monotonic() + 60
        while not report.exists() or not report.read_text().endswith("\n"):
            assert time.monotonic() < deadline, "the watcher wrote nothing in 60 s"
            time.sleep(0.05)
        assert report.read_text().splitlines()[0] == "0"  # no wake-up in 1.5 s
    finally:
        parent.kill()  # SIGKILL: nothing of the parent's own says goodbye
        parent.wait()
    deadline = time.monotonic() + 20
    while len(report.read_text().splitlines()) < 2:
        assert time.monotonic() < deadline, "the watcher never finished"
        time.sleep(0.05)
    assert report.read_text().splitlines()[1] == "stopped"


def test_an_agent_whose_parent_is_killed_exits(tmp_path: Path) -> None:
    """The real command line: `--exit-with-parent PID` ends the agent when PID dies."""
    plugins = write_entry_points(tmp_path / "plugins", {"fake": "fake_plugin:FakePlugin"})
    ports = tmp_path / "ports.json"
    middle = textwrap.dedent(f"""
        import subprocess, sys, os, time
        agent = subprocess.Popen([sys.executable, "-m", "fwbench.runtime.cli", "--plugin", "fake",
                                  "--ports-file", {str(ports)!r},
                                  "--exit-with-parent", str(os.getpid())])
        print(agent.pid, flush=True)
        time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(HERE), *sys.path])}
    parent = subprocess.Popen([sys.executable, "-c", middle], env=env, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    agent = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 60
        while not ports.exists():
            assert time.monotonic() < deadline, "the agent did not serve in 60 s"
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while Path(f"/proc/{agent}").exists() and "Z" not in _state(agent):
            assert time.monotonic() < deadline, "the agent outlived its parent by 20 s"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        if Path(f"/proc/{agent}").exists():
            os.kill(agent, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def _measure_gaps(world: World | None) -> list[float]:
    """Seconds between the timed loop's growing counts, as the client receives them (a fake
    gemm of 10 ms steps, 3.2 s timed)."""
    plugin = FakePlugin(PluginContext(device="cpu", world=world))
    server = create_server(plugin, name="fake-cpu", variant="cpu", world=world)
    request = agent_pb2.RunRequest(
        workload="gemm", phase=agent_pb2.PHASE_TRAIN, batch_size=1, params={"m": 10_000},
        warmup_iterations=0, min_iterations=320, max_iterations=320, min_seconds=0,
        strategy="ddp" if world else "",
    )  # fmt: skip
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            events = list(agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=60))
    finally:
        server.stop(0)
    assert events[-1].HasField("result")
    counts = [
        e.progress for e in events
        if e.HasField("progress") and e.progress.stage == agent_pb2.STAGE_MEASURE
        and 0 < e.progress.iterations_done < 320
    ]  # fmt: skip
    seen = {}
    for progress in counts:  # a heartbeat repeats a count: the first arrival is its report
        seen.setdefault(progress.iterations_done, progress.elapsed_seconds)
    arrivals = sorted(seen.values())
    return [b - a for a, b in itertools.pairwise(arrivals)]


def test_a_worlds_rank_sends_its_count_less_often_than_an_agent_alone() -> None:
    assert PROGRESS_SECONDS < WORLD_PROGRESS_SECONDS < HEARTBEAT_SECONDS
    alone = _measure_gaps(None)
    assert alone and min(alone) < 1.0  # twice a second: the gaps this test can see
    rank = _measure_gaps(World(2, 1, 1, "127.0.0.1", 29500))
    assert rank, "a 3.2 s timed loop sent no count between its first and its last"
    assert min(rank) > 0.8 * WORLD_PROGRESS_SECONDS, rank


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_metrics_server_binds_the_hosts_an_agent_is_given(host: str) -> None:
    port = AgentMetrics({"agent_name": "quiet"}).serve(host, 0)
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
