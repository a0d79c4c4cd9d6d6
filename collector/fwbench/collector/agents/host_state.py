"""The host's state that matters for measurement, read the way pyperf's `system show` reads it
(`collector doctor`): how busy the CPUs are and with what (the load average, the busiest other
processes over a short sample, steal time on a VM), and what sets the clock (the cpufreq
governor, turbo or boost, SMT). A reading this host does not expose (a VM has no cpufreq, a
container may hide /sys) says "unreadable here" rather than guessing; one whose state would
bend a measurement says so in one line of advice. Reads only: nothing is tuned."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where processes are watched: `collector doctor --help` is fast
    import psutil

CPU_ROOT = Path("/sys/devices/system/cpu")
PROC_STAT = Path("/proc/stat")
UNREADABLE = "unreadable here"
DEFAULT_SAMPLE_SECONDS = 1.0
# Other processes using more than this share of the host's CPUs: a cell timed now would be
# interfered (the share a run judges its rows by, 10% by default: docs/report.md).
BUSY_SHARE = 0.10
TOP_PROCESSES = 5  # the busiest named, as pyperf names the few that matter
NAMED_PERCENT = 5.0  # of one CPU over the sample: below it a process is background, unnamed
STEAL_SHARE = 0.01  # of the CPU time: a VM's neighbours took enough to show in the figures
LOAD_PER_CPU = 0.25  # runnable work per CPU over the last minute worth a word


@dataclass(frozen=True)
class Reading:
    """One thing read: `state` in words (UNREADABLE where it cannot be), `advice` one line
    where that state would bend a measurement ("" where it would not), `value` the figures
    themselves for --json (None where unreadable)."""

    name: str
    state: str
    advice: str = ""
    value: Any = None


@dataclass(frozen=True)
class BusyProcess:
    pid: int
    name: str
    cpu_percent: float  # of one CPU over the sample (above 100 with several threads)
    command: str


def measurement_state(
    sample_seconds: float = DEFAULT_SAMPLE_SECONDS,
    cpu_root: Path = CPU_ROOT,
    proc_stat: Path = PROC_STAT,
) -> list[Reading]:
    """Every reading, the busy processes and steal time over one sample of `sample_seconds`
    (this process, the collector, left out: it only waits)."""
    before = _cpu_times(proc_stat)
    watched = _watch()
    time.sleep(sample_seconds)
    busy = _busy(watched)
    after = _cpu_times(proc_stat)
    cpus = os.cpu_count() or 1
    return [
        load_reading(cpus),
        busy_reading(busy, cpus, sample_seconds),
        steal_reading(before, after, sample_seconds),
        governor_reading(cpu_root),
        turbo_reading(cpu_root),
        smt_reading(cpu_root),
    ]


def as_json(readings: Sequence[Reading]) -> dict[str, Any]:
    return {reading.name: asdict(reading) for reading in readings}


def load_reading(cpus: int) -> Reading:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return Reading("load average", UNREADABLE)
    state = f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min; {cpus} CPUs)"
    advice = ""
    if one >= LOAD_PER_CPU * cpus:
        advice = (
            f"about {one:.1f} CPUs' worth of runnable work over the last minute: a run now "
            "would share the CPUs with it (busy processes below)"
        )
    return Reading("load average", state, advice, [one, five, fifteen])


def _watch() -> list[psutil.Process]:
    """Every process but this one, its CPU counter started (psutil measures from here)."""
    import psutil

    watched = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            process.cpu_percent(None)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        watched.append(process)
    return watched


def _busy(watched: Sequence[psutil.Process]) -> list[BusyProcess]:
    """The processes that used CPU since _watch(), busiest first; those gone are left out."""
    import psutil

    found = []
    for process in watched:
        try:
            percent = process.cpu_percent(None)
            if percent <= 0:
                continue
            command = " ".join(process.cmdline())[:120] or process.name()
            found.append(BusyProcess(process.pid, process.name(), percent, command))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(found, key=lambda p: -p.cpu_percent)


def busy_reading(busy: Sequence[BusyProcess], cpus: int, sample_seconds: float) -> Reading:
    """What other processes took of the host's CPUs over the sample, naming the busiest."""
    share = sum(p.cpu_percent for p in busy) / (100 * cpus)
    named = [p for p in busy if p.cpu_percent >= NAMED_PERCENT][:TOP_PROCESSES]
    state = f"{share:.0%} of {cpus} CPUs over {sample_seconds:g} s"
    if named:
        state += ": " + ", ".join(f"{p.name} (pid {p.pid}) {p.cpu_percent:.0f}%" for p in named)
    advice = ""
    if share > BUSY_SHARE:
        advice = (
            "a cell timed now would share the CPUs with them and come out slower: stop them "
            "or wait (`collector run --quiet-host SECONDS` waits for quiet before each cell)"
        )
    value = {"share_of_cpus": share, "processes": [asdict(p) for p in named]}
    return Reading("busy processes", state, advice, value)


