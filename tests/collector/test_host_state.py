"""`collector doctor`'s measuring state (agents/host_state.py): what it reads from a /sys tree
under the test's control (governor, turbo, SMT), steal time from two /proc/stat samples, and
on the real host a busy process the test starts, named by its pid, the collector itself never
named. Where this host hides a reading, it says "unreadable here", never a guess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fwbench.collector.agents import host_state
from fwbench.collector.agents.host_state import UNREADABLE
from fwbench.collector.cli import app


def _sys(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "cpu"
    root.mkdir()
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_governor_turbo_and_smt_as_a_tuned_host_shows_them(tmp_path: Path) -> None:
    root = _sys(
        tmp_path,
        {
            "cpu0/cpufreq/scaling_governor": "performance",
            "cpu1/cpufreq/scaling_governor": "performance",
            "intel_pstate/no_turbo": "1",
            "smt/active": "0",
            "smt/control": "off",
        },
    )
    governor = host_state.governor_reading(root)
    assert governor.state == "performance" and not governor.advice
    turbo = host_state.turbo_reading(root)
    assert turbo.state == "off" and turbo.value is False and not turbo.advice
    smt = host_state.smt_reading(root)
    assert smt.state.startswith("off") and not smt.advice


def test_an_untuned_host_gets_one_line_of_advice_each(tmp_path: Path) -> None:
    root = _sys(
        tmp_path,
        {
            "cpu0/cpufreq/scaling_governor": "powersave",
            "cpu10/cpufreq/scaling_governor": "performance",
            "cpufreq/boost": "1",
            "smt/active": "1",
            "smt/control": "on",
        },
    )
    governor = host_state.governor_reading(root)
    assert governor.state == "powersave (CPUs 0), performance (CPUs 10)"
    assert "cpupower frequency-set -g performance" in governor.advice
    turbo = host_state.turbo_reading(root)
    assert turbo.state == "on" and "cpufreq/boost" in turbo.advice
    smt = host_state.smt_reading(root)
    assert smt.state == "on" and "smt/control" in smt.advice
    for reading in (governor, turbo, smt):
        assert "\n" not in reading.advice


def test_what_is_not_exposed_is_unreadable_not_guessed(tmp_path: Path) -> None:
    root = _sys(tmp_path, {"online": "0-1"})  # as in a VM: no cpufreq, no smt folder
    for read in (host_state.governor_reading, host_state.turbo_reading, host_state.smt_reading):
        reading = read(root)
        assert reading.state.startswith(UNREADABLE) and reading.value is None and not reading.advice
    assert host_state.steal_reading(None, [1] * 8, 1.0).state == UNREADABLE
    assert host_state._cpu_times(tmp_path / "no-such-stat") is None


def test_steal_is_its_share_of_the_cpu_time_between_two_samples(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n")
    before = host_state._cpu_times(stat)
    stat.write_text("cpu  150 0 70 900 10 0 0 80 0 0\ncpu0 1 2 3\n")
    after = host_state._cpu_times(stat)
    steal = host_state.steal_reading(before, after, 1.0)
    assert steal.value == pytest.approx(40 / 210)
    assert steal.state.startswith("19.0% of the CPU time") and "other guests" in steal.advice
    assert host_state.steal_reading(before, before, 1.0).state == UNREADABLE  # no time passed


def test_doctor_names_a_busy_process_and_never_itself() -> None:
    """A child spinning on one CPU is named by its pid among the busiest, with the CPU it got
    (how much depends on what else the host runs: only that it got some is asserted); the
    collector (this process, sleeping through the sample) is left out."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started and spinning before the sample begins
        done = CliRunner().invoke(app, ["doctor", "--json", "--sample", "1"])
        assert done.exit_code == 0, done.output
        busy = json.loads(done.output)["measurement"]["busy processes"]
    finally:
        hog.kill()
        hog.wait()
    named = {p["pid"]: p for p in busy["value"]["processes"]}
    assert hog.pid in named, busy
    assert named[hog.pid]["cpu_percent"] > 0, busy  # 29.7% on a loaded 2-CPU host
    assert os.getpid() not in named
    assert busy["value"]["share_of_cpus"] > 0
    assert f"(pid {hog.pid})" in busy["state"]


def test_doctor_prints_the_measuring_state_and_refuses_a_bad_sample() -> None:
    done = CliRunner().invoke(app, ["doctor", "--sample", "0.2"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "measuring here now" in done.output
    for name in ("load average", "busy processes", "steal time", "CPU governor", "SMT"):
        assert name in done.output
    refused = CliRunner().invoke(app, ["doctor", "--sample", "0"])
    assert refused.exit_code == 2 and "--sample" in refused.output
