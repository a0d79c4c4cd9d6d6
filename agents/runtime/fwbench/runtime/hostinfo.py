"""Facts about the host that can distort a measurement, read once at agent start-up."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import psutil

from fwbench.agent.v1 import agent_pb2
from fwbench.spec import startup

# Variables that change how frameworks thread, which devices they see, or how memory is
# allocated (glibc malloc tunables, a preloaded allocator such as jemalloc: tf-eigen's conv2d
# is 13% faster here with MALLOC_ARENA_MAX=1, docs/report.md); reported in Describe next to
# the plugin's own switches.
THREAD_AND_DEVICE_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_THREADING_LAYER",  # the BLAS a process loads, and how it threads (runtime/blas.py)
    "BLIS_NUM_THREADS",
    "FWBENCH_EXPECT_BLAS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "FWBENCH_DEVICE",  # these reach the plugin as its PluginContext
    startup.THREADS,
    "FWBENCH_INTEROP_THREADS",
    "FWBENCH_TF32",
    "FWBENCH_CUDNN_BENCHMARK",
    "FWBENCH_CUDA_EVENTS",
    "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def in_container() -> bool:
    cgroup = _read("/proc/1/cgroup")
    return (
        Path("/.dockerenv").exists()
        or "container" in os.environ
        or any(word in cgroup for word in ("docker", "containerd", "kubepods", "lxc"))
    )


def host_info() -> agent_pb2.HostInfo:
    return agent_pb2.HostInfo(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        logical_cores=os.cpu_count() or 0,
        physical_cores=psutil.cpu_count(logical=False) or 0,
        usable_cores=len(os.sched_getaffinity(0)),
        memory_total_bytes=psutil.virtual_memory().total,
        os=f"{platform.system()} {platform.release()}",
        cpu_governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        in_container=in_container(),
    )


# Names (comma-separated) of further variables to report: the collector lists there what its
# `--agent-env` set, and refuses an agent whose process does not report them as set.
REPORT_VARIABLE = startup.REPORT_VARIABLES


def environment_switches() -> dict[str, str]:
    """The variables in effect that can change a measurement: THREAD_AND_DEVICE_VARIABLES and
    those REPORT_VARIABLE names."""
    named = [name.strip() for name in os.environ.get(REPORT_VARIABLE, "").split(",")]
    names = dict.fromkeys([*THREAD_AND_DEVICE_VARIABLES, *filter(None, named)])
    return {name: os.environ[name] for name in names if name in os.environ}
