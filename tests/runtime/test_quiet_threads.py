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
from fwbench.runtime.quiet import grpc_threads
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
        workload="gemm",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=1,
        params={"m": 10_000},
        warmup_iterations=0,
        min_iterations=320,
        max_iterations=320,
        min_seconds=0,
        strategy="ddp" if world else "",
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            events = list(agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=60))
    finally:
        server.stop(0)
    assert events[-1].HasField("result")
    counts = [
        e.progress
        for e in events
        if e.HasField("progress")
        and e.progress.stage == agent_pb2.STAGE_MEASURE
        and 0 < e.progress.iterations_done < 320
    ]
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


AGENTS = ("fwbench-grpc", "fwbench-measure")  # the agents' threads that serve in this test
SCHED_IDLE = 5  # Linux's number for the class, as /proc/PID/task/TID/stat's field 41 gives it


def policy(tid: int) -> int | None:
    """A thread of this process's scheduling class (0: the normal one); None once it ended."""
    try:
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return int(fields[38])  # field 41 of stat(5), counted after the command's closing ")"


def test_a_world_calls_threads_in_the_collector_run_at_the_idle_class() -> None:
    """The collector's threads that watch a world's Run (one a rank, and gRPC's thread that
    serves each rank's channel meanwhile) wake many times a second on CPUs the ranks step on;
    at SCHED_IDLE they run only when a CPU has nothing else to do. They end with the call, and
    no other thread changes class (an unprivileged thread could not change back). In a process
    of its own: an unprivileged one's gRPC threads stay idle-class after the call."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    script = "from test_quiet_threads import watch_a_world_call; watch_a_world_call()"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok", done.stdout


def watch_a_world_call() -> None:
    """One world call of two in-process fake agents, its threads' classes checked meanwhile."""
    from types import SimpleNamespace

    from fwbench.collector.agents.client import AgentClient
    from fwbench.collector.launchers.world_call import WorldClient

    servers = [
        create_server(FakePlugin(PluginContext(device="cpu")), name="fake-cpu", variant="cpu")
        for _ in range(2)
    ]
    addresses = [f"127.0.0.1:{server.port}" for server in servers]
    ranks = [SimpleNamespace(address=a, client=AgentClient("fake", a)) for a in addresses]
    request = agent_pb2.RunRequest(
        run_id="quiet",
        workload="gemm",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=1,
        params={"m": 10_000},
        warmup_iterations=0,
        min_iterations=150,
        max_iterations=150,
        min_seconds=0,
    )
    before = {t.native_id for t in threading.enumerate()}
    main = threading.get_native_id()
    world = WorldClient(SimpleNamespace(), ranks, lambda _, results: results[0])  # type: ignore[arg-type]
    seen: dict[str, int] = {}
    grpc_classes: set[int | None] = set()
    try:
        call = world.run(request, 60)
        for event in call:
            if event.HasField("progress") and event.progress.stage == agent_pb2.STAGE_MEASURE:
                grpc_classes |= {policy(tid) for tid in grpc_threads()}
                for thread in threading.enumerate():
                    new = thread.native_id not in before and not thread.name.startswith(AGENTS)
                    if new and (class_ := policy(thread.native_id)) is not None:
                        seen.setdefault(thread.name, class_)
        assert event.HasField("result")
    finally:
        world.close()
        for server in servers:
            server.stop(0)
    assert sum(name.startswith("fwbench-world-rank") for name in seen) == 2, seen
    assert len(seen) == 4, f"not one gRPC thread for each rank's channel: {seen}"
    assert set(seen.values()) == {SCHED_IDLE}, seen
    assert grpc_classes - {None} == {SCHED_IDLE}, grpc_classes
    assert policy(main) == 0
    for thread in threading.enumerate():
        if thread.native_id in before:
            assert policy(thread.native_id) in (0, None), thread.name
    # Back where the process may (root, as in CI); an unprivileged one cannot leave the class.
    after = {policy(tid) for tid in grpc_threads()} - {None}
    assert after == ({0} if os.geteuid() == 0 else {SCHED_IDLE}), after
    deadline = time.monotonic() + 10
    while any(t.native_id not in before and t.name in seen for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the call's threads outlived it"
        time.sleep(0.05)
    print("ok")


def _classes_while_measuring(tmp_path: Path, world: dict[str, str]) -> dict[str, set[int]]:
    """The real agent command line, alone or as a world's rank (`world`: its variables): each
    of its threads' scheduling classes while it measures, by kind ("grpc": gRPC core's)."""
    import json

    plugins = write_entry_points(tmp_path / "plugins", {"fake": "fake_plugin:FakePlugin"})
    ports = tmp_path / "ports.json"
    env = {
        **os.environ,
        **world,
        "PYTHONPATH": os.pathsep.join([str(plugins), str(HERE), *sys.path]),
    }
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fwbench.runtime.cli",
            "--plugin",
            "fake",
            "--ports-file",
            str(ports),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    classes: dict[str, set[int]] = {"grpc": set(), "other": set()}
    try:
        deadline = time.monotonic() + 60
        while not ports.exists():
            assert agent.poll() is None and time.monotonic() < deadline, "the agent did not serve"
            time.sleep(0.05)
        port = json.loads(ports.read_text())["grpc"]
        request = agent_pb2.RunRequest(
            workload="gemm",
            phase=agent_pb2.PHASE_TRAIN,
            batch_size=1,
            params={"m": 10_000},
            warmup_iterations=0,
            min_iterations=100,
            max_iterations=100,
            min_seconds=0,
            strategy="ddp" if world else "",
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            for event in agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=60):
                if event.HasField("progress") and event.progress.stage == agent_pb2.STAGE_MEASURE:
                    for task in Path(f"/proc/{agent.pid}/task").iterdir():
                        try:
                            comm = (task / "comm").read_text().strip()
                            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
                        except OSError:
                            continue
                        kind = (
                            "grpc"
                            if comm.startswith(("event_engine", "lifeguard", "grpc_"))
                            else "other"
                        )
                        classes[kind].add(int(stat[38]))
        assert event.HasField("result")
    finally:
        agent.kill()
        agent.wait()
    return classes


def test_a_worlds_rank_runs_grpcs_threads_at_the_idle_class(tmp_path: Path) -> None:
    """gRPC core polls several times a second on the rank's one CPU: at SCHED_IDLE from a
    world's Run on; the agent's Python threads stay at the normal class (an idle one holding
    the GIL would stall the stepping thread). An agent alone keeps the normal class."""
    rank = _classes_while_measuring(
        tmp_path / "rank",
        {
            "WORLD_SIZE": "2",
            "RANK": "1",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
        },
    )
    assert rank == {"grpc": {SCHED_IDLE}, "other": {0}}, rank
    alone = _classes_while_measuring(tmp_path / "alone", {})
    assert alone == {"grpc": {0}, "other": {0}}, alone
