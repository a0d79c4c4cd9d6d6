"""What else the agent's CPUs did: the series from which the collector tells whether other
processes took CPU time while a cell was timed (docs/telemetry.md, "Interference").

- fwbench_affinity_cpu_seconds_total{mode}: /proc/stat's time of the CPUs in this agent's
  affinity mask only (all of them together). Busy time there, less the agent's own CPU time
  (fwbench_process_cpu_seconds_total), is what other processes used of the CPUs the agent may
  run on; steal there is what the hypervisor gave to other guests.
- fwbench_affinity_cpus and fwbench_affinity_info{cpus, kernel}: how many CPUs, which ones, and
  the kernel's boot id: two processes with the same boot id read the same /proc/stat (Docker
  containers of one host do, whatever their host names), so a world's ranks can be combined.
- fwbench_host_pressure_{cpu,memory}_waiting_seconds_total: Linux PSI's "some" totals (time
  in which at least one task waited for a CPU, or for memory), named as node_exporter names
  them; absent where /proc/pressure is not readable (kernels before 4.20, or PSI off).
- fwbench_affinity_cpu_frequency_hertz: the mean current frequency of the affinity's CPUs
  (cpufreq's scaling_cur_freq); absent where cpufreq is not exposed (most VMs).

Everything is read at scrape time from files; a file that cannot be read drops its family, never
the scrape. `root` lets tests give a fake /proc and /sys."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

# /proc/stat's per-CPU columns in order (proc(5)); guest and guest_nice are already counted in
# user and nice, so they are left out.
STAT_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PRESSURE = ("cpu", "memory")


def cpu_list(cpus: list[int]) -> str:
    """The kernel's list format: [0, 1, 2, 5] as "0-2,5"."""
    runs = [
        [cpu for _, cpu in run]
        for _, run in itertools.groupby(enumerate(sorted(cpus)), lambda pair: pair[1] - pair[0])
    ]
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def per_cpu_seconds(stat_text: str, ticks_per_second: float) -> dict[int, dict[str, float]]:
    """/proc/stat's "cpuN ..." lines as {N: {mode: seconds}}; the "cpu" total line is left out,
    and so is a line with fewer columns than the four every kernel has."""
    found: dict[int, dict[str, float]] = {}
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        values = rest.split()
        if len(values) < 4:
            continue
        found[int(name[3:])] = {
            mode: int(value) / ticks_per_second
            for mode, value in zip(STAT_MODES, values, strict=False)
        }
    return found


def pressure_waiting_seconds(text: str) -> float | None:
    """The "some" line's total (microseconds) of a /proc/pressure file, in seconds."""
    for line in text.splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "total":
                    return int(value) / 1e6
    return None


class HostLoadCollector(Collector):
    """The affinity's CPU time by mode, PSI totals and CPU frequency, read at scrape time.

    root: where /proc and /sys are ("/"; tests pass a folder of fake files); affinity: the CPUs
    this process may run on (os.sched_getaffinity; tests inject)."""

    def __init__(
        self,
        root: Path = Path("/"),
        affinity: Callable[[], set[int]] | None = None,
    ) -> None:
        self._root = root
        self._affinity = affinity or (lambda: set(os.sched_getaffinity(0)))
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._kernel = self._read("proc/sys/kernel/random/boot_id") or ""

    def _read(self, relative: str) -> str | None:
        try:
            return (self._root / relative).read_text().strip()
        except (OSError, ValueError):
            return None

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | InfoMetricFamily]:
        cpus = sorted(self._affinity())
        yield GaugeMetricFamily(
            "fwbench_affinity_cpus", "CPUs this agent may run on (its affinity mask)", len(cpus)
        )
        yield InfoMetricFamily(
            "fwbench_affinity",
            "Which CPUs the agent may run on, and the boot id of the kernel whose /proc/stat "
            "they are read from",
            {"cpus": cpu_list(cpus), "kernel": self._kernel.strip()},
        )
        stat = self._read("proc/stat")
        if stat is not None:
            per_cpu = per_cpu_seconds(stat, self._ticks)
            mine = [per_cpu[cpu] for cpu in cpus if cpu in per_cpu]
            if mine:
                family = CounterMetricFamily(
                    "fwbench_affinity_cpu_seconds",
                    "CPU time of the CPUs in this agent's affinity mask, all together, by mode",
                    labels=["mode"],
                )
                for mode in STAT_MODES:
                    values = [times[mode] for times in mine if mode in times]
                    if len(values) == len(mine):
                        family.add_metric([mode], sum(values))
                yield family
        for resource in PRESSURE:
            text = self._read(f"proc/pressure/{resource}")
            waiting = pressure_waiting_seconds(text) if text else None
            if waiting is not None:
                yield CounterMetricFamily(
                    f"fwbench_host_pressure_{resource}_waiting_seconds",
                    f"Time in which at least one task of the host waited for {resource} "
                    "(Linux PSI, some)",
                    value=waiting,
                )
        frequencies = [
            self._read(f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq") for cpu in cpus
        ]
        known = [float(f) * 1e3 for f in frequencies if f and f.isdigit()]
        if known:
            yield GaugeMetricFamily(
                "fwbench_affinity_cpu_frequency_hertz",
                "Mean current frequency of the CPUs in this agent's affinity mask",
                value=sum(known) / len(known),
            )
