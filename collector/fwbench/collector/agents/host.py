"""What this host offers agents, probed without starting anything."""

from __future__ import annotations

from pathlib import Path

NVIDIA_DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl")


def nvidia_gpu_present() -> bool:
    """Whether this host has an NVIDIA driver loaded (what every CUDA agent needs)."""
    return any(Path(marker).exists() for marker in NVIDIA_DRIVER_MARKERS)
