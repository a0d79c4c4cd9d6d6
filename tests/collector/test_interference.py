"""Interference from scrapes whose counters the test sets (telemetry.cpu_load, load_columns),
the judgement of a row (interference.judge), the settings' checks and the wait for a quiet
host: the arithmetic is checked against figures worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fwbench.collector.run.cpu_load import cpu_load, load_columns
from fwbench.collector.run.interference import (
    InterferenceSettingsError,
    check_settings,
    judge,
    wait_for_quiet,
)
from fwbench.collector.run.telemetry import Scrape, summarize
from fwbench.collector.run.world_telemetry import WorldScraper
from fwbench.collector.store.database import ResultStore

AFFINITY = "fwbench_affinity_cpu_seconds_total"
PROCESS = "fwbench_process_cpu_seconds_total"


def scrapes(
    *,
    agent: float,
    user: float,
    steal: float = 0.0,
    cpus: int = 2,
    cpu_set: str = "0-1",
    kernel: str = "boot-1",
    times: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
    pressure: float = 0.0,
) -> list[Scrape]:
    """An agent on `cpus` CPUs burning `agent` CPU-seconds a second, its CPUs `user` busy a
    second in all (the agent included) and `steal` stolen, the rest idle; PSI cpu waiting
    `pressure` seconds a second."""
    idle = cpus - user - steal
    return [
        Scrape(
            t,
            {
                (PROCESS, "user"): agent * t,
                (PROCESS, "system"): 0.0,
                (AFFINITY, "user"): user * t,
                (AFFINITY, "idle"): idle * t,
                (AFFINITY, "steal"): steal * t,
                ("fwbench_affinity_cpus", ""): float(cpus),
                ("fwbench_affinity_info", f"{cpu_set} {kernel}"): 1.0,
                ("fwbench_host_pressure_cpu_waiting_seconds_total", ""): pressure * t,
                ("fwbench_host_pressure_memory_waiting_seconds_total", ""): 0.0,
            },
        )
        for t in times
    ]


def test_others_are_the_busy_time_less_the_agents_own() -> None:
    """2 CPUs, 1.5 CPU-s/s busy of which the agent 1.0, 0.1 stolen: others 0.5 / 2.0 = 25%,
    steal 5%, and a CPU waited for a quarter of the time."""
    columns = summarize(scrapes(agent=1.0, user=1.5, steal=0.1, pressure=0.25), 1.0, 2.0)
    assert columns["agent_cpus"] == 2
    assert columns["others_cpu_percent"] == pytest.approx(25.0)
    assert columns["steal_percent"] == pytest.approx(5.0)
    assert columns["cpu_pressure_percent"] == pytest.approx(25.0)
    assert columns["memory_pressure_percent"] == 0
    assert math.isnan(columns["cpu_frequency_mean_hertz"])  # not exported: unknown, not 0


def test_a_short_phase_is_judged_over_one_second_around_it() -> None:
    """A phase of 0.1 s would be a few ticks of /proc/stat: the window is widened to 1 s."""
    load = cpu_load(scrapes(agent=1.0, user=1.0), 1.5, 1.6)
    assert load is not None and load.seconds == pytest.approx(1.0)
    # ...but never past the scrapes there are: a phase at the very start keeps its own edge.
    early = cpu_load(scrapes(agent=1.0, user=1.0), 0.0, 0.1)
    assert early is not None and early.seconds == pytest.approx(0.55)


def test_rounding_below_zero_reads_as_no_others() -> None:
    """The agent's own counter (from /proc/PID/stat) may run a tick ahead of /proc/stat's."""
    columns = summarize(scrapes(agent=2.0, user=1.98), 1.0, 2.0)
    assert columns["others_cpu_percent"] == 0.0


def test_without_the_affinity_series_interference_is_unknown() -> None:
    """An agent of an older runtime: the columns are empty and the row is not judged."""
    old = [Scrape(t, {(PROCESS, "user"): t, (PROCESS, "system"): 0.0}) for t in (0.0, 1.0, 2.0)]
    columns = summarize(old, 0.5, 1.5)
    assert columns["agent_cpus"] is None and math.isnan(columns["others_cpu_percent"])
    assert judge(columns, 10.0) == {"interfered": None, "interference": None}


def test_a_row_of_unknown_interference_is_stored_with_its_columns_empty(tmp_path) -> None:
    """An agent of an older runtime (no affinity series): its row stores, the interference
    columns empty, the row neither interfered nor clean (CI found such an image's run
    stopped by the store refusing pandas' missing value)."""
    old = [Scrape(t, {(PROCESS, "user"): t, (PROCESS, "system"): 0.0}) for t in (0.0, 1.0, 2.0)]
    columns = summarize(old, 0.5, 1.5)
    row = {
        "schema_version": 10,
        "run_id": "r",
        "cell": 0,
        "agent": "old",
        "workload": "gemm",
        "phase": "infer",
        "batch_size": 1,
        "dtype": "float32",
        "status": "ok",
        **columns,
        **judge(columns, 10.0),
        "agent_cpus": pd.NA,
    }
    store = ResultStore(tmp_path / "store.sqlite")
    store.start_run("r", tmp_path / "r", "2026-11-28T00:00:00+00:00", {"run_id": "r"})
    store.add_result("r", row, [1000, 1100])
    stored = store.results("r").iloc[0]
    assert stored["agent_cpus"] is pd.NA and pd.isna(stored["others_cpu_percent"])
    assert stored["interfered"] is pd.NA


def test_ranks_on_the_same_cpus_are_not_each_others_interference() -> None:
    """Two ranks sharing CPUs 0-1 of one kernel each see both ranks' busy time: counted once,
    both ranks' CPU taken from it, nothing is left for others. Ranks on CPUs of their own
    each add their CPUs and their others."""
    shared = [
        cpu_load(scrapes(agent=0.9, user=1.9), 1.0, 2.0),
        cpu_load(scrapes(agent=1.0, user=1.9), 1.0, 2.0),
    ]
    together = load_columns([load for load in shared if load is not None])
    assert together["agent_cpus"] == 2 and together["others_cpu_percent"] == 0.0
    apart = [
        cpu_load(scrapes(agent=1.0, user=1.0, cpus=1, cpu_set="0"), 1.0, 2.0),
        cpu_load(scrapes(agent=0.5, user=1.0, cpus=1, cpu_set="1"), 1.0, 2.0),
    ]
    columns = load_columns([load for load in apart if load is not None])
    assert columns["agent_cpus"] == 2
    assert columns["others_cpu_percent"] == pytest.approx(25.0)  # 0.5 of 2 CPUs


def test_a_world_takes_every_ranks_load() -> None:
    world = WorldScraper(["127.0.0.1:1", "127.0.0.1:2"])
    world.scrapers[0].scrapes = scrapes(agent=1.0, user=1.0, cpus=1, cpu_set="0")
    world.scrapers[1].scrapes = scrapes(agent=0.2, user=1.0, cpus=1, cpu_set="1")
    columns = world.summary(1.0, 2.0)
    assert columns["agent_cpus"] == 2
    assert columns["others_cpu_percent"] == pytest.approx(40.0)  # 0.8 of 2 CPUs


@pytest.mark.parametrize(
    ("others", "steal", "interfered", "said"),
    [
        (9.9, 0.0, False, None),
        (10.1, 0.0, True, "other processes used 10% of the agent's 2 CPUs"),
        (0.0, 30.0, True, "the hypervisor gave 30% of the agent's 2 CPUs' time to other guests"),
    ],
)
def test_a_row_is_interfered_above_the_threshold(
    others: float, steal: float, interfered: bool, said: str | None
) -> None:
    verdict = judge({"others_cpu_percent": others, "steal_percent": steal, "agent_cpus": 2}, 10)
    assert verdict["interfered"] is interfered
    if said is None:
        assert verdict["interference"] is None
    else:
        assert verdict["interference"].startswith(said)


@pytest.mark.parametrize(
    ("threshold", "quiet", "said"),
    [
        (0.0, 0.0, "--interference-threshold 0: give a percent"),
        (101.0, 0.0, "--interference-threshold 101"),
        (float("nan"), 0.0, "--interference-threshold nan"),
        (10.0, -1.0, "--quiet-host -1: give the most seconds"),
        (10.0, 1e6, "--quiet-host 1e+06"),
    ],
)
def test_settings_out_of_range_are_refused(threshold: float, quiet: float, said: str) -> None:
    with pytest.raises(InterferenceSettingsError, match=said.replace("+", r"\+")):
        check_settings(threshold, quiet)
    check_settings(10.0, 0.0)
    check_settings(100.0, 3600.0)


def test_the_wait_for_a_quiet_host_ends_once_quiet_and_says_what_it_waits_for() -> None:
    looks = iter([50.0, 30.0, 2.0])
    said: list[str] = []
    left = wait_for_quiet(
        "agent:9100",
        60.0,
        10.0,
        said.append,
        look=lambda address: {"others_cpu_percent": next(looks), "agent_cpus": 2},
    )
    assert left == "" and len(said) == 2  # the third look found it quiet
    assert said[0].startswith("waiting for a quiet host (other processes used 50% of the agent's")


def test_the_wait_is_bounded_and_says_what_was_still_running() -> None:
    said: list[str] = []
    left = wait_for_quiet(
        "agent:9100", 0.0, 10.0, said.append, look=lambda address: {"others_cpu_percent": 80.0}
    )
    assert left == "other processes used 80% of the agent's CPUs"
    assert said == [
        "waiting for a quiet host (other processes used 80% of the agent's CPUs; 0 s left)"
    ]
