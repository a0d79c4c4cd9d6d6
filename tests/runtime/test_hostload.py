"""The agent's interference series (hostload.py): read from a fake /proc and /sys whose
contents the test sets, so that what is summed, left out and dropped is known exactly; and
from the real files of this host, linted by promtool."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_metrics import promtool_lint

from fwbench.runtime.hostload import (
    HostLoadCollector,
    cpu_list,
    per_cpu_seconds,
    pressure_waiting_seconds,
)

TICKS = os.sysconf("SC_CLK_TCK")
STAT = """cpu  900 0 300 5000 10 0 5 40 0 0
cpu0 100 0 100 1000 1 0 1 10 0 0
cpu1 200 0 50 2000 2 0 2 20 0 0
cpu2 600 0 150 2000 7 0 2 10 0 0
intr 12345
ctxt 999
"""
PRESSURE_CPU = "some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\nfull avg10=0 total=0\n"


def fake_root(tmp_path: Path, *, pressure: bool = True, frequency: bool = True) -> Path:
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (tmp_path / "proc/stat").write_text(STAT)
    if pressure:
        (tmp_path / "proc/pressure").mkdir()
        (tmp_path / "proc/pressure/cpu").write_text(PRESSURE_CPU)
        (tmp_path / "proc/pressure/memory").write_text("some avg10=0 total=0\n")
    if frequency:
        for cpu, khz in ((0, 2_000_000), (1, 3_000_000), (2, 1_000_000)):
            folder = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
            folder.mkdir(parents=True)
            (folder / "scaling_cur_freq").write_text(f"{khz}\n")
    return tmp_path


def exported(collector: HostLoadCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_cpu_list_is_the_kernels_format() -> None:
    assert cpu_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert cpu_list([3]) == "3"
    assert cpu_list([]) == ""


def test_per_cpu_lines_are_read_and_the_total_line_left_out() -> None:
    found = per_cpu_seconds(STAT, 100.0)
    assert sorted(found) == [0, 1, 2]
    assert found[1]["user"] == 2.0 and found[1]["steal"] == 0.2 and found[1]["idle"] == 20.0
    assert "guest" not in found[0]  # counted in user already


def test_pressure_total_is_the_some_line_in_seconds() -> None:
    assert pressure_waiting_seconds(PRESSURE_CPU) == 2.5
    assert pressure_waiting_seconds("full avg10=0 total=7\n") is None


def test_only_the_affinity_cpus_are_summed(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    values = exported(HostLoadCollector(root, affinity=lambda: {0, 1}))
    affinity = "fwbench_affinity_cpu_seconds_total"
    assert values[(affinity, (("mode", "user"),))] == pytest.approx(300 / TICKS)  # no cpu2
    assert values[(affinity, (("mode", "steal"),))] == pytest.approx(30 / TICKS)
    assert values[(affinity, (("mode", "idle"),))] == pytest.approx(3000 / TICKS)
    assert values[("fwbench_affinity_cpus", ())] == 2
    assert values[("fwbench_affinity_info", (("cpus", "0-1"), ("kernel", "boot-1")))] == 1
    assert values[("fwbench_host_pressure_cpu_waiting_seconds_total", ())] == 2.5
    assert values[("fwbench_host_pressure_memory_waiting_seconds_total", ())] == 0
    assert values[("fwbench_affinity_cpu_frequency_hertz", ())] == pytest.approx(2.5e9)


def test_unreadable_files_drop_their_families_not_the_scrape(tmp_path: Path) -> None:
    root = fake_root(tmp_path, pressure=False, frequency=False)
    (root / "proc/stat").unlink()
    names = {name for name, _ in exported(HostLoadCollector(root, affinity=lambda: {0}))}
    assert names == {"fwbench_affinity_cpus", "fwbench_affinity_info"}


def test_the_real_exposition_passes_promtool() -> None:
    registry = CollectorRegistry()
    registry.register(HostLoadCollector())
    text = generate_latest(registry).decode()
    assert "fwbench_affinity_cpu_seconds_total{" in text  # this host's /proc/stat is readable
    promtool_lint(text)
