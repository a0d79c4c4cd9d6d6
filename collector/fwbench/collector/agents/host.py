"""What this host offers agents, probed without starting or installing anything: CPU,
memory, the NVIDIA driver and, through NVML, its GPUs (`collector doctor`, and the check that
refuses a GPU agent on a host without a driver)."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NVIDIA_DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl")


def nvidia_gpu_present() -> bool:
    """Whether this host has an NVIDIA driver loaded (what every CUDA agent needs)."""
    return any(Path(marker).exists() for marker in NVIDIA_DRIVER_MARKERS)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def host_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count() or 0,
        "usable_cpus": len(os.sched_getaffinity(0)),
        "memory_bytes": memory_bytes(),
        "collector_python": platform.python_version(),
    }


@dataclass
class NvidiaFacts:
    driver_loaded: bool
    driver_version: str = ""
    nvml: str = ""  # "ok", or why NVML could not be read
    devices: list[dict[str, Any]] = field(default_factory=list)


def nvidia_facts() -> NvidiaFacts:
    """The driver (its /proc marker) and, when NVML loads, each device's name and memory."""
    facts = NvidiaFacts(driver_loaded=nvidia_gpu_present())
    version_file = Path(NVIDIA_DRIVER_MARKERS[0])
    if version_file.exists():
        facts.driver_version = version_file.read_text(errors="replace").splitlines()[0].strip()
    try:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py: optional here
    except ImportError:
        facts.nvml = "not checked: nvidia-ml-py is not installed in the collector's environment"
        return facts
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        facts.nvml = f"NVML does not load: {error}"
        return facts
    try:
        facts.driver_version = str(pynvml.nvmlSystemGetDriverVersion())
        for index in range(pynvml.nvmlDeviceGetCount()):
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(device)
            name = pynvml.nvmlDeviceGetName(device)
            facts.devices.append(
                {"index": index, "name": str(name), "memory_bytes": int(memory.total)}
            )
        facts.nvml = "ok"
    except pynvml.NVMLError as error:
        facts.nvml = f"NVML answered with an error: {error}"
    finally:
        pynvml.nvmlShutdown()
    return facts
