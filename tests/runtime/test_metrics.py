"""The agent's /metrics: what it exposes after real runs, and that promtool (Debian's
prometheus package, installed by `make test`) finds no lint problem in it."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import urllib.request
from collections import namedtuple

import psutil
from fake_nvml import two_gpus
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.gpu import GpuCollector
from fwbench.runtime.metrics import (
    HOST_CPU_MODES,
    STEP_BUCKETS,
    AgentMetrics,
    ResourceCollector,
    host_cpu_seconds,
)

FAST = {"warmup_iterations": 1, "min_iterations": 5, "min_seconds": 0.0}
CELL = {"workload": "gemm", "phase": "infer", "mode": "eager", "dtype": "float32"}


def scrape(agent) -> str:
    url = f"http://127.0.0.1:{agent.metrics_port}/metrics"
    return urllib.request.urlopen(url, timeout=5).read().decode()


def samples(body: str) -> dict[str, list]:
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def run(stub, m: int, batch_size: int = 1, **fields) -> agent_pb2.RunResult:
    """A fake gemm whose step sleeps m microseconds."""
    req = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=batch_size,
        params={"m": m},
        **{**FAST, **fields},
    )
    return list(stub.Run(req, timeout=30))[-1].result


def promtool_lint(exposition: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: `make test` installs Debian's prometheus package"
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True
    )
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr


def test_promtool_finds_no_lint_problem(stub, agent):
    run(stub, 300)
    promtool_lint(scrape(agent))


def test_promtool_finds_no_lint_problem_with_gpu_series():
    """This host has no GPU: a fake NVML with two devices (one without energy) stands in.
    Linted while a cell runs (fwbench_workload_info present) and after (absent)."""
    metrics = AgentMetrics({"agent_name": "lint"}, gpu=GpuCollector(two_gpus()))
    metrics.workload_started({**CELL, "batch_size": "1"})
    metrics.iterations.labels(workload="gemm", phase="infer").inc(3)
    running = generate_latest(metrics.registry).decode()
    assert "fwbench_workload_info{" in running
    promtool_lint(running)
    metrics.workload_finished({**CELL, "batch_size": "1"}, [300_000, 310_000])
    metrics.runs.labels(status="ok").inc()
    exposition = generate_latest(metrics.registry).decode()
    assert "fwbench_gpu_energy_joules_total" in exposition
    assert "fwbench_process_resident_memory_peak_bytes" in exposition
    promtool_lint(exposition)


def test_step_histogram_holds_every_timed_sample_of_the_run(stub, agent):
    result = run(stub, 300, min_iterations=7)
    found = samples(scrape(agent))
    count = next(
        s
        for s in found["fwbench_workload_step_duration_seconds_count"]
        if s.labels == {"workload": "gemm", "phase": "infer"}
    )
    assert count.value == len(result.sample_nanoseconds) == 7
    total = next(iter(found["fwbench_workload_step_duration_seconds_sum"])).value
    assert abs(total - sum(result.sample_nanoseconds) / 1e9) < 1e-6
    seconds = [ns / 1e9 for ns in result.sample_nanoseconds]
    for bucket in found["fwbench_workload_step_duration_seconds_bucket"]:
        bound = float(bucket.labels["le"])
        assert bucket.value == sum(1 for s in seconds if s <= bound), bucket.labels["le"]
    assert min(seconds) > 0.00025  # a 300 us sleep: the 250 us bucket must be empty


def test_workload_info_is_1_with_the_cell_while_it_runs_and_absent_after():
    metrics = AgentMetrics({"agent_name": "info"})
    assert "fwbench_workload_info" not in samples(generate_latest(metrics.registry).decode())
    metrics.workload_started({**CELL, "batch_size": "3"})
    found = samples(generate_latest(metrics.registry).decode())
    (info,) = found["fwbench_workload_info"]
    assert info.labels == {**CELL, "batch_size": "3"} and info.value == 1
    assert found["fwbench_workload_running"][0].value == 1
    metrics.workload_finished({**CELL, "batch_size": "3"})
    found = samples(generate_latest(metrics.registry).decode())
    assert "fwbench_workload_info" not in found  # an info series is 1 or absent, never 0
    assert found["fwbench_workload_running"][0].value == 0


def test_agent_info_names_the_agent_in_agent_name_not_the_target_label_agent():
    metrics = AgentMetrics({"agent_name": "torch-cpu", "framework": "torch"})
    (info,) = samples(generate_latest(metrics.registry).decode())["fwbench_agent_info"]
    assert info.labels == {"agent_name": "torch-cpu", "framework": "torch"} and info.value == 1


def test_resident_memory_is_exported_once_under_the_standard_name():
    found = samples(generate_latest(AgentMetrics({"agent_name": "rss"}).registry).decode())
    assert found["process_resident_memory_bytes"][0].value > 0
    assert "fwbench_process_resident_memory_bytes" not in found
    assert "fwbench_process_resident_memory_peak_bytes" in found


def test_an_idle_agent_after_a_run_exposes_no_cell_and_its_resources(stub, agent):
    run(stub, 50, batch_size=3)
    found = samples(scrape(agent))
    assert "fwbench_workload_info" not in found
    assert found["fwbench_workload_running"][0].value == 0
    modes = {s.labels["mode"] for s in found["fwbench_host_cpu_seconds_total"]}
    assert modes == set(HOST_CPU_MODES)  # Linux: psutil has every mode
    process = {s.labels["mode"]: s.value for s in found["fwbench_process_cpu_seconds_total"]}
    assert process["user"] > 0 and set(process) == {"user", "system"}
    assert found["fwbench_process_threads"][0].value >= 2
    assert found["fwbench_host_memory_available_bytes"][0].value > 0
    assert found["fwbench_host_memory_available_bytes"][0].value <= (
        found["fwbench_host_memory_total_bytes"][0].value
    )


def host_cpu_exported(collector: ResourceCollector) -> dict[str, float]:
    (family,) = [f for f in collector.collect() if f.name == "fwbench_host_cpu_seconds"]
    return {s.labels["mode"]: s.value for s in family.samples if s.name.endswith("_total")}


def test_host_cpu_is_psutil_cpu_times_by_mode():
    """The real reader: each exported mode lies between psutil's readings just before and
    just after the scrape (counters only grow)."""
    before = psutil.cpu_times()
    exported = host_cpu_exported(ResourceCollector())
    after = psutil.cpu_times()
    assert set(exported) == set(HOST_CPU_MODES)
    for mode, value in exported.items():
        assert getattr(before, mode) <= value <= getattr(after, mode), mode


def test_host_cpu_leaves_out_guest_time_and_modes_the_platform_lacks():
    """guest is already inside user; a platform without iowait, irq... exports what it has."""
    linux = namedtuple("linux", [*HOST_CPU_MODES, "guest", "guest_nice"])
    times = linux(1.0, 0.05, 0.5, 10.0, 0.2, 0.01, 0.02, 0.03, 0.7, 0.0)
    exported = host_cpu_exported(ResourceCollector(cpu_times=lambda: times))
    assert exported == dict(zip(HOST_CPU_MODES, times[:8], strict=True))
    darwin = namedtuple("darwin", ["user", "nice", "system", "idle"])
    assert host_cpu_seconds(darwin(1.0, 0.0, 2.0, 3.0)) == {
        "user": 1.0,
        "nice": 0.0,
        "system": 2.0,
        "idle": 3.0,
    }


def test_step_buckets_cover_microseconds_to_100_seconds():
    assert STEP_BUCKETS[0] == 1e-6 and STEP_BUCKETS[-1] == 100.0
    assert list(STEP_BUCKETS) == sorted(set(STEP_BUCKETS))
    assert all(b / a < 1.7 for a, b in itertools.pairwise(STEP_BUCKETS))


def test_host_cpu_that_cannot_be_read_leaves_out_only_its_series():
    def unreadable():
        raise PermissionError("/proc/stat")

    names = {f.name for f in ResourceCollector(cpu_times=unreadable).collect()}
    assert "fwbench_host_cpu_seconds" not in names
    assert "fwbench_host_memory_available_bytes" in names
