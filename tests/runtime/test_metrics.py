"""The agent's /metrics: what it exposes after real runs, and that promtool (Debian's
prometheus package, installed by `make test`) finds no lint problem in it."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import urllib.request

from fake_nvml import two_gpus
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.gpu import GpuCollector
from fwbench.runtime.metrics import STEP_BUCKETS, AgentMetrics, host_cpu_seconds

FAST = {"warmup_iterations": 1, "min_iterations": 5, "min_seconds": 0.0}


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
    """This host has no GPU: a fake NVML with two devices (one without energy) stands in."""
    metrics = AgentMetrics({"agent": "lint"}, gpu=GpuCollector(two_gpus()))
    labels = {"workload": "gemm", "phase": "infer", "mode": "eager", "dtype": "float32"}
    metrics.workload_started({**labels, "batch_size": "1"})
    metrics.iterations.labels(workload="gemm", phase="infer").inc(3)
    metrics.workload_finished({**labels, "batch_size": "1"}, [300_000, 310_000])
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


def test_workload_info_names_the_last_cell_and_resources_are_exposed(stub, agent):
    run(stub, 50, batch_size=3)
    found = samples(scrape(agent))
    (info,) = found["fwbench_workload_info"]
    assert info.labels == {
        "workload": "gemm",
        "phase": "infer",
        "mode": "eager",
        "dtype": "float32",
        "batch_size": "3",
    }
    assert info.value == 0  # finished
    modes = {s.labels["mode"] for s in found["fwbench_host_cpu_seconds_total"]}
    assert {"user", "system", "idle", "iowait"} <= modes
    process = {s.labels["mode"]: s.value for s in found["fwbench_process_cpu_seconds_total"]}
    assert process["user"] > 0 and set(process) == {"user", "system"}
    assert found["fwbench_process_threads"][0].value >= 2
    assert found["fwbench_host_memory_available_bytes"][0].value > 0
    assert found["fwbench_host_memory_available_bytes"][0].value <= (
        found["fwbench_host_memory_total_bytes"][0].value
    )


def test_host_cpu_seconds_parses_proc_stat_modes():
    text = "cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 50 2 25 500 10 0 1 1 0 0\n"
    seconds = host_cpu_seconds(text, ticks_per_second=100)
    assert seconds == {
        "user": 1.0,
        "nice": 0.05,
        "system": 0.5,
        "idle": 10.0,
        "iowait": 0.2,
        "irq": 0.01,
        "softirq": 0.02,
        "steal": 0.03,
    }


def test_step_buckets_cover_microseconds_to_100_seconds():
    assert STEP_BUCKETS[0] == 1e-6 and STEP_BUCKETS[-1] == 100.0
    assert list(STEP_BUCKETS) == sorted(set(STEP_BUCKETS))
    assert all(b / a < 1.7 for a, b in itertools.pairwise(STEP_BUCKETS))