def _cpu_times(proc_stat: Path) -> list[int] | None:
    """The host's CPU time counters (/proc/stat's first line: user, nice, system, idle,
    iowait, irq, softirq, steal), None where unreadable."""
    try:
        fields = proc_stat.read_text().splitlines()[0].split()
        return [int(value) for value in fields[1:9]] if fields[0] == "cpu" else None
    except (OSError, IndexError, ValueError):
        return None


def steal_reading(
    before: list[int] | None, after: list[int] | None, sample_seconds: float
) -> Reading:
    """The share of CPU time the hypervisor gave other guests over the sample."""
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return Reading("steal time", UNREADABLE)
    total = sum(after) - sum(before)
    if total <= 0:
        return Reading("steal time", UNREADABLE)
    share = (after[7] - before[7]) / total
    state = f"{share:.1%} of the CPU time over {sample_seconds:g} s"
    advice = ""
    if share >= STEAL_SHARE:
        advice = (
            "the hypervisor ran other guests on this VM's CPUs: figures vary with the "
            "neighbours; measure when steal stays near 0"
        )
    return Reading("steal time", state, advice, share)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def governor_reading(cpu_root: Path) -> Reading:
    """Each CPU's cpufreq governor; `performance` holds the clock, the others follow load."""
    found: dict[str, list[str]] = {}
    for folder in sorted(cpu_root.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        governor = _read(folder / "cpufreq" / "scaling_governor")
        if governor:
            found.setdefault(governor, []).append(folder.name[3:])
    if not found:
        return Reading(
            "CPU governor", f"{UNREADABLE} (no cpufreq: on a VM the host sets the clock)"
        )
    state = ", ".join(
        name if len(found) == 1 else f"{name} (CPUs {','.join(cpus)})"
        for name, cpus in found.items()
    )
    advice = ""
    if set(found) != {"performance"}:
        advice = (
            "the clock rises and falls with the load, so a cell's first steps run slower: "
            "`cpupower frequency-set -g performance` (root) holds it, as pyperf system tune does"
        )
    return Reading("CPU governor", state, advice, sorted(found))


def turbo_reading(cpu_root: Path) -> Reading:
    """Turbo (intel_pstate's no_turbo) or boost (cpufreq's boost), whichever this host has."""
    no_turbo = _read(cpu_root / "intel_pstate" / "no_turbo")
    boost = _read(cpu_root / "cpufreq" / "boost")
    if no_turbo in ("0", "1"):
        on, off = no_turbo == "0", "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo"
    elif boost in ("0", "1"):
        on, off = boost == "1", "echo 0 > /sys/devices/system/cpu/cpufreq/boost"
    else:
        return Reading("turbo / boost", UNREADABLE)
    advice = ""
    if on:
        advice = (
            "the clock depends on temperature and on how many cores are busy, so figures "
            f"drift: `{off}` (root) turns it off for measuring"
        )
    return Reading("turbo / boost", "on" if on else "off", advice, on)


def smt_reading(cpu_root: Path) -> Reading:
    """Simultaneous multithreading: whether two hardware threads share each core."""
    active, control = _read(cpu_root / "smt" / "active"), _read(cpu_root / "smt" / "control")
    if control in ("notsupported", "notimplemented"):
        return Reading("SMT", "not supported by this CPU (or hidden by the hypervisor)", "", False)
    if active not in ("0", "1"):
        return Reading("SMT", UNREADABLE)
    if active == "0":
        return Reading("SMT", f"off ({control or 'control unreadable'})", "", False)
    advice = (
        "two hardware threads share each core: an agent's speed depends on what runs on its "
        "siblings; pin one thread per core (`--launcher docker --cpuset`) or turn SMT off "
        "(`echo off > /sys/devices/system/cpu/smt/control`, root)"
    )
    return Reading("SMT", "on", advice, True)
